"""Metrics from exact integer-nanosecond records (aiperf style: create_record(...) -> exact values)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from specfleet.contract.matrix import CellIdentity
from specfleet.contract.workload import SLOSpec
from specfleet.measure.metrics import (
    TRAILING_TOKENS_KEY,
    accounting_problems,
    assemble_cell,
    chunks_read_together_fraction,
    e2e_series_ms,
    itl_per_chunk_series_ms,
    itl_per_token_series_ms,
    measured_window_ns,
    meets_slo,
    order_statistic_ranks,
    summarize,
    throughput,
    tpot_series_ms,
    ttft_series_ms,
)
from specfleet.results.cell import SERVER_DIED, CellResult, EnergyReading, PercentileEstimate, judge_cell
from specfleet.results.records import RequestRecord
from specfleet.stats.samples import qualified_tokens, qualified_tokens_of
from tests.support.records import request_record

MS = 1_000_000  # ns per ms: fixtures are written in ms, stored as exact integer ns


def create_record(
    send_ms: int = 100,
    chunks: list[tuple[int, int]] | None = None,
    *,
    index: int = 0,
    usage: int | None = -1,
    error: str | None = None,
    max_tokens: int | None = None,
    end_ms: int | None = None,
    extra: dict[str, float] | None = None,
) -> RequestRecord:
    """``chunks`` are (arrival ms, tokens carried); ``usage`` -1 means "what the stream carried"."""
    chunks = [(110, 1)] if chunks is None else chunks
    streamed = sum(tokens for _, tokens in chunks)
    last_ms = chunks[-1][0] if chunks else send_ms
    return request_record(
        index, tuple(at * MS for at, _ in chunks), tuple(t for _, t in chunks), send_ns=send_ms * MS,
        end_ns=(end_ms if end_ms is not None else last_ms + 1) * MS,
        usage_completion_tokens=streamed if usage == -1 else usage,
        error=error, max_tokens=max_tokens, extra=extra or {},
    )


SLO = SLOSpec(ttft_ms=50, itl_ms=15, percentile=95, itl_statistic="per_chunk")
IDENTITY = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency",
                        load_value=4, prompt_class="chat", sampling="greedy", repeat=0)
NO_ENERGY = EnergyReading(source="none", joules=None, reason="no device")


# --- series -----------------------------------------------------------------------

def test_ttft_e2e_tpot_from_exact_times() -> None:
    records = [create_record(100, [(110, 1), (130, 2), (160, 1)])]
    assert ttft_series_ms(records) == [10.0]
    assert e2e_series_ms(records) == [60.0]
    assert tpot_series_ms(records) == [pytest.approx(50 / 3)]  # (160 - 110) / (4 - 1)


def test_itl_per_chunk_vs_per_token_with_multi_token_chunks() -> None:
    records = [create_record(100, [(110, 1), (130, 2), (160, 3)]), create_record(0, [(5, 1), (9, 1)])]
    assert itl_per_chunk_series_ms(records) == [20.0, 30.0, 4.0]
    # 20 ms over 2 tokens, 30 ms over 3 tokens: the rate view
    assert itl_per_token_series_ms(records) == [10.0, 10.0, 10.0, 10.0, 10.0, 4.0]


def test_chunks_read_together_are_zero_gaps_and_counted() -> None:
    """Two chunks stamped by one network read give a 0 ms gap; the cell says what share."""
    records = [create_record(100, [(110, 1), (130, 2), (130, 1), (160, 1)]),
               create_record(0, [(5, 1), (5, 1)]),
               create_record(0, [(5, 1), (9, 1)], error="HTTP 500")]
    assert itl_per_chunk_series_ms(records) == [20.0, 0.0, 30.0, 0.0]
    assert chunks_read_together_fraction(records) == 0.5
    assert chunks_read_together_fraction([create_record(100, [(125, 1)])]) is None
    cell = assemble_cell(IDENTITY, "k", records[:2], slo=SLO, duration_s=1.0, requests_planned=2,
                         ignore_eos=True, max_error_fraction=0.0, energy=NO_ENERGY)
    assert cell.chunks_read_together_fraction == 0.5 and cell.itl_per_chunk_ms.p50 is not None


def test_single_token_request_has_ttft_but_no_tpot_or_itl() -> None:
    records = [create_record(100, [(125, 1)])]
    assert ttft_series_ms(records) == [25.0]
    assert tpot_series_ms(records) == []
    assert itl_per_chunk_series_ms(records) == []


def test_a_stream_read_in_one_go_has_no_tpot_rather_than_0_ms() -> None:
    whole = create_record(100, [(140, 1), (140, 3), (140, 4)])  # every chunk in the same read
    late = create_record(100, [(140, 1), (170, 3), (170, 4)])  # the rest in a later read: a span to time
    assert whole.tpot_ns is None and late.tpot_ns == pytest.approx(30 * MS / 7)
    assert tpot_series_ms([whole, late]) == [pytest.approx(30 / 7)]
    assert tpot_series_ms([whole]) == []
    assert ttft_series_ms([whole]) == [40.0] and e2e_series_ms([whole]) == [40.0]


def test_failed_requests_are_left_out_of_latency_series() -> None:
    records = [create_record(100, [(110, 1)]), create_record(100, [(190, 1), (200, 1)], error="HTTP 500")]
    assert ttft_series_ms(records) == [10.0]
    assert itl_per_chunk_series_ms(records) == []


def test_window_spans_first_send_to_last_completion() -> None:
    records = [create_record(100, [(110, 1)], end_ms=150), create_record(120, [], error="x", end_ms=400)]
    assert measured_window_ns(records) == (100 * MS, 400 * MS)
    assert measured_window_ns([]) is None


# --- SLO and throughput -----------------------------------------------------------

def test_slo_binds_the_chosen_itl_statistic() -> None:
    two_token_chunks = create_record(100, [(110, 2), (130, 2), (150, 2)])  # 20 ms per chunk, 10 per token
    assert not meets_slo(two_token_chunks, SLO)
    assert meets_slo(two_token_chunks, SLO.model_copy(update={"itl_statistic": "per_token"}))


def test_slo_ttft_bound_and_single_token_requests() -> None:
    assert meets_slo(create_record(100, [(150, 1)]), SLO)  # TTFT exactly at target, no gaps
    assert not meets_slo(create_record(100, [(151, 1)]), SLO)
    assert not meets_slo(create_record(100, [(110, 1)], error="timed out"), SLO)
    assert not meets_slo(create_record(100, []), SLO)  # nothing arrived


def test_slo_percentile_is_over_the_requests_own_gaps() -> None:
    one_stall = create_record(0, [(10, 1), (20, 1), (30, 1), (40, 1), (140, 1)])  # gaps 10, 10, 10, 100
    assert meets_slo(one_stall, SLO.model_copy(update={"percentile": 50.0}))
    assert not meets_slo(one_stall, SLO)  # p95 of its gaps = 86.5 ms


def test_throughput_counts_failures_against_goodput() -> None:
    records = [
        create_record(0, [(10, 1), (20, 4)], index=0),           # meets: 5 tokens
        create_record(0, [(10, 1), (60, 2)], index=1),           # ITL 50 ms: misses, 3 tokens
        create_record(0, [(10, 1)], index=2, error="HTTP 500"),  # failed: no tokens counted
        create_record(0, [(10, 2)], index=3),                    # meets: 2 tokens
    ]
    rates = throughput(records, SLO, duration_s=2.0)
    assert (rates.output_tokens, rates.qualified_output_tokens) == (10, 7)
    assert rates.output_tokens_per_s == 5.0
    assert rates.qualified_tokens_per_s == 3.5
    assert rates.request_goodput_per_s == 1.0
    assert rates.requests_per_s == 1.5
    assert throughput(records, SLO, duration_s=0.0).output_tokens_per_s is None


# --- token accounting -------------------------------------------------------------

def test_clean_records_have_no_accounting_problems() -> None:
    records = [create_record(0, [(10, 1), (20, 3)], max_tokens=4),
               create_record(0, [(10, 1)], usage=2, extra={TRAILING_TOKENS_KEY: 1.0})]
    assert accounting_problems(records[:1], ignore_eos=True) == []
    assert accounting_problems(records, ignore_eos=False) == []


def test_accounting_problems_are_grouped_by_kind() -> None:
    records = [
        create_record(0, [(10, 1), (20, 3)], index=0, usage=5),
        create_record(0, [(10, 1), (20, 3)], index=1, usage=6),
        create_record(0, [(10, 0), (20, 3)], index=2),
        create_record(0, [(10, 1)], index=3, usage=None),
        create_record(0, [(10, 1), (20, 1)], index=4, max_tokens=3),
        create_record(0, [(10, 1)], index=5, usage=9, error="timed out"),  # failed: not checked
    ]
    problems = accounting_problems(records, ignore_eos=True)
    assert len(problems) == 4
    assert problems[0] == ("token accounting: usage count differs from streamed count in 2 of 5 requests "
                           "(first: request 0 (p0): usage 5, streamed 4)")
    assert "first content chunk carries no token in 1 of 5 requests (first: request 2 (p2))" in problems[1]
    assert "no final usage count" in problems[2]
    assert "streamed 2 + 0 trailing, max_tokens 3" in problems[3]
    assert len(accounting_problems(records, ignore_eos=False)) == 3


# --- the cell ---------------------------------------------------------------------

def _cell(records: list[RequestRecord], *, requests_planned: int | None = None,
          energy: EnergyReading = NO_ENERGY, server_failed: bool = False,
          runner_reasons: tuple[str, ...] = ()) -> CellResult:
    planned = len(records) if requests_planned is None else requests_planned
    return assemble_cell(IDENTITY, "k1", records, slo=SLO, duration_s=1.0, requests_planned=planned,
                         ignore_eos=False, max_error_fraction=0.25, energy=energy,
                         server_failed=server_failed, runner_reasons=runner_reasons)


def test_cell_ok_with_one_failure_under_the_threshold() -> None:
    records = [create_record(0, [(10, 1), (20, 1)], index=i) for i in range(3)]
    records.append(create_record(0, [], index=3, error="HTTP 500"))
    cell = _cell(records, energy=EnergyReading(source="nvml", joules=12.0))
    assert (cell.status, cell.completed, cell.failed, cell.slo_met) == ("ok", 3, 1, 3)
    assert cell.ttft_ms.count == 3
    assert cell.itl_per_chunk_ms.count == 3
    assert cell.energy.j_per_output_token == 2.0
    assert cell.energy.j_per_qualified_token == 2.0


def test_cell_invalid_when_too_many_fail_or_unsent_count_as_failed() -> None:
    records = [create_record(0, [(10, 1)], index=0), create_record(0, [(10, 1)], index=1)]
    cell = _cell(records, requests_planned=4)  # two never came back: 50% failed
    assert cell.status == "invalid"
    assert cell.failed == 2
    assert "2 of 4 requests failed (50.0%)" in cell.reasons[0]


def test_cell_invalid_on_accounting_or_nothing_completed() -> None:
    assert _cell([create_record(0, [(10, 2)], usage=3)]).status == "invalid"
    cell = _cell([create_record(0, [], error="ConnectError: refused")])
    assert cell.status == "invalid"
    assert cell.reasons == ["no request completed; most common error (1x): ConnectError: refused"]
    assert cell.ttft_ms.mean is None
    assert cell.throughput.output_tokens == 0


def test_cell_failed_when_the_server_failed() -> None:
    cell = _cell([create_record(0, [(10, 1)])], server_failed=True, runner_reasons=("server exited with 1",))
    assert cell.status == "failed"
    assert cell.reasons == [SERVER_DIED, "server exited with 1"]


def test_a_runner_reason_alone_makes_the_cell_invalid() -> None:
    cell = _cell([create_record(0, [(10, 1)])], runner_reasons=("client saturated",))
    assert (cell.status, cell.reasons) == ("invalid", ["client saturated"])


def test_the_status_rule() -> None:
    assert judge_cell([], server_failed=False) == ("ok", [])
    assert judge_cell(["a"], server_failed=False) == ("invalid", ["a"])
    assert judge_cell([], server_failed=True) == ("failed", [SERVER_DIED])
    assert judge_cell(["a", SERVER_DIED], server_failed=True) == ("failed", [SERVER_DIED, "a"])


def test_reasons_added_later_are_judged_by_the_same_rule() -> None:
    ok = _cell([create_record(0, [(10, 1)])])
    assert ok.status == "ok"
    assert ok.with_reasons([]) == ok
    assert (ok.with_reasons(["late"]).status, ok.with_reasons(["late"]).reasons) == ("invalid", ["late"])
    died = ok.with_reasons(["log tail"], server_failed=True)
    assert (died.status, died.reasons) == ("failed", [SERVER_DIED, "log tail"])
    again = died.with_reasons(["more"])  # a failed cell stays failed, its reason once
    assert (again.status, again.reasons) == ("failed", [SERVER_DIED, "log tail", "more"])
    invalid = _cell([create_record(0, [(10, 2)], usage=3)], runner_reasons=("client saturated",))
    late_death = invalid.with_reasons(["log tail"], server_failed=True)
    assert late_death.status == "failed"
    assert late_death.reasons == [SERVER_DIED, *invalid.reasons, "log tail"]


# --- distribution summaries -------------------------------------------------------

def _ranks_by_enumeration(n: int, q: float) -> tuple[int | None, int | None]:
    cdf = binom.cdf(np.arange(n + 1), n, q)
    lows = [rank for rank in range(1, n + 1) if cdf[rank - 1] <= 0.025]
    highs = [rank for rank in range(1, n + 1) if cdf[rank - 1] >= 0.975]
    return (max(lows) if lows else None, min(highs) if highs else None)


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_order_statistic_ranks_match_enumeration_and_cover(q: float) -> None:
    for n in [*range(1, 80), 200, 367, 368, 1000]:
        lower, upper = order_statistic_ranks(n, q)
        assert (lower, upper) == _ranks_by_enumeration(n, q)
        if lower is not None and upper is not None:
            assert binom.cdf(upper - 1, n, q) - binom.cdf(lower - 1, n, q) >= 0.95


def _enough(count: int, percentile: str) -> bool:
    estimate = getattr(summarize([1.0] * count), percentile)
    assert isinstance(estimate, PercentileEstimate)
    return estimate.enough_samples


def test_small_samples_are_flagged_per_percentile() -> None:
    assert [_enough(5, "p50"), _enough(6, "p50")] == [False, True]
    assert [_enough(71, "p95"), _enough(72, "p95")] == [False, True]
    assert [_enough(367, "p99"), _enough(368, "p99")] == [False, True]  # a p99 needs hundreds
    p99 = summarize([float(v) for v in range(1, 11)]).p99
    assert p99 is not None
    assert not p99.enough_samples
    assert p99.value == pytest.approx(9.91)
    assert (p99.ci_low, p99.ci_high) == (None, None)


def test_ci_bounds_are_the_order_statistics_at_the_binomial_ranks() -> None:
    values = np.random.default_rng(seed=42).exponential(10.0, size=1000)
    summary = summarize(values.tolist())
    ordered = np.sort(values)
    for q, estimate in [(0.5, summary.p50), (0.95, summary.p95), (0.99, summary.p99)]:
        lower, upper = order_statistic_ranks(1000, q)
        assert estimate is not None
        assert estimate.enough_samples
        assert lower is not None
        assert upper is not None
        assert lower < q * 1000 < upper
        assert (estimate.ci_low, estimate.ci_high) == (ordered[lower - 1], ordered[upper - 1])
        assert estimate.value == pytest.approx(np.percentile(values, q * 100))


def test_empty_series_gives_none_never_zero() -> None:
    summary = summarize([])
    assert (summary.count, summary.mean, summary.p50, summary.p95, summary.p99) == (0, None, None, None, None)
    single = summarize([7.0]).p50
    assert single is not None
    assert (single.value, single.ci_low, single.ci_high) == (7.0, None, None)


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=400))
def test_percentiles_are_ordered_and_inside_their_intervals(values: list[float]) -> None:
    summary = summarize(values)
    assert summary.p50 is not None
    assert summary.p95 is not None
    assert summary.p99 is not None
    assert summary.p50.value <= summary.p95.value <= summary.p99.value
    for estimate in (summary.p50, summary.p95, summary.p99):
        assert (estimate.ci_low is None) == (estimate.ci_high is None) == (not estimate.enough_samples)
        if estimate.ci_low is not None and estimate.ci_high is not None:
            assert estimate.ci_low <= estimate.value <= estimate.ci_high


# --- the vectorised path against a straightforward per-record reference --------------

def _reference_cell(records: list[RequestRecord], slo: SLOSpec) -> dict[str, object]:
    """Every per-token figure the plain way: Python loops over each record's own properties."""
    ok = [r for r in records if r.ok]
    chunk_gaps = [gap for r in ok for gap in r.itl_per_chunk_ns]
    met = [r for r in ok if meets_slo(r, slo)]
    produced = [r.usage_completion_tokens if r.usage_completion_tokens is not None else r.streamed_tokens
                for r in ok]
    return {
        "ttft": [r.ttft_ns / MS for r in ok if r.ttft_ns is not None],
        "e2e": [r.e2e_ns / MS for r in ok if r.e2e_ns is not None],
        "tpot": [r.tpot_ns / MS for r in ok if r.tpot_ns is not None],
        "itl_chunk": [gap / MS for gap in chunk_gaps],
        "itl_token": [gap / MS for r in ok for gap in r.itl_per_token_ns],
        "together": sum(1 for gap in chunk_gaps if gap == 0) / len(chunk_gaps) if chunk_gaps else None,
        "met": len(met),
        "tokens": sum(produced),
        "qualified": sum(p for r, p in zip(ok, produced, strict=True) if meets_slo(r, slo)),
    }


