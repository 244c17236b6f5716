"""The held-out quality gate: paired interval, tolerance, unanswered and mismatched items,
and the result of a gate that did not run."""

import numpy as np
import pytest

from specfleet.errors import InputError
from specfleet.stats.quality import GateResult, QualityResult, quality_gate, quality_not_run


def _gate(baseline: dict[str, float | None], candidate: dict[str, float | None], tolerance: float = 0.05,
          seed: int = 0) -> QualityResult:
    return quality_gate(baseline, candidate, prompt_class="extraction", sampling="greedy", tolerance=tolerance,
                        confidence=0.95, resamples=2000, rng=np.random.default_rng(seed))


def _scores(values: list[float]) -> dict[str, float | None]:
    return {f"q{i:02d}": v for i, v in enumerate(values)}


def test_equal_scores_pass_with_a_zero_interval() -> None:
    result = _gate(_scores([1, 0, 0.5]), _scores([1, 0, 0.5]))
    assert result.passed and result.items == 3
    assert result.baseline_mean == result.candidate_mean == 0.5
    assert result.difference is not None and (result.difference.low, result.difference.high) == (0.0, 0.0)
    assert result.difference.basis == "items"
    gate = result.gate()
    assert gate == GateResult(gate="quality", passed=True, detail=(
        "extraction/greedy: candidate 0.500 vs baseline 0.500 over 3 items, "
        "difference +0.000 [95% +0.000, +0.000] within tolerance 0.05"))


def test_pairing_by_id_tells_a_drop_of_0_08_from_one_of_0_01_on_40_varied_items() -> None:
    """Unpaired, the items' spread (sd about 0.23) would make both intervals reach past -0.05."""
    rng = np.random.default_rng(1)
    baseline = rng.uniform(0.1, 0.9, size=40)
    worse = _gate(_scores(list(baseline)), _scores(list(baseline - 0.08)))
    assert worse.difference is not None and worse.difference.estimate == pytest.approx(-0.08)
    assert worse.difference.low is not None and worse.difference.low < -0.05
    assert not worse.passed and "can be worse by more than tolerance 0.05" in worse.gate().detail
    slightly = _gate(_scores(list(baseline)), _scores(list(baseline - 0.01)))
    assert slightly.passed


def test_a_noisy_small_set_is_rejected_when_its_interval_reaches_past_the_tolerance() -> None:
    baseline = _scores([1, 1, 1, 1, 0, 0, 0, 0])
    candidate = _scores([1, 1, 1, 0, 0, 0, 0, 1])  # same mean, two items flipped
    result = _gate(baseline, candidate)
    assert result.difference is not None and result.difference.estimate == 0.0
    assert not result.passed  # eight items cannot show the candidate is within 0.05
    assert _gate(baseline, candidate, tolerance=0.6).passed


def test_the_interval_repeats_with_the_seed_and_ignores_dict_order() -> None:
    rng = np.random.default_rng(3)
    base, cand = _scores(list(rng.uniform(size=30))), _scores(list(rng.uniform(size=30)))
    reversed_cand = dict(reversed(list(cand.items())))
    assert _gate(base, cand, seed=7) == _gate(base, reversed_cand, seed=7)
    assert _gate(base, cand, seed=7).difference != _gate(base, cand, seed=8).difference


def test_unanswered_items_are_named_left_out_and_fail_the_gate() -> None:
    result = _gate({"a": 1.0, "b": 1.0, "c": None}, {"a": 1.0, "b": None, "c": 1.0})
    assert result.items == 1 and result.candidate_mean == 1.0
    assert result.baseline_unanswered == ["c"] and result.candidate_unanswered == ["b"]
    assert not result.passed
    detail = result.gate().detail
    assert "over 1 items" in detail and "within tolerance" in detail
    assert "no answer from the baseline for c (fails the gate)" in detail
    assert "no answer from the candidate for b (fails the gate)" in detail
    nothing = _gate({"a": None}, {"a": 1.0})
    assert nothing.difference is None and nothing.baseline_mean is None and not nothing.passed
    assert nothing.gate().detail.startswith("extraction/greedy: no item answered by both arms; no answer from")


def test_inputs_are_checked() -> None:
    with pytest.raises(InputError, match=r"missing from the candidate: b, c; missing from the baseline: z$"):
        _gate({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 1.0, "z": 1.0})
    with pytest.raises(InputError, match="no scored items"):
        _gate({}, {})
    with pytest.raises(InputError, match=r"candidate scores must be in \[0, 1\] \(items a\)"):
        _gate({"a": 1.0}, {"a": float("nan")})
    with pytest.raises(InputError, match="tolerance must be >= 0"):
        _gate({"a": 1.0}, {"a": 1.0}, tolerance=-0.1)


def test_a_gate_not_run_says_so_and_has_not_passed() -> None:
    gate = quality_not_run("prompt class 'chat' has no scored set")
    assert gate == GateResult(gate="quality", passed=False, ran=False,
                              detail="quality gate not run: prompt class 'chat' has no scored set")
    with pytest.raises(ValueError, match="did not run, so it cannot have passed"):
        GateResult(gate="quality", passed=True, ran=False, detail="x")


def test_gate_results_stored_before_ran_existed_load_as_run() -> None:
    stored = '{"gate": "greedy_exact_match", "passed": true, "detail": "exact match 1.000"}'
    assert GateResult.model_validate_json(stored).ran
