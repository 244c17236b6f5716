"""Per-cell metrics computed from request records (pure: no I/O).

Series, all in milliseconds, over successful requests only (docs/measurement.md, "Latency series"):

- TTFT: send -> first content-bearing chunk.
- E2E: send -> last content-bearing chunk (a trailing usage-only chunk does not count).
- TPOT: (E2E - TTFT) / (output tokens - 1), for requests with more than one output token.
- ITL per chunk: every gap between consecutive content-bearing chunks, pooled over
  requests (vLLM's ITL). Under speculation one chunk carries up to k+1 tokens. Chunks
  that reach the client in one network read share one arrival stamp, so a gap of 0 ms
  is a real observation (the reader saw them at once), and on a busy host the median
  gap can be 0.
- ITL per token: each chunk gap spread evenly over the tokens its chunk carried.

Failed requests are never dropped: they count as planned-but-not-completed, lower
goodput and the error fraction.
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np
import numpy.typing as npt
from scipy.stats import binom

from specfleet.contract.matrix import CellIdentity
from specfleet.contract.workload import ItlStatistic, SLOSpec
from specfleet.measure.acceptance import request_acceptance
from specfleet.results.cell import (
    CellResult,
    DistributionSummary,
    EnergyReading,
    KVCacheInfo,
    PercentileEstimate,
    SpecDecodeStats,
    StopReason,
    Throughput,
    judge_cell,
)
from specfleet.results.records import RequestRecord

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
CI_CONFIDENCE = 0.95
TRAILING_TOKENS_KEY = "trailing_tokens"
"""``RequestRecord.extra`` key: tokens the server counted in chunks after the last
content-bearing one (e.g. an EOS that detokenizes to nothing). They have no arrival
time of their own, so they are not in ``chunk_tokens``."""


# --- distribution summaries -------------------------------------------------------

@lru_cache(maxsize=4096)
def order_statistic_ranks(
    n: int, quantile: float, confidence: float = CI_CONFIDENCE
) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(X_(l) <= x_q <= X_(u)) >= ``confidence``, equal tails.

    Distribution-free: the number of samples below the true quantile is Binomial(n, q).
    A rank that would fall outside 1..n is None (the sample is too small on that side).
    Cached: every summary of a cell asks again for the same few sample sizes, and each
    uncached pair of binomial calls costs about a millisecond.
    """
    tail = (1.0 - confidence) / 2.0
    # l - 1 = largest j with F(j) <= tail; u - 1 = smallest j with F(j) >= 1 - tail.
    j_low = int(binom.ppf(tail, n, quantile))
    if binom.cdf(j_low, n, quantile) > tail:
        j_low -= 1
    j_high = int(binom.ppf(1.0 - tail, n, quantile))
    lower = j_low + 1 if j_low >= 0 else None
    upper = j_high + 1 if j_high + 1 <= n else None
    return lower, upper


def percentile_estimate(sorted_values: np.ndarray, percentile: float) -> PercentileEstimate:
    """Linear-interpolated percentile (numpy default, as vLLM) with its order-statistic CI.

    Without a two-sided interval inside the sample both bounds are None: a lone one-sided
    bound can sit above the interpolated value (n=2: the p99 is likely above the max).
    """
    value = float(np.percentile(sorted_values, percentile))
    lower, upper = order_statistic_ranks(len(sorted_values), percentile / 100.0)
    if lower is None or upper is None:
        return PercentileEstimate(value=value, ci_low=None, ci_high=None, enough_samples=False)
    return PercentileEstimate(value=value, ci_low=float(sorted_values[lower - 1]),
                              ci_high=float(sorted_values[upper - 1]), enough_samples=True)


