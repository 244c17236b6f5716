"""``CellSample``: the per-request table of one cell, as numpy arrays, beside its ``CellResult``."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specfleet.contract.workload import ItlStatistic, SLOSpec
from specfleet.errors import InputError
from specfleet.measure.metrics import NS_PER_MS, Chunks, meets_slo, output_tokens, slo_met_mask
from specfleet.results.cell import CellResult
from specfleet.results.records import RequestRecord

FloatArray = npt.NDArray[np.float64]
NS_PER_S = 1e9


@dataclass(frozen=True, eq=False)
class CellSample:
    """One row per measured request (failed ones included, with 0 qualified tokens).

    ``qualified_tokens``: output tokens of the request if it met its SLO, else 0
    (``specfleet.measure.metrics.meets_slo`` and ``output_tokens``, as the cell's throughput counts them).
    ``durations_s``: send to last chunk (or to the failure), the request's busy time.
    ``ttft_ms``: NaN where no first token arrived or the request failed.
    ``itl_ms``: the SLO-bound ITL series of each completed request (empty otherwise).
    """

    cell: CellResult
    qualified_tokens: FloatArray
    durations_s: FloatArray
    ttft_ms: FloatArray
    itl_ms: tuple[FloatArray, ...]

    def __post_init__(self) -> None:
        n = len(self.qualified_tokens)
        if n == 0:
            raise InputError(f"cell {self.cell.identity.label}: no per-request rows")
        if not (len(self.durations_s) == len(self.ttft_ms) == len(self.itl_ms) == n):
            raise InputError(f"cell {self.cell.identity.label}: per-request arrays differ in length")
        if np.any(self.qualified_tokens < 0) or np.any(self.durations_s < 0):
            raise InputError(f"cell {self.cell.identity.label}: negative tokens or durations")

    @classmethod
    def from_records(cls, cell: CellResult, records: Sequence[RequestRecord], slo: SLOSpec) -> "CellSample":
        """Build from the Parquet-loaded records with the metrics module's SLO and token rules."""
        return cls(
            cell=cell,
            qualified_tokens=qualified_tokens_of(records, slo),
            durations_s=np.asarray([busy_s(r) for r in records], dtype=np.float64),
            ttft_ms=np.asarray(
                [r.ttft_ns / NS_PER_MS if r.ok and r.ttft_ns is not None else np.nan for r in records],
                dtype=np.float64,
            ),
            itl_ms=tuple(slo_itl_ms(r, slo.itl_statistic) for r in records),
        )

    @property
    def qualified_tokens_per_s(self) -> float:
        """The cell's SLO-qualified accepted tokens per second. A usable cell always has one (it
        completed a request, so its window is over 0 s); a missing rate is an error, never 0."""
        rate = self.cell.throughput.qualified_tokens_per_s
        if rate is None:
            raise InputError(f"cell {self.cell.identity.label}: no qualified tokens per s to compare "
                             f"(measured window {self.cell.throughput.duration_s:g} s)")
        return rate

    def pooled_itl_ms(self) -> FloatArray:
        return np.concatenate([*self.itl_ms, np.empty(0)])


def qualified_tokens(record: RequestRecord, slo: SLOSpec) -> float:
    """The request's output tokens if it met its SLO, else 0."""
    return float(output_tokens(record)) if record.ok and meets_slo(record, slo) else 0.0


def qualified_tokens_of(records: Sequence[RequestRecord], slo: SLOSpec) -> FloatArray:
    """``qualified_tokens`` of each of ``records``, the SLO checked for all of them at once
    (``slo_met_mask``, the same arithmetic as ``meets_slo``)."""
    chunks = Chunks.of(records)
    out = np.zeros(len(records), dtype=np.float64)
    produced = np.fromiter((output_tokens(r) for r in chunks.records), dtype=np.float64, count=len(chunks.records))
    out[[i for i, r in enumerate(records) if r.ok]] = np.where(slo_met_mask(chunks, slo), produced, 0.0)
    return out


def busy_s(record: RequestRecord) -> float:
    """Send to last chunk (or to the failure)."""
    ends = [t for t in (record.end_ns, record.chunk_ns[-1] if record.chunk_ns else None) if t is not None]
    return max(0, max(ends) - record.send_ns) / NS_PER_S if ends else 0.0


def slo_itl_ms(record: RequestRecord, statistic: ItlStatistic) -> FloatArray:
    """The request's gaps in the ITL series the SLO binds; empty for a failed request."""
    if not record.ok:
        return np.empty(0)
    gaps = record.itl_per_chunk_ns if statistic == "per_chunk" else record.itl_per_token_ns
    return np.asarray(gaps, dtype=np.float64) / NS_PER_MS
