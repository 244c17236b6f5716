"""Adaptive stopping: the closed-form intervals against the decisions' request bootstrap, their
exact algebraic properties, and when the rule says stop."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specfleet.contract.matrix import CellIdentity
from specfleet.contract.workload import AdaptiveStoppingSpec, LoadSpec, SLOSpec
from specfleet.measure.metrics import assemble_cell
from specfleet.results.cell import EnergyReading
from specfleet.stats import bootstrap as bs
from specfleet.stats.stopping import (
    AdaptiveStopper,
    RequestStats,
    is_checkpoint,
    pooled_percentile_relative_half_width,
    precision,
    ratio_relative_half_width,
    stop_reason,
)
from tests.support.records import paced_record

MS = 1_000_000
SLO = SLOSpec(ttft_ms=1000.0, itl_ms=1000.0, percentile=95.0)
SPEC = AdaptiveStoppingSpec(relative_half_width=0.05, min_requests=8, max_requests=40, check_every=4)

positive = st.floats(min_value=0.1, max_value=1e4, allow_nan=False)


def _bootstrap_relative_half_width(replicates: np.ndarray, estimate: float) -> float:
    low, high = np.percentile(replicates[np.isfinite(replicates)], [2.5, 97.5])
    return float(high - low) / 2.0 / estimate


def test_ratio_interval_matches_the_request_bootstrap() -> None:
    rng = np.random.default_rng(7)
    durations = rng.uniform(0.5, 3.0, 400)
    tokens = np.where(rng.random(400) < 0.8, 64.0, 0.0)  # a fifth of the requests miss the SLO
    closed = ratio_relative_half_width(tokens, durations, 0.95)
    boot = _bootstrap_relative_half_width(bs.rate_replicates(tokens, durations, rng, 4000), 1.0)
    assert closed == pytest.approx(boot, rel=0.1)


def test_percentile_interval_matches_the_cluster_bootstrap() -> None:
    rng = np.random.default_rng(11)
    # Requests differ in their own pace, so gaps within a request are correlated.
    series = [rng.gamma(4.0, scale, size=int(rng.integers(20, 60))) for scale in rng.uniform(2.0, 6.0, 300)]
    closed = pooled_percentile_relative_half_width(series, 95.0, 0.95)
    estimate = float(np.percentile(np.concatenate(series), 95.0))
    boot = _bootstrap_relative_half_width(bs.pooled_percentile_replicates(series, 95.0, rng, 1000), estimate)
    assert closed == pytest.approx(boot, rel=0.2)


@given(st.lists(st.tuples(positive, positive), min_size=2, max_size=40), positive, positive)
def test_ratio_width_is_scale_free(pairs: list[tuple[float, float]], a: float, b: float) -> None:
    tokens, durations = (np.array(column) for column in zip(*pairs, strict=True))
    width = ratio_relative_half_width(tokens, durations, 0.95)
    assert width is not None and width >= 0
    assert ratio_relative_half_width(a * tokens, b * durations, 0.95) == pytest.approx(width, rel=1e-6, abs=1e-9)


@given(st.lists(st.tuples(positive, positive), min_size=2, max_size=40))
def test_ratio_width_shrinks_exactly_when_every_request_is_seen_twice(pairs: list[tuple[float, float]]) -> None:
    tokens, durations = (np.array(column) for column in zip(*pairs, strict=True))
    n = len(tokens)
    once = ratio_relative_half_width(tokens, durations, 0.95)
    twice = ratio_relative_half_width(np.tile(tokens, 2), np.tile(durations, 2), 0.95)
    assert once is not None and twice is not None
    assert twice == pytest.approx(once * np.sqrt((n - 1) / (2 * n - 1)), rel=1e-6, abs=1e-12)


@given(st.lists(st.lists(positive, min_size=1, max_size=30), min_size=2, max_size=30), positive)
@settings(max_examples=50)
def test_percentile_width_is_scale_free(gaps: list[list[float]], scale: float) -> None:
    series = [np.array(g) for g in gaps]
    width = pooled_percentile_relative_half_width(series, 95.0, 0.95)
    scaled = pooled_percentile_relative_half_width([scale * s for s in series], 95.0, 0.95)
    if width is None:
        assert scaled is None
    else:
        assert width >= 0 and scaled == pytest.approx(width, rel=1e-6, abs=1e-9)


def test_no_interval_without_two_requests_or_qualified_tokens() -> None:
    assert ratio_relative_half_width([64.0], [1.0], 0.95) is None
    assert ratio_relative_half_width([0.0, 0.0, 0.0], [1.0, 2.0, 1.0], 0.95) is None
    assert pooled_percentile_relative_half_width([np.array([5.0, 6.0]), np.empty(0)], 95.0, 0.95) is None


def _stats(gaps_ms: list[int]) -> list[RequestStats]:
    return [RequestStats.of(paced_record(i, gap, 8), SLO) for i, gap in enumerate(gaps_ms)]


def test_identical_requests_are_precise_at_the_first_check() -> None:
    stats = _stats([10] * 8)
    assert precision(stats, SLO, 0.95).within(0.001)
    assert stop_reason(stats[:7], SPEC, SLO, 0.95) is None  # below min_requests
    assert stop_reason(stats, SPEC, SLO, 0.95) == "precise"


def test_checks_run_at_min_requests_then_every_check_every() -> None:
    assert [n for n in range(30) if is_checkpoint(n, SPEC)] == [8, 12, 16, 20, 24, 28]


def test_noisy_requests_run_to_max_requests() -> None:
    rng = np.random.default_rng(0)
    stats = _stats([int(g) for g in rng.integers(1, 200, 40)])
    assert all(stop_reason(stats[:n], SPEC, SLO, 0.95) is None for n in range(1, 40))
    assert stop_reason(stats, SPEC, SLO, 0.95) == "max_requests"


def test_requests_missing_the_slo_are_never_precise() -> None:
    strict = SLOSpec(ttft_ms=1.0, itl_ms=1.0)  # every request misses the 1 ms TTFT
    stats = [RequestStats.of(paced_record(i, 10, 8), strict) for i in range(8)]
    assert precision(stats, strict, 0.95).qualified_tps_relative_half_width is None
    assert stop_reason(stats, SPEC, strict, 0.95) is None


def test_stopper_keeps_its_first_reason_and_ignores_later_completions() -> None:
    stopper = AdaptiveStopper(SPEC, SLO, 0.95)
    said = [stopper(paced_record(i, 10, 8)) for i in range(10)]
    assert said == [False] * 7 + [True] * 3
    assert stopper.reason == "precise" and len(stopper.completed) == 8


def test_contract_block_is_optional_and_checked() -> None:
    assert LoadSpec(concurrency=[1]).adaptive_stopping is None
    with pytest.raises(ValidationError, match="over max_requests"):
        AdaptiveStoppingSpec(relative_half_width=0.1, min_requests=50, max_requests=10)
    with pytest.raises(ValidationError):
        AdaptiveStoppingSpec(relative_half_width=0.1, min_requests=1, max_requests=10)


def test_every_cell_records_why_it_stopped_and_how_many_requests_it_used() -> None:
    identity = CellIdentity(arm="a", method="baseline", k=None, load_mode="concurrency", load_value=1.0,
                            prompt_class="c", sampling="greedy", repeat=0)
    records = [paced_record(i, 10, 8) for i in range(5)]
    kwargs = {"slo": SLO, "duration_s": 5.0, "requests_planned": 5, "ignore_eos": False, "max_error_fraction": 0.0,
              "energy": EnergyReading(source="none", joules=None, reason="none here")}
    fixed = assemble_cell(identity, "k", records, **kwargs)  # type: ignore[arg-type]
    assert (fixed.stop_reason, fixed.measured_requests) == ("fixed_budget", 5)
    precise = assemble_cell(identity, "k", records, stop_reason="precise", **kwargs)  # type: ignore[arg-type]
    assert precise.stop_reason == "precise"