def summarize(values_ms: Sequence[float] | npt.NDArray[np.float64]) -> DistributionSummary:
    """Count, mean and p50/p95/p99 with CIs; an empty series gives None figures, never 0."""
    if len(values_ms) == 0:
        return DistributionSummary(count=0, mean=None, p50=None, p95=None, p99=None)
    ordered = np.sort(np.asarray(values_ms, dtype=np.float64))
    return DistributionSummary(
        count=len(ordered),
        mean=float(ordered.mean()),
        p50=percentile_estimate(ordered, 50.0),
        p95=percentile_estimate(ordered, 95.0),
        p99=percentile_estimate(ordered, 99.0),
    )


# --- series -----------------------------------------------------------------------
#
# Per-token work runs in numpy over one cell's chunks, concatenated once (``Chunks``); every
# value is the one the per-record definitions in ``RequestRecord`` give (the same float
# operations in the same order; tests/unit/specfleet/measure/test_metrics.py checks it against them).

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Chunks:
    """The successful records' chunk arrivals and token counts, concatenated, with each
    record's span (``first``: index of its first chunk, ``count``: its chunks)."""

    records: list[RequestRecord]
    send_ns: IntArray
    first: IntArray
    count: IntArray
    arrival_ns: IntArray
    tokens: IntArray

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> "Chunks":
        ok = _successful(records)
        count = np.fromiter((len(r.chunk_ns) for r in ok), dtype=np.int64, count=len(ok))
        total = int(count.sum())
        return cls(
            records=ok,
            send_ns=np.fromiter((r.send_ns for r in ok), dtype=np.int64, count=len(ok)),
            first=np.cumsum(count) - count,
            count=count,
            arrival_ns=np.fromiter(chain.from_iterable(r.chunk_ns for r in ok), dtype=np.int64, count=total),
            tokens=np.fromiter(chain.from_iterable(r.chunk_tokens for r in ok), dtype=np.int64, count=total),
        )

    @property
    def streamed(self) -> IntArray:
        """Tokens each record's chunks carried."""
        running: IntArray = np.concatenate(([0], np.cumsum(self.tokens)))
        streamed: IntArray = running[self.first + self.count] - running[self.first]
        return streamed

    def _gap_ends(self) -> IntArray:
        """Index of the later chunk of every gap between consecutive chunks of one record."""
        later = np.ones(self.arrival_ns.size, dtype=bool)
        later[self.first[self.count > 0]] = False
        return np.flatnonzero(later)

    def gap_owner(self) -> IntArray:
        """For each chunk gap, the index (into ``records``) of the record it belongs to."""
        return np.repeat(np.arange(len(self.records)), np.maximum(self.count - 1, 0))

    def ttft_ms(self) -> FloatArray:
        has = self.count > 0
        return _ms(self.arrival_ns[self.first[has]] - self.send_ns[has])

    def e2e_ms(self) -> FloatArray:
        has = self.count > 0
        return _ms(self.arrival_ns[self.first[has] + self.count[has] - 1] - self.send_ns[has])

    def tpot_ms(self) -> FloatArray:
        """Per record as ``RequestRecord.tpot_ns``: none for a stream read in one go (a 0 ns span)."""
        streamed = self.streamed
        has = (self.count > 0) & (streamed >= 2)
        span_ns = self.arrival_ns[self.first[has] + self.count[has] - 1] - self.arrival_ns[self.first[has]]
        timed = span_ns > 0
        return _ms(span_ns[timed] / (streamed[has][timed] - 1))

    def itl_per_chunk_ns(self) -> IntArray:
        ends = self._gap_ends()
        return self.arrival_ns[ends] - self.arrival_ns[ends - 1]

    def itl_per_token_ns(self) -> tuple[FloatArray, IntArray]:
        """Each chunk gap over the tokens of its later chunk, repeated that many times; with the
        number of values each chunk gap gave (its tokens, or 0)."""
        ends = self._gap_ends()
        gaps = (self.arrival_ns[ends] - self.arrival_ns[ends - 1]).astype(np.float64)
        tokens = self.tokens[ends]
        repeats = np.maximum(tokens, 0)
        per_token = np.divide(gaps, tokens, out=np.zeros_like(gaps), where=tokens > 0)
        return np.repeat(per_token, repeats), repeats


