"""The canary's verdict: rollback when a class is worse as the one rule decides it (or below the
break-even, or fails quality or the SLO), promote when every class is better, compared and scored,
hold otherwise (no noise estimate, a class within the noise, not compared, or without a scored set);
a class whose cell is not usable on either replica is not compared and holds (never promotes)
unless something calls for rollback."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from specfleet.production.canary import (
    AcceptanceFigure,
    CanaryResult,
    ClassClaims,
    ClassComparison,
    UnusableCell,
    acceptance_figure,
    age_difference,
    canary_verdict,
    compare_class,
    hold_kind,
    uncompared_class,
)
from specfleet.production.replica_age import DEFAULT_MAX_AGE_GAP_S, age_coverage
from specfleet.stats.bootstrap import Interval
from specfleet.stats.quality import QualityResult, quality_gate
from specfleet.verdicts.cell import Comparison
from specfleet.verdicts.rule import Claim, ClaimResult
from tests.support.replica_ages import aged, like_ages

NONE = AcceptanceFigure(value=None, source="none", requests=0)


def _interval(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, confidence=0.95, basis="runs", resamples=1000)


def _result(key: str, adopted: bool, ratio: tuple[float, float, float] = (1.0, 0.9, 1.1)) -> ClaimResult:
    interval = _interval(*ratio)
    return ClaimResult(Claim(key, "canary", float(np.log(ratio[0])), {}), interval, interval,
                       "adopt" if adopted else "inconclusive", 12, None if adopted else "within the noise")


def _comparison(tps: tuple[float, float, float], candidate_slo: bool = True) -> Comparison:
    return Comparison(
        basis="runs", baseline_runs=1, candidate_runs=1, baseline_qualified_tokens_per_s=100.0,
        candidate_qualified_tokens_per_s=100.0 * tps[0], qualified_tps_speedup=_interval(*tps),
        itl_statistic="per_token", slo_percentile=95.0, baseline_itl_ms=10.0, candidate_itl_ms=12.0,
        itl_speedup=None, candidate_ttft_ms=20.0, baseline_slo_holds=True,
        candidate_slo_holds=candidate_slo, acceptance_rate=None, mean_acceptance_length=None, engine_version=None)


def _class(tps: tuple[float, float, float], faster: bool = False, slower: bool = False, itl_slower: bool = False,
           accepted: float | None = None, break_even: float | None = None, candidate_slo: bool = True,
           quality: QualityResult | None = None, scored: bool = True, name: str = "code",
           covered: bool = True) -> ClassComparison:
    cand = AcceptanceFigure(value=accepted, source="client_estimate", requests=8) if accepted else NONE
    claims = ClassClaims(_result("faster", faster, tps), _result("slower", slower, tps),
                         _result("itl_slower", itl_slower))
    return compare_class(name, _comparison(tps, candidate_slo), claims, NONE, cand, accepted, break_even,
                         quality if quality is not None else (_quality([1.0] * 8) if scored else None), scored,
                         covered)


def test_a_difference_within_the_noise_holds() -> None:
    verdict, reason = canary_verdict([_class((1.02, 0.95, 1.09))], noise_estimated=True)
    assert verdict == "hold" and "within the noise on code" in reason


def test_slower_as_the_rule_decides_rolls_back() -> None:
    verdict, reason = canary_verdict([_class((0.85, 0.80, 0.90), slower=True)], noise_estimated=True)
    assert verdict == "rollback" and reason.startswith("code: SLO-qualified tokens/s 0.850x [0.800, 0.900], lower")


def test_faster_in_every_scored_class_promotes_and_one_class_within_holds() -> None:
    fast = _class((1.4, 1.3, 1.5), faster=True)
    assert canary_verdict([fast], noise_estimated=True)[0] == "promote"
    assert canary_verdict([fast, _class((1.05, 0.98, 1.12), name="chat")], noise_estimated=True)[0] == "hold"


def test_without_a_noise_estimate_nothing_promotes() -> None:
    verdict, reason = canary_verdict([_class((1.02, 0.95, 1.09))], noise_estimated=False)
    assert verdict == "hold" and reason.startswith("no noise estimate (no --from sweep)")


def test_a_class_without_a_scored_set_cannot_promote() -> None:
    verdict, reason = canary_verdict([_class((1.4, 1.3, 1.5), faster=True, scored=False)], noise_estimated=True)
    assert verdict == "hold" and "no scored set answered for code" in reason


def test_acceptance_below_the_break_even_rolls_back_even_when_faster() -> None:
    verdict, reason = canary_verdict([_class((1.4, 1.3, 1.5), faster=True, accepted=1.2, break_even=1.5)],
                                     noise_estimated=True)
    assert verdict == "rollback" and "1.20 tokens per step, below the sweep's break-even 1.50" in reason


def test_itl_worse_or_a_missed_slo_rolls_back() -> None:
    assert canary_verdict([_class((1.0, 0.95, 1.05), itl_slower=True)], noise_estimated=True)[0] == "rollback"
    verdict, reason = canary_verdict([_class((1.0, 0.95, 1.05), candidate_slo=False)], noise_estimated=False)
    assert verdict == "rollback" and "misses the SLO" in reason  # needs no noise estimate


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


SATURATED = UnusableCell(replica="candidate", status="invalid",
                         reasons=["client saturated: event-loop lag p99 7.3 ms > 0.001 ms"])


def _uncompared(*unusable: UnusableCell, quality: QualityResult | None = None, per_step: float | None = None,
                break_even: float | None = None, name: str = "chat") -> ClassComparison:
    base = NONE if any(u.replica == "baseline" for u in unusable) else AcceptanceFigure(
        value=1.0, source="client_estimate", requests=8)
    cand = next((u.acceptance() for u in unusable if u.replica == "candidate"), NONE)
    return uncompared_class(name, list(unusable), base, cand, per_step, break_even, quality)


def _quality(candidate_scores: list[float]) -> QualityResult:
    ids = [f"q{i}" for i in range(len(candidate_scores))]
    return quality_gate(dict.fromkeys(ids, 1.0), dict(zip(ids, candidate_scores, strict=True)), prompt_class="chat",
                        sampling="greedy", tolerance=0.1, confidence=0.95, resamples=200,
                        rng=np.random.default_rng(0))


def test_a_class_not_compared_on_the_candidate_side_holds_naming_it_and_why() -> None:
    chat = _uncompared(SATURATED)
    assert chat.comparison is None and chat.candidate_tokens_per_step is None and not chat.better
    assert chat.candidate_acceptance.value is None and "client saturated" in (chat.candidate_acceptance.note or "")
    assert chat.baseline_acceptance.value == 1.0  # the usable replica's figure is kept
    verdict, reason = canary_verdict([chat], noise_estimated=True)
    assert verdict == "hold"
    assert reason.startswith("chat could not be compared (the candidate's cell is invalid: client saturated")


def test_a_class_not_compared_turns_promote_into_hold_but_rollback_elsewhere_stands() -> None:
    fast = _class((1.4, 1.3, 1.5), faster=True)
    assert canary_verdict([fast], noise_estimated=True)[0] == "promote"
    verdict, reason = canary_verdict([fast, _uncompared(SATURATED)], noise_estimated=True)
    assert verdict == "hold" and "chat could not be compared" in reason and "code" not in reason
    verdict, reason = canary_verdict([_class((0.85, 0.80, 0.90), slower=True), _uncompared(SATURATED)],
                                     noise_estimated=True)
    assert verdict == "rollback" and reason.startswith("code: SLO-qualified tokens/s 0.850x")
    assert "chat could not be compared" in reason  # the rollback record says what was not compared
    verdict, reason = canary_verdict([_class((1.02, 0.95, 1.09)), _uncompared(SATURATED)], noise_estimated=True)
    assert verdict == "hold" and reason.endswith("; within the noise on code")


def test_what_needs_no_comparison_of_the_cells_still_counts_on_a_class_not_compared() -> None:
    baseline_only = UnusableCell(replica="baseline", status="invalid", reasons=["no request completed"])
    assert canary_verdict([_uncompared(baseline_only, quality=_quality([1.0] * 8))], noise_estimated=True)[0] == "hold"
    verdict, reason = canary_verdict([_uncompared(baseline_only, quality=_quality([0.0] * 8))], noise_estimated=True)
    assert verdict == "rollback" and "chat: quality:" in reason
    verdict, reason = canary_verdict([_uncompared(baseline_only, per_step=1.2, break_even=1.5)], noise_estimated=True)
    assert verdict == "rollback" and "1.20 tokens per step, below the sweep's break-even 1.50" in reason


def test_a_class_is_compared_or_says_why_not() -> None:
    with pytest.raises(ValueError, match="needs the cell"):
        _uncompared()
    with pytest.raises(ValueError, match="unusable cell"):
        _uncompared(SATURATED, per_step=2.0)
    compared = _class((1.0, 0.9, 1.1))
    assert compared.not_compared is None and compared.unusable_cells == []
    with pytest.raises(ValidationError, match="says why it was not compared"):
        ClassComparison.model_validate(compared.model_dump() | {"comparison": None})
    stored = _uncompared(SATURATED, SATURATED.model_copy(update={"replica": "baseline"}))
    assert ClassComparison.model_validate_json(stored.model_dump_json()) == stored  # canary.json round-trips
    assert stored.not_compared is not None and stored.not_compared.count("client saturated") == 2


def test_a_hold_says_whether_it_is_a_reject_or_inconclusive() -> None:
    within = _class((1.02, 0.95, 1.09))
    unscored = _class((1.4, 1.3, 1.5), faster=True, scored=False)
    assert hold_kind([within]) == "inconclusive"  # more measurement could decide it
    assert hold_kind([within, _uncompared(UnusableCell(replica="baseline", status="invalid", reasons=["lag"]))]) == \
        "inconclusive"
    assert hold_kind([unscored]) == "reject" and hold_kind([within, _uncompared(SATURATED)]) == "reject"
    held = CanaryResult(verdict="hold", reason="r", noise_floor=None, noise_source="none", sweep_id=None, arm=None,
                        rollback_server_args=None, classes=[unscored], age=like_ages())
    assert held.hold == "reject"
    assert CanaryResult.model_validate(held.model_dump() | {"verdict": "promote"}).hold is None


APART = age_coverage([aged("baseline", 3 * 86_400 + 2 * 3600), aged("candidate", 660)], DEFAULT_MAX_AGE_GAP_S)
"""A long-running baseline and a fresh candidate: the sweep's noise does not cover their difference."""


