"""Output equivalence (seed: "An equivalence test that survives numerics").

Greedy: exact match and first divergence per prompt, against the baseline and, as the
numerical-stability control, the baseline's own repeat.

Stochastic: a pre-specified two-sample test. Per prompt and output position, tokens are
pooled into at most ``max_categories`` categories (rare ones, under 5 expected per arm,
into "other"; categories come from both arms together, so they do not depend on the
labels). The statistic is the sum of the 2 x K Pearson chi-square statistics over all
prompts and positions. Positions of one sequence are dependent, so the null distribution
comes from permuting arm labels of whole sequences within each prompt: the level is exact.
The sample size comes from the declared minimum detectable total-variation distance, the
significance and the power (``stochastic_sample_size``).
"""

import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from pydantic import Field
from scipy import stats

from specfleet.contract.base import RecordModel
from specfleet.contract.checks import StochasticTestSpec
from specfleet.errors import InputError
from specfleet.stats.quality import GateResult

STOCHASTIC_TEST = "permutation chi-square homogeneity (prompt x position statistics summed)"
MIN_EXPECTED = 5.0
ENDED = -1  # the category of a position past the end of a shorter sequence

Tokens = Sequence[int] | str


class PromptMatch(RecordModel):
    prompt_id: str
    exact: bool
    first_divergence: int | None = Field(description="First differing position; None when identical.")


class MatchSummary(RecordModel):
    compared: str
    prompts: int
    exact_match_rate: float
    rows: list[PromptMatch]


class GreedyEquivalence(RecordModel):
    candidate: MatchSummary
    control: MatchSummary | None = Field(description="Baseline vs its own repeat, when run.")
    max_rate_drop: float
    passed: bool

    def gate(self) -> GateResult:
        control = f"control {self.control.exact_match_rate:.3f}" if self.control else "no control (needs 1.0)"
        return GateResult(gate="greedy_exact_match", passed=self.passed, detail=(
            f"exact match {self.candidate.exact_match_rate:.3f} over {self.candidate.prompts} prompts vs "
            f"{control}, allowed drop {self.max_rate_drop:g}"
        ))


def first_divergence(reference: Tokens, candidate: Tokens) -> int | None:
    """The first position where the two differ (a prefix diverges at the shorter length)."""
    for i, (a, b) in enumerate(zip(reference, candidate, strict=False)):
        if a != b:
            return i
    return None if len(reference) == len(candidate) else min(len(reference), len(candidate))


def compare_greedy(
    reference: Mapping[str, Tokens], candidate: Mapping[str, Tokens], compared: str
) -> MatchSummary:
    _same_prompts(reference, candidate, compared)
    if not reference:
        raise InputError(f"{compared}: no prompts to compare")
    rows = []
    for pid in sorted(reference):
        where = first_divergence(reference[pid], candidate[pid])
        rows.append(PromptMatch(prompt_id=pid, exact=where is None, first_divergence=where))
    rate = sum(r.exact for r in rows) / len(rows)
    return MatchSummary(compared=compared, prompts=len(rows), exact_match_rate=rate, rows=rows)


def greedy_equivalence(
    baseline: Mapping[str, Tokens],
    candidate: Mapping[str, Tokens],
    control: Mapping[str, Tokens] | None = None,
    max_rate_drop: float = 0.0,
) -> GreedyEquivalence:
    """Pass when the candidate matches the baseline at least as often as the baseline's own
    repeat does (1.0 without a control), less ``max_rate_drop``."""
    ours = compare_greedy(baseline, candidate, "candidate vs baseline")
    ctrl = compare_greedy(baseline, control, "baseline repeat vs baseline") if control is not None else None
    target = ctrl.exact_match_rate if ctrl else 1.0
    return GreedyEquivalence(candidate=ours, control=ctrl, max_rate_drop=max_rate_drop,
                             passed=ours.exact_match_rate >= target - max_rate_drop)


def _same_prompts(a: Mapping[str, object], b: Mapping[str, object], what: str) -> None:
    only = sorted(set(a) ^ set(b))
    if only:
        side = "first" if only[0] in a else "second"
        raise InputError(f"{what}: prompt {only[0]!r} appears only in the {side} set")


# --- design: power and sample size -------------------------------------------------------

def _df(prompts: int, positions: int, max_categories: int) -> int:
    if prompts < 1 or positions < 1 or max_categories < 2:
        raise InputError("the test needs >= 1 prompt, >= 1 position and >= 2 categories")
    return prompts * positions * (max_categories - 1)


