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

import numpy as np
from scipy.stats import binom

from specfleet.acceptance import request_acceptance
from specfleet.contract.matrix import CellIdentity
from specfleet.contract.workload import ItlStatistic, SLOSpec
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

def order_statistic_ranks(
    n: int, quantile: float, confidence: float = CI_CONFIDENCE
) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(X_(l) <= x_q <= X_(u)) >= ``confidence``, equal tails.

    Distribution-free: the number of samples below the true quantile is Binomial(n, q).
    A rank that would fall outside 1..n is None (the sample is too small on that side).
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


def summarize(values_ms: Sequence[float]) -> DistributionSummary:
    """Count, mean and p50/p95/p99 with CIs; an empty series gives None figures, never 0."""
    if not values_ms:
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

def _successful(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def ttft_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return [r.ttft_ns / NS_PER_MS for r in _successful(records) if r.ttft_ns is not None]


def e2e_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return [r.e2e_ns / NS_PER_MS for r in _successful(records) if r.e2e_ns is not None]


def tpot_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return [r.tpot_ns / NS_PER_MS for r in _successful(records) if r.tpot_ns is not None]


def itl_per_chunk_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return [gap / NS_PER_MS for r in _successful(records) for gap in r.itl_per_chunk_ns]


def itl_per_token_series_ms(records: Iterable[RequestRecord]) -> list[float]:
    return [gap / NS_PER_MS for r in _successful(records) for gap in r.itl_per_token_ns]


def chunks_read_together_fraction(records: Iterable[RequestRecord]) -> float | None:
    """Share of chunk gaps that are 0 ns: chunks the client got in one network read. A high
    share means the reader (or the host it shares with the server) fell behind, and ITL per
    chunk reads low; None without gaps."""
    gaps = [gap for r in _successful(records) for gap in r.itl_per_chunk_ns]
    return sum(1 for gap in gaps if gap == 0) / len(gaps) if gaps else None


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


def throughput(records: Sequence[RequestRecord], slo: SLOSpec, duration_s: float) -> Throughput:
    """Rates over the measured window; only successful requests' tokens are output tokens."""
    ok = _successful(records)
    met = [r for r in ok if meets_slo(r, slo)]
    tokens = sum(output_tokens(r) for r in ok)
    qualified = sum(output_tokens(r) for r in met)
    return Throughput(
        duration_s=duration_s,
        output_tokens=tokens,
        qualified_output_tokens=qualified,
        output_tokens_per_s=_per_s(tokens, duration_s),
        qualified_tokens_per_s=_per_s(qualified, duration_s),
        request_goodput_per_s=_per_s(len(met), duration_s),
        requests_per_s=_per_s(len(ok), duration_s),
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
    rates = throughput(records, slo, duration_s)
    return CellResult(
        identity=identity,
        key=key,
        status=status,
        reasons=reasons,
        requests_planned=planned,
        completed=completed,
        failed=failed,
        slo_met=sum(1 for r in records if meets_slo(r, slo)),
        ttft_ms=summarize(ttft_series_ms(records)),
        itl_per_chunk_ms=summarize(itl_per_chunk_series_ms(records)),
        itl_per_token_ms=summarize(itl_per_token_series_ms(records)),
        chunks_read_together_fraction=chunks_read_together_fraction(records),
        tpot_ms=summarize(tpot_series_ms(records)),
        e2e_ms=summarize(e2e_series_ms(records)),
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
    )
