"""Greedy exact match, the stochastic two-sample test (its level by simulation) and its design
(the quality gate: test_quality.py)."""

import numpy as np
import pytest
from scipy import stats

from specfleet.contract.checks import StochasticTestSpec
from specfleet.errors import InputError
from specfleet.stats.equivalence import (
    first_divergence,
    greedy_equivalence,
    planned_samples_per_prompt,
    stochastic_equivalence,
    stochastic_power,
    stochastic_sample_size,
)

NEXT_TOKEN = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02])


def _markov(rng: np.random.Generator, n: int, length: int, shift: float = 0.0) -> list[list[int]]:
    """Sequences whose next-token distribution depends on the previous token, so positions
    are dependent, as in real decoding. ``shift`` moves mass from token 0 to token 2: TV = shift."""
    p = NEXT_TOKEN.copy()
    p[0] -= shift
    p[2] += shift
    cumulative = np.stack([np.roll(p, k) for k in range(len(p))]).cumsum(axis=1)
    cumulative[:, -1] = 1.0
    out = np.zeros((n, length), dtype=int)
    prev = np.zeros(n, dtype=int)
    draws = rng.random((n, length))
    for j in range(length):
        prev = (draws[:, j, None] > cumulative[prev]).sum(axis=1)
        out[:, j] = prev
    return out.tolist()


def _arms(rng: np.random.Generator, n: int, shift: float = 0.0, prompts: int = 2, length: int = 4
          ) -> tuple[dict[str, list[list[int]]], dict[str, list[list[int]]]]:
    a = {f"p{i}": _markov(rng, n, length) for i in range(prompts)}
    b = {f"p{i}": _markov(rng, n, length, shift) for i in range(prompts)}
    return a, b


# --- greedy -------------------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b", "where"), [
    ([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 5, 3], 1), ([1, 2], [1, 2, 3], 2), ("abc", "abd", 2), ([], [], None),
])
def test_first_divergence(a: list[int] | str, b: list[int] | str, where: int | None) -> None:
    assert first_divergence(a, b) == where


def test_greedy_passes_when_as_stable_as_the_control() -> None:
    base = {"a": [1, 2, 3], "b": [4, 5, 6]}
    drifted = {"a": [1, 2, 3], "b": [4, 5, 9]}
    result = greedy_equivalence(base, drifted, control=drifted)
    assert result.passed
    assert result.candidate.exact_match_rate == 0.5
    assert result.candidate.rows[1].first_divergence == 2
    assert result.gate().gate == "greedy_exact_match"


def test_greedy_fails_below_the_control() -> None:
    base = {"a": [1, 2, 3], "b": [4, 5, 6]}
    result = greedy_equivalence(base, {"a": [1, 2, 3], "b": [4, 0, 6]}, control=base)
    assert not result.passed
    assert not result.gate().passed
    assert greedy_equivalence(base, {"a": [1, 2, 3], "b": [4, 0, 6]}, max_rate_drop=0.5).passed


def test_greedy_prompt_sets_must_match() -> None:
    with pytest.raises(InputError, match="'b' appears only in the first"):
        greedy_equivalence({"a": [1], "b": [2]}, {"a": [1]})


# --- stochastic ---------------------------------------------------------------------------

def test_false_rejection_rate_sits_at_the_declared_significance() -> None:
    """1000 null simulations; the rate must lie in the binomial 99% band around 0.05
    (33 to 69 rejections). 199 permutations make 0.05 * 200 an integer, so the level is exact."""
    rng = np.random.default_rng(20261018)
    sims, significance = 1000, 0.05
    rejections = sum(
        stochastic_equivalence(*_arms(rng, 30), significance=significance, permutations=199, seed=s).reject
        for s in range(sims)
    )
    low, high = stats.binom.interval(0.99, sims, significance)
    assert low <= rejections <= high, f"{rejections}/{sims} rejections outside [{low}, {high}]"


def test_a_declared_discrepancy_is_detected_at_the_designed_size() -> None:
    rng = np.random.default_rng(3)
    n = stochastic_sample_size(0.2, 0.05, 0.8, prompts=2, positions=4)
    detected = sum(stochastic_equivalence(*_arms(rng, n, shift=0.2), permutations=199, seed=s).reject
                   for s in range(20))
    assert detected >= 12  # designed power 0.8 on 20 trials


def test_result_reports_the_design() -> None:
    a, b = _arms(np.random.default_rng(1), 40)
    result = stochastic_equivalence(a, b, significance=0.05, power=0.8, min_detectable_tv=0.3)
    assert (result.n_a, result.n_b, result.prompts, result.positions) == (80, 80, 2, 4)
    assert result.n_required_per_arm_per_prompt == stochastic_sample_size(0.3, 0.05, 0.8, 2, 4)
    assert 0 < result.p_value <= 1
    assert result.reject == (result.p_value <= 0.05)
    assert result.gate().passed == (not result.reject and result.adequately_powered)


def test_an_underpowered_test_does_not_pass_the_gate() -> None:
    a, b = _arms(np.random.default_rng(2), 5)
    result = stochastic_equivalence(a, b, min_detectable_tv=0.05)
    assert not result.adequately_powered
    assert not result.gate().passed
    assert "underpowered" in result.gate().detail


def test_sample_size_is_the_smallest_with_the_power() -> None:
    n = stochastic_sample_size(0.1, 0.05, 0.8, prompts=8, positions=8)
    assert stochastic_power(n, 0.1, 0.05, 8, 8) >= 0.8 > stochastic_power(n - 1, 0.1, 0.05, 8, 8)
    assert stochastic_sample_size(0.05, 0.05, 0.8, 8, 8) > n
    assert stochastic_sample_size(0.1, 0.01, 0.9, 8, 8) > n


def test_planned_samples_follow_the_configured_design() -> None:
    spec = StochasticTestSpec(tokens_per_sample=4, min_detectable_tv=0.3, max_samples_per_prompt=64)
    required, planned = planned_samples_per_prompt(spec, prompts=6)
    assert required == stochastic_sample_size(0.3, 0.05, 0.8, 6, 4)
    assert planned == min(required, 64)
    assert planned_samples_per_prompt(spec.model_copy(update={"min_detectable_tv": 0.01}), 6)[1] == 64


def test_sequences_of_different_lengths_count_the_end_as_a_category() -> None:
    a = {"p": [[1, 2]] * 30}
    b = {"p": [[1, 2, 3]] * 30}
    assert stochastic_equivalence(a, b, permutations=99).reject


def test_stochastic_inputs_are_checked() -> None:
    with pytest.raises(InputError, match="appears only"):
        stochastic_equivalence({"p": [[1]]}, {"q": [[1]]})
    with pytest.raises(InputError, match="no samples in one arm"):
        stochastic_equivalence({"p": [[1]]}, {"p": []})