def _random_records(rng: np.random.Generator, count: int) -> list[RequestRecord]:
    """Records of every shape the client can produce: no chunks, one chunk, chunks read together
    (0 ms gaps), chunks of 0 or several tokens, a negative count from a bad server, failures."""
    records = []
    for index in range(count):
        send_ns = int(rng.integers(0, 10**12))
        chunks = int(rng.choice([0, 1, 2, 3, int(rng.integers(4, 40))]))
        gaps = rng.choice([0, int(rng.integers(1, 5 * MS)), int(rng.integers(1, 200 * MS))], size=chunks)
        arrivals = send_ns + int(rng.integers(0, 500 * MS)) + np.cumsum(gaps) - (gaps[0] if chunks else 0)
        tokens = rng.choice([0, 1, 1, 1, 2, 5, -1], size=chunks) if rng.random() < 0.3 else np.ones(chunks, int)
        records.append(request_record(
            index, tuple(int(a) for a in arrivals), tuple(int(t) for t in tokens), send_ns=send_ns,
            end_ns=int(arrivals[-1]) + 1 if chunks else send_ns + 1,
            usage_completion_tokens=None if rng.random() < 0.2 else int(max(0, tokens.sum())),
            error="HTTP 500" if rng.random() < 0.1 else None,
        ))
    return records


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("statistic", ["per_chunk", "per_token"])
def test_vectorised_metrics_equal_the_per_record_reference(seed: int, statistic: str) -> None:
    rng = np.random.default_rng(seed)
    records = _random_records(rng, int(rng.integers(1, 300)))
    slo = SLOSpec(ttft_ms=float(rng.choice([5.0, 250.0, 1e9])), itl_ms=float(rng.choice([0.0, 3.0, 60.0])),
                  percentile=float(rng.choice([50.0, 90.0, 95.0, 99.0])), itl_statistic=statistic)
    want = _reference_cell(records, slo)
    assert ttft_series_ms(records) == want["ttft"]
    assert e2e_series_ms(records) == want["e2e"]
    assert tpot_series_ms(records) == want["tpot"]
    assert itl_per_chunk_series_ms(records) == want["itl_chunk"]
    assert itl_per_token_series_ms(records) == want["itl_token"]
    assert chunks_read_together_fraction(records) == want["together"]
    rates = throughput(records, slo, duration_s=2.0)
    assert (rates.output_tokens, rates.qualified_output_tokens) == (want["tokens"], want["qualified"])
    cell = assemble_cell(IDENTITY, "k", records, slo=slo, duration_s=2.0, requests_planned=len(records),
                         ignore_eos=False, max_error_fraction=1.0, energy=NO_ENERGY)
    assert cell.slo_met == want["met"]
    assert cell.ttft_ms == summarize(want["ttft"])  # type: ignore[arg-type]
    assert cell.e2e_ms == summarize(want["e2e"])  # type: ignore[arg-type]
    assert cell.tpot_ms == summarize(want["tpot"])  # type: ignore[arg-type]
    assert cell.itl_per_chunk_ms == summarize(want["itl_chunk"])  # type: ignore[arg-type]
    assert cell.itl_per_token_ms == summarize(want["itl_token"])  # type: ignore[arg-type]
    assert cell.chunks_read_together_fraction == want["together"]
    assert qualified_tokens_of(records, slo).tolist() == [qualified_tokens(r, slo) for r in records]