def test_replicas_of_unlike_age_neither_promote_nor_roll_back_on_speed() -> None:
    fast = _class((1.4, 1.3, 1.5), faster=True, covered=False)
    slow = _class((0.85, 0.80, 0.90), slower=True, itl_slower=True, candidate_slo=False, covered=False)
    for row in (fast, slow):
        assert (row.worse, row.better, row.findings) == (False, False, [])
    assert fast.not_covered_findings[0].startswith("SLO-qualified tokens/s 1.400x [1.300, 1.500], higher")
    assert len(slow.not_covered_findings) == 3
    assert "misses the SLO where the baseline meets it" in slow.not_covered_findings
    assert APART.reason is not None
    for row in (fast, slow):
        verdict, reason = canary_verdict([row], noise_estimated=True, not_covered=APART.reason)
        assert verdict == "hold"
        assert reason == f"{APART.reason}: nothing is promoted or rolled back on throughput or ITL"
        result = CanaryResult(verdict=verdict, reason=reason, noise_floor=0.05, noise_source="s", sweep_id="s",
                              arm=None, rollback_server_args=None, classes=[row], age=APART)
        assert result.hold == "inconclusive" and not result.age.covered  # a twin could decide it
    # the same figures, of like age, decide
    assert canary_verdict([_class((1.4, 1.3, 1.5), faster=True)], noise_estimated=True)[0] == "promote"
    assert canary_verdict([_class((0.85, 0.80, 0.90), slower=True)], noise_estimated=True)[0] == "rollback"


