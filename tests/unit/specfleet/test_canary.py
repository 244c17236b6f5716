"""The canary's verdict: rollback when a class is worse beyond the interval and the noise floor
(or below the break-even, or fails quality or the SLO), promote when every class is better beyond
them, hold otherwise."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.canary import AcceptanceFigure, ClassComparison, acceptance_figure, canary_verdict, compare_class
from specfleet.decisions import Comparison
from specfleet.stats.bootstrap import Interval

NONE = AcceptanceFigure(value=None, source="none", requests=0)


def _interval(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, confidence=0.95, basis="requests", resamples=1000)


def _comparison(tps: tuple[float, float, float], itl: tuple[float, float, float] = (1.0, 0.9, 1.1),
                candidate_slo: bool = True) -> Comparison:
    return Comparison(
        basis="requests", baseline_runs=1, candidate_runs=1, baseline_qualified_tokens_per_s=100.0,
        candidate_qualified_tokens_per_s=100.0 * tps[0], qualified_tps_speedup=_interval(*tps),
        itl_statistic="per_token", slo_percentile=95.0, baseline_itl_ms=10.0, candidate_itl_ms=10.0 / itl[0],
        itl_speedup=_interval(*itl), candidate_ttft_ms=20.0, baseline_slo_holds=True,
        candidate_slo_holds=candidate_slo, acceptance_rate=None, mean_acceptance_length=None, engine_version=None)


def _class(tps: tuple[float, float, float], noise: float | None = None, accepted: float | None = None,
           break_even: float | None = None, itl: tuple[float, float, float] = (1.0, 0.9, 1.1),
           candidate_slo: bool = True) -> ClassComparison:
    cand = AcceptanceFigure(value=accepted, source="client_estimate", requests=8) if accepted else NONE
    return compare_class("code", _comparison(tps, itl, candidate_slo), NONE, cand, accepted, noise, break_even, None)


def test_a_difference_inside_the_interval_holds() -> None:
    verdict, reason = canary_verdict([_class((1.02, 0.95, 1.09))])
    assert verdict == "hold" and "within the noise on code" in reason


def test_slower_beyond_the_interval_rolls_back_unless_the_noise_floor_covers_it() -> None:
    assert canary_verdict([_class((0.85, 0.80, 0.90))])[0] == "rollback"
    assert canary_verdict([_class((0.85, 0.80, 0.90), noise=0.15)])[0] == "hold"


def test_faster_in_every_class_beyond_the_noise_promotes_and_one_class_within_holds() -> None:
    fast = _class((1.4, 1.3, 1.5), noise=0.1)
    assert canary_verdict([fast])[0] == "promote"
    assert canary_verdict([fast, _class((1.05, 0.98, 1.12), noise=0.1)])[0] == "hold"


def test_acceptance_below_the_break_even_rolls_back_even_when_faster() -> None:
    verdict, reason = canary_verdict([_class((1.4, 1.3, 1.5), accepted=1.2, break_even=1.5)])
    assert verdict == "rollback" and "1.20 tokens per step, below the sweep's break-even 1.50" in reason


def test_itl_worse_or_a_missed_slo_rolls_back() -> None:
    assert canary_verdict([_class((1.0, 0.95, 1.05), itl=(0.7, 0.6, 0.8))])[0] == "rollback"
    verdict, reason = canary_verdict([_class((1.0, 0.95, 1.05), candidate_slo=False)])
    assert verdict == "rollback" and "misses the SLO" in reason


@given(st.lists(st.one_of(st.none(), st.floats(1.0, 8.0)), max_size=20),
       st.lists(st.one_of(st.none(), st.floats(1.0, 8.0)), max_size=20))
def test_vllm_figures_win_over_the_client_estimate_and_none_is_never_a_number(
        vllm: list[float | None], client: list[float | None]) -> None:
    figure = acceptance_figure(vllm, client)
    found_vllm, found_client = [v for v in vllm if v is not None], [v for v in client if v is not None]
    if found_vllm:
        assert figure.source == "vllm_per_request" and figure.value == pytest.approx(sum(found_vllm) / len(found_vllm))
    elif found_client:
        assert figure.source == "client_estimate" and figure.requests == len(found_client)
    else:
        assert figure.value is None and figure.source == "none" and figure.note