def _ms(values_ns: npt.NDArray[np.int64] | FloatArray) -> FloatArray:
    """Nanoseconds to milliseconds, as ``ns / NS_PER_MS`` does for one value."""
    return np.true_divide(values_ns, NS_PER_MS, dtype=np.float64)


def _listed(values: FloatArray) -> list[float]:
    out: list[float] = values.tolist()
    return out


def _successful(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def ttft_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return _listed(Chunks.of(records).ttft_ms())


def e2e_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return _listed(Chunks.of(records).e2e_ms())


def tpot_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return _listed(Chunks.of(records).tpot_ms())


def itl_per_chunk_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return _listed(_ms(Chunks.of(records).itl_per_chunk_ns()))


def itl_per_token_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return _listed(_ms(Chunks.of(records).itl_per_token_ns()[0]))


def _read_together_fraction(gaps_ns: IntArray) -> float | None:
    return float(np.count_nonzero(gaps_ns == 0) / gaps_ns.size) if gaps_ns.size else None


def chunks_read_together_fraction(records: Iterable[RequestRecord]) -> float | None:
    """Share of chunk gaps that are 0 ns: chunks the client got in one network read. A high
    share means the reader (or the host it shares with the server) fell behind, and ITL per
    chunk reads low; None without gaps."""
    return _read_together_fraction(Chunks.of(records).itl_per_chunk_ns())


# --- SLO and throughput -----------------------------------------------------------

def request_itl_ms(record: RequestRecord, statistic: ItlStatistic, percentile: float) -> float | None:
    """One request's ITL at ``percentile`` over its own gaps; None without gaps."""
    gaps = record.itl_per_chunk_ns if statistic == "per_chunk" else record.itl_per_token_ns
    if not gaps:
        return None
    return float(np.percentile(np.asarray(gaps, dtype=np.float64), percentile)) / NS_PER_MS


def meets_slo(record: RequestRecord, slo: SLOSpec) -> bool:
    """Succeeded, TTFT within target, and its own ITL statistic within target.

    A request with a single content chunk has no gaps and meets the ITL part.
    """
    if not record.ok or record.ttft_ns is None or record.ttft_ns / NS_PER_MS > slo.ttft_ms:
        return False
    itl_ms = request_itl_ms(record, slo.itl_statistic, slo.percentile)
    return itl_ms is None or itl_ms <= slo.itl_ms


def _segment_percentiles(values: FloatArray, lengths: IntArray, percentile: float) -> FloatArray:
    """``np.percentile`` of each segment of ``values`` (consecutive, ``lengths`` long), NaN for an
    empty one. Segments of one length go through one call along axis 1: the same arithmetic as
    one call per segment, without a Python call per request."""
    out = np.full(lengths.size, np.nan)
    starts = np.cumsum(lengths) - lengths
    for length in np.unique(lengths[lengths > 0]):
        rows = np.flatnonzero(lengths == length)
        block = values[starts[rows][:, None] + np.arange(length)]
        out[rows] = np.percentile(block, percentile, axis=1)
    return out


def slo_met_mask(chunks: Chunks, slo: SLOSpec) -> npt.NDArray[np.bool_]:
    """``meets_slo`` for each of ``chunks.records``, for all of them at once."""
    has = chunks.count > 0
    ttft_ms = np.full(len(chunks.records), np.inf)
    ttft_ms[has] = chunks.ttft_ms()
    if slo.itl_statistic == "per_chunk":
        gaps = chunks.itl_per_chunk_ns().astype(np.float64)
        lengths = np.maximum(chunks.count - 1, 0)
    else:
        gaps, repeats = chunks.itl_per_token_ns()
        lengths = np.bincount(chunks.gap_owner(), weights=repeats, minlength=len(chunks.records)).astype(np.int64)
    itl_ms = _ms(_segment_percentiles(gaps, lengths, slo.percentile))
    met: npt.NDArray[np.bool_] = has & (ttft_ms <= slo.ttft_ms) & ((lengths == 0) | (itl_ms <= slo.itl_ms))
    return met


def output_tokens(record: RequestRecord) -> int:
    """The server's final usage count, else what the stream carried."""
    if record.usage_completion_tokens is not None:
        return record.usage_completion_tokens
    return record.streamed_tokens


def measured_window_ns(records: Iterable[RequestRecord]) -> tuple[int, int] | None:
    """First send to last completion (or last chunk, or send) over the measured requests."""
    starts: list[int] = []
    ends: list[int] = []
    for r in records:
        starts.append(r.send_ns)
        ends.append(r.end_ns if r.end_ns is not None else (r.chunk_ns[-1] if r.chunk_ns else r.send_ns))
    return (min(starts), max(ends)) if starts else None


def _per_s(count: int, duration_s: float) -> float | None:
    return count / duration_s if duration_s > 0 else None


def throughput(records: Sequence[RequestRecord], slo: SLOSpec, duration_s: float,
               chunks: Chunks | None = None) -> Throughput:
    """Rates over the measured window; only successful requests' tokens are output tokens.
    ``chunks``: the records' ``Chunks``, when the caller has them already."""
    chunks = Chunks.of(records) if chunks is None else chunks
    met = slo_met_mask(chunks, slo)
    produced = np.fromiter((output_tokens(r) for r in chunks.records), dtype=np.int64, count=len(chunks.records))
    tokens, qualified = int(produced.sum()), int(produced[met].sum())
    return Throughput(
        duration_s=duration_s,
        output_tokens=tokens,
        qualified_output_tokens=qualified,
        output_tokens_per_s=_per_s(tokens, duration_s),
        qualified_tokens_per_s=_per_s(qualified, duration_s),
        request_goodput_per_s=_per_s(int(met.sum()), duration_s),
        requests_per_s=_per_s(len(chunks.records), duration_s),
    )


# --- token accounting -------------------------------------------------------------

def accounting_problems(records: Iterable[RequestRecord], ignore_eos: bool) -> list[str]:
    """Token-count checks on successful requests, one line per kind of problem.

    usage == streamed (+ trailing tokens), the first content chunk carries >= 1 token,
    and with ``ignore_eos`` the stream (with trailing tokens) carried exactly ``max_tokens``.
    """
    found: dict[str, list[str]] = {}
    ok = _successful(records)
    for r in ok:
        who = f"request {r.index} ({r.prompt_id})"
        trailing = int(r.extra.get(TRAILING_TOKENS_KEY, 0))
        if r.usage_completion_tokens is None:
            found.setdefault("no final usage count", []).append(who)
        elif r.usage_completion_tokens != r.streamed_tokens + trailing:
            found.setdefault("usage count differs from streamed count", []).append(
                f"{who}: usage {r.usage_completion_tokens}, streamed {r.streamed_tokens}"
                + (f" + {trailing} trailing" if trailing else ""))
        if r.chunk_tokens and r.chunk_tokens[0] < 1:
            found.setdefault("first content chunk carries no token", []).append(who)
        if ignore_eos and r.max_tokens is not None and r.streamed_tokens + trailing != r.max_tokens:
            found.setdefault("streamed count differs from max_tokens under ignore_eos", []).append(
                f"{who}: streamed {r.streamed_tokens} + {trailing} trailing, max_tokens {r.max_tokens}")
    return [f"token accounting: {kind} in {len(items)} of {len(ok)} requests (first: {items[0]})"
            for kind, items in found.items()]


# --- the cell ---------------------------------------------------------------------

def client_saturation(lag_p99_ms: float | None, limit_ms: float) -> str | None:
    """Why the cell's own client cannot be trusted, or None. A client whose event loop woke
    late stamped arrivals late and sent late: its latencies are its own (issue 9)."""
    if lag_p99_ms is None or lag_p99_ms <= limit_ms:
        return None
    return f"client saturated: event-loop lag p99 {lag_p99_ms:.1f} ms > {limit_ms:g} ms"


def _with_energy_per_token(energy: EnergyReading, tokens: int, qualified: int) -> EnergyReading:
    if energy.joules is None:
        return energy
    return energy.model_copy(update={
        "j_per_output_token": energy.joules / tokens if tokens else None,
        "j_per_qualified_token": energy.joules / qualified if qualified else None,
    })


def _error_summary(records: Sequence[RequestRecord]) -> str:
    errors = Counter(r.error for r in records if r.error is not None)
    if not errors:
        return ""
    message, count = errors.most_common(1)[0]
    return f"; most common error ({count}x): {message[:200]}"


def assemble_cell(
    identity: CellIdentity,
    key: str,
    records: Sequence[RequestRecord],
    *,
    slo: SLOSpec,
    duration_s: float,
    requests_planned: int,
    ignore_eos: bool,
    max_error_fraction: float,
    energy: EnergyReading,
    spec_decode: SpecDecodeStats | None = None,
    spec_decode_unavailable: str | None = None,
    kv_cache: KVCacheInfo | None = None,
    server_failed: bool = False,
    runner_reasons: Sequence[str] = (),
    client_lag_p99_ms: float | None = None,
    records_file: str | None = None,
    engine_version: str | None = None,
    started_at: str | None = None,
    stop_reason: StopReason = "fixed_budget",
    server: str | None = None,
) -> CellResult:
    """Everything one cell reports. Planned requests without a successful record are failures.

    Its status is ``judge_cell``'s: "failed" when the runner says the server died
    (``SERVER_DIED`` then leads ``reasons``); "invalid" on any of ``runner_reasons`` (which
    come next), a token accounting problem, an error fraction over ``max_error_fraction``
    or no completed request; else "ok".
    """
    planned = max(requests_planned, len(records))
    completed = sum(1 for r in records if r.ok)
    failed = planned - completed
    problems = accounting_problems(records, ignore_eos)
    if completed == 0:
        problems.append("no request completed" + _error_summary(records))
    elif failed / planned > max_error_fraction:
        problems.append(f"{failed} of {planned} requests failed ({failed / planned:.1%}), over "
                        f"max_error_fraction {max_error_fraction:g}" + _error_summary(records))
    status, reasons = judge_cell([*runner_reasons, *problems], server_failed=server_failed)
    chunks = Chunks.of(records)
    rates = throughput(records, slo, duration_s, chunks)
    gaps_ns = chunks.itl_per_chunk_ns()
    return CellResult(
        identity=identity,
        key=key,
        status=status,
        reasons=reasons,
        requests_planned=planned,
        completed=completed,
        failed=failed,
        slo_met=int(slo_met_mask(chunks, slo).sum()),
        ttft_ms=summarize(chunks.ttft_ms()),
        itl_per_chunk_ms=summarize(_ms(gaps_ns)),
        itl_per_token_ms=summarize(_ms(chunks.itl_per_token_ns()[0])),
        chunks_read_together_fraction=_read_together_fraction(gaps_ns),
        tpot_ms=summarize(chunks.tpot_ms()),
        e2e_ms=summarize(chunks.e2e_ms()),
        throughput=rates,
        spec_decode=spec_decode,
        spec_decode_unavailable=spec_decode_unavailable,
        request_acceptance=request_acceptance(records),
        kv_cache=kv_cache,
        energy=_with_energy_per_token(energy, rates.output_tokens, rates.qualified_output_tokens),
        client_lag_p99_ms=client_lag_p99_ms,
        stop_reason=stop_reason,
        measured_requests=len(records),
        records_file=records_file,
        engine_version=engine_version,
        started_at=started_at,
        server=server,
    )