def test_quality_and_the_break_even_roll_back_whatever_the_ages() -> None:
    """Neither depends on how fast a server is: the reason says so, and what is not covered."""
    below = _class((1.4, 1.3, 1.5), faster=True, accepted=1.2, break_even=1.5, covered=False)
    worse_answers = _class((1.0, 0.9, 1.1), quality=_quality([0.0] * 8), covered=False)
    for row, finding in ((below, "1.20 tokens per step, below the sweep's break-even 1.50"),
                         (worse_answers, "quality:")):
        verdict, reason = canary_verdict([row], noise_estimated=True, not_covered=APART.reason)
        assert verdict == "rollback" and reason.startswith(f"code: {finding}")
        assert "do not depend on server speed" in reason and reason.endswith(f"not covered: {APART.reason}")


def test_the_age_difference_is_the_twin_against_the_baseline_or_why_not() -> None:
    claims = {key: Claim(key, "canary", 0.0, {}) for key in ("faster", "slower", "itl_faster")}
    results = {"faster": _result("faster", True, (1.16, 1.08, 1.24)), "slower": _result("slower", False),
               "itl_faster": _result("itl_faster", False, (1.05, 0.97, 1.13))}
    measured = age_difference(results, claims)
    assert measured.finding == ("the fresh twin serves 1.160x [1.080, 1.240] the long-running baseline's "
                                "SLO-qualified tokens/s: faster, beyond the noise")
    assert measured.qualified_tps_speedup is not None and measured.qualified_tps_speedup.low == 1.08
    assert measured.itl_speedup is not None and measured.itl_speedup.estimate == 1.05
    within = age_difference(results | {"faster": _result("faster", False, (1.02, 0.95, 1.09))}, claims)
    assert within.finding.endswith(": within the noise")
    missing = age_difference(None, None, "the baseline's cell is invalid: client saturated")
    assert missing.qualified_tps_speedup is None and missing.finding == (
        "not measured: the baseline's cell is invalid: client saturated")