def stochastic_power(
    n_per_arm: int, min_detectable_tv: float, significance: float, prompts: int, positions: int,
    max_categories: int = 10, shifted: int | None = None,
) -> float:
    """Approximate power with n samples per arm per prompt against a TV shift of
    ``min_detectable_tv`` at ``shifted`` (prompt, position) cells, by default every one: the
    alternative the sample size is designed for.

    For two arms of n each, Pearson's statistic has noncentrality (n/2) sum (p-q)^2/m with
    m = (p+q)/2, at least 2 n TV^2 by Cauchy-Schwarz: the worst case for a given TV.
    Positions are treated as independent here; the permutation keeps the level exact regardless.
    The arms' samples must be independent (``sample_seeds``).
    """
    df = _df(prompts, positions, max_categories)
    cells = prompts * positions if shifted is None else shifted
    noncentrality = 2.0 * n_per_arm * min_detectable_tv**2 * cells
    critical = stats.chi2.ppf(1.0 - significance, df)
    return float(stats.ncx2.sf(critical, df, noncentrality))


def stochastic_sample_size(
    min_detectable_tv: float, significance: float, power: float, prompts: int, positions: int,
    max_categories: int = 10,
) -> int:
    """Smallest n per arm per prompt whose power reaches ``power`` (a pre-specified design)."""
    if not (0 < min_detectable_tv < 1 and 0 < significance < 1 and 0 < power < 1):
        raise InputError("min detectable TV, significance and power must lie in (0, 1)")
    args = (min_detectable_tv, significance, prompts, positions, max_categories)
    high = 1
    while stochastic_power(high, *args) < power:
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if stochastic_power(mid, *args) >= power else (mid, high)
    return high


def sample_seeds(seed: int, arm: str, samples: int) -> list[int]:
    """The sampling seeds of one arm's stochastic probe: drawn from (seed, arm), so no two arms
    share a seed and their samples are independent, as the two-sample test and its power assume
    (with one seed list for every arm, the same seed can make the same choices on both)."""
    sequence = np.random.SeedSequence([seed, zlib.crc32(arm.encode())])
    return [int(s) for s in sequence.generate_state(samples, dtype=np.uint32) >> 1]


def planned_samples_per_prompt(spec: StochasticTestSpec, prompts: int) -> tuple[int, int]:
    """(required, planned) samples per arm per prompt for the configured design; planned is
    capped at ``max_samples_per_prompt``, and the result then reports itself underpowered."""
    required = stochastic_sample_size(spec.min_detectable_tv, spec.significance, spec.power, prompts,
                                      spec.tokens_per_sample)
    return required, min(required, spec.max_samples_per_prompt)


# --- the test ----------------------------------------------------------------------------

class StochasticResult(RecordModel):
    test: str = STOCHASTIC_TEST
    n_a: int = Field(description="Sequences in arm A, all prompts.")
    n_b: int
    prompts: int
    positions: int
    min_n_per_arm_per_prompt: int
    n_required_per_arm_per_prompt: int
    significance: float
    power: float = Field(description="Declared target power.")
    achieved_power: float = Field(description="Power at the smallest per-prompt n actually used, against the "
                                  "design alternative: a shift of min_detectable_tv at every prompt and position.")
    power_one_shift: float | None = Field(
        None, description="Power at the same n against the same shift at one position of one prompt only "
        "(None in summaries written before it was stated).")
    min_detectable_tv: float
    max_categories: int
    statistic: float
    degrees_of_freedom: int = Field(description="Sum of (categories - 1) after pooling.")
    permutations: int
    p_value: float
    reject: bool

    @property
    def adequately_powered(self) -> bool:
        return self.min_n_per_arm_per_prompt >= self.n_required_per_arm_per_prompt

    def gate(self) -> GateResult:
        passed = not self.reject and self.adequately_powered
        why = "distributions differ" if self.reject else (
            "no difference found" if self.adequately_powered else "underpowered: too few samples")
        one = "" if self.power_one_shift is None else (
            f"; against that TV at one position of one prompt only, power {self.power_one_shift:.2f}")
        return GateResult(gate="stochastic_distribution", passed=passed, detail=(
            f"{why}: p={self.p_value:.4f} at significance {self.significance:g}, "
            f"n per arm per prompt {self.min_n_per_arm_per_prompt} (required "
            f"{self.n_required_per_arm_per_prompt} for TV {self.min_detectable_tv:g} at every prompt and position "
            f"at power {self.power:g}; achieved {self.achieved_power:.2f}{one})"
        ))


def stochastic_equivalence(
    a: Mapping[str, Sequence[Sequence[int]]],
    b: Mapping[str, Sequence[Sequence[int]]],
    significance: float = 0.05,
    power: float = 0.8,
    min_detectable_tv: float = 0.1,
    max_categories: int = 10,
    permutations: int = 999,
    seed: int = 0,
) -> StochasticResult:
    """Test whether arms A and B sample the same token sequences, prompt by prompt."""
    _same_prompts(a, b, "stochastic samples")
    if not a:
        raise InputError("stochastic samples: no prompts")
    if permutations < 1 or max_categories < 2:
        raise InputError("need >= 1 permutation and >= 2 categories")
    empty = [pid for pid in sorted(a) if not a[pid] or not b[pid]]
    if empty:
        raise InputError(f"stochastic samples: prompt {empty[0]!r} has no samples in one arm")
    positions = max(len(s) for arm in (a, b) for seqs in arm.values() for s in seqs)
    if positions == 0:
        raise InputError("stochastic samples: every sequence is empty")
    rng = np.random.default_rng(seed)
    observed, df = 0.0, 0
    null = np.zeros(permutations)
    for pid in sorted(a):
        codes = _codes([*a[pid], *b[pid]], positions)
        obs, perm, cell_df = _prompt_statistics(codes, len(a[pid]), max_categories, permutations, rng)
        observed, df, null = observed + obs, df + cell_df, null + perm
    p_value = float((1 + np.sum(null >= observed * (1 - 1e-12))) / (permutations + 1))
    n_min = min(min(len(a[pid]), len(b[pid])) for pid in a)
    design = (min_detectable_tv, significance, len(a), positions, max_categories)
    return StochasticResult(
        n_a=sum(len(s) for s in a.values()), n_b=sum(len(s) for s in b.values()), prompts=len(a),
        positions=positions, min_n_per_arm_per_prompt=n_min,
        n_required_per_arm_per_prompt=stochastic_sample_size(min_detectable_tv, significance, power,
                                                             len(a), positions, max_categories),
        significance=significance, power=power,
        achieved_power=stochastic_power(n_min, *design),
        power_one_shift=stochastic_power(n_min, *design, shifted=1), min_detectable_tv=min_detectable_tv,
        max_categories=max_categories, statistic=observed, degrees_of_freedom=df,
        permutations=permutations, p_value=p_value, reject=p_value <= significance,
    )


def _codes(sequences: Sequence[Sequence[int]], positions: int) -> npt.NDArray[np.int64]:
    out = np.full((len(sequences), positions), ENDED, dtype=np.int64)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = np.asarray(seq[:positions], dtype=np.int64)
    return out


def _pooled_indicators(
    column: npt.NDArray[np.int64], share: float, max_categories: int
) -> npt.NDArray[np.float64]:
    """One-hot columns of the pooled categories at one position (from both arms' counts)."""
    values, inverse, counts = np.unique(column, return_inverse=True, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    kept = [int(i) for i in order[: max_categories - 1] if counts[i] * share >= MIN_EXPECTED]
    category = np.full(len(values), len(kept), dtype=np.intp)  # default: "other"
    category[kept] = np.arange(len(kept))
    other = counts[category == len(kept)].sum()
    if kept and 0 < other * share < MIN_EXPECTED:
        category[category == len(kept)] = len(kept) - 1  # a thin "other" joins the rarest kept one
    labels = category[inverse]
    present = np.unique(labels)
    indicators: npt.NDArray[np.float64] = (labels[:, None] == present[None, :]).astype(np.float64)
    return indicators


def _prompt_statistics(
    codes: npt.NDArray[np.int64], n_a: int, max_categories: int, permutations: int, rng: np.random.Generator,
) -> tuple[float, npt.NDArray[np.float64], int]:
    """Observed and permuted summed chi-square statistics for one prompt, and its df."""
    total, n_b = codes.shape[0], codes.shape[0] - n_a
    share = min(n_a, n_b) / total
    indicator = np.hstack([_pooled_indicators(column, share, max_categories) for column in codes.T])
    df = indicator.shape[1] - codes.shape[1]
    column_totals = indicator.sum(axis=0)
    expected = column_totals * n_a / total
    weight = total**2 / (column_totals * n_a * n_b)
    labels = np.zeros(total)
    labels[:n_a] = 1.0
    shuffled = rng.permuted(np.tile(labels, (permutations, 1)), axis=1)
    observed = float(((labels @ indicator - expected) ** 2 * weight).sum())
    null = (((shuffled @ indicator - expected) ** 2) * weight).sum(axis=1)
    return observed, null, df
