"""Gate results shared by every equivalence check, and the held-out quality gate.

Seed, "An equivalence test that survives numerics": "Add a held-out task-quality gate for both
lossless and lossy methods." Both arms answer the same scored items (``specfleet.gates.scored_set``);
the gate compares their per-item scores, paired by item id.
"""

import math
from collections.abc import Mapping

import numpy as np
from pydantic import Field, model_validator

from specfleet.contract.base import RecordModel
from specfleet.errors import InputError
from specfleet.stats import bootstrap as bs

Scores = Mapping[str, float | None]
"""Score in [0, 1] per item id; None where the arm gave no answer."""


class GateResult(RecordModel):
    """One gate's outcome for one speculative arm, as a decision consumes it."""

    gate: str = Field(description="e.g. 'greedy_exact_match', 'stochastic_distribution', 'quality'.")
    passed: bool
    detail: str
    ran: bool = Field(
        True, description="False: the gate could not run (e.g. no scored set), so it has not passed. "
        "Summaries written before this field existed hold gates that ran."
    )

    @model_validator(mode="after")
    def _not_run_not_passed(self) -> "GateResult":
        if not self.ran and self.passed:
            raise ValueError(f"gate {self.gate!r} did not run, so it cannot have passed")
        return self


class QualityResult(RecordModel):
    """One speculative arm's held-out scores against the baseline's on the same items."""

    prompt_class: str
    sampling: str
    items: int = Field(description="Items both arms answered: the paired comparison's size.")
    baseline_mean: float | None = Field(description="Mean score over the paired items; None without any.")
    candidate_mean: float | None
    difference: bs.Interval | None = Field(
        description="Mean of candidate - baseline per paired item, with a paired bootstrap interval over items."
    )
    tolerance: float = Field(description="How much worse (score units) the candidate may be at the interval's low end.")
    baseline_unanswered: list[str] = Field(description="Item ids the baseline gave no answer for (not scored).")
    candidate_unanswered: list[str] = Field(description="Item ids the candidate gave no answer for (not scored).")
    passed: bool

    def gate(self) -> GateResult:
        return GateResult(gate="quality", passed=self.passed, detail=f"{self.prompt_class}/{self.sampling}: "
                          + "; ".join([self._comparison(), *self._unanswered()]))

    def _comparison(self) -> str:
        d = self.difference
        if d is None or d.low is None or d.high is None:
            return "no item answered by both arms"
        verdict = "within" if d.low >= -self.tolerance else "can be worse by more than"
        return (f"candidate {self.candidate_mean:.3f} vs baseline {self.baseline_mean:.3f} over {self.items} items, "
                f"difference {d.estimate:+.3f} [{d.confidence:.0%} {d.low:+.3f}, {d.high:+.3f}] "
                f"{verdict} tolerance {self.tolerance:g}")

    def _unanswered(self) -> list[str]:
        return [f"no answer from the {arm} for {', '.join(ids)} (fails the gate)"
                for arm, ids in (("baseline", self.baseline_unanswered), ("candidate", self.candidate_unanswered))
                if ids]


def quality_gate(
    baseline: Scores,
    candidate: Scores,
    *,
    prompt_class: str,
    sampling: str,
    tolerance: float,
    confidence: float,
    resamples: int,
    rng: np.random.Generator,
) -> QualityResult:
    """Pass when the interval's low end of (candidate - baseline) is at least ``-tolerance``
    and both arms answered every item.

    An unanswered item is named and left out of the means, never scored 0; it fails the gate,
    since the candidate's quality on it is unknown. The interval is the central ``confidence``
    percentile interval of ``resamples`` paired bootstrap means over items (``rng`` seeds it).
    """
    where = f"quality {prompt_class}/{sampling}"
    _check(baseline, candidate, where, tolerance)
    paired = sorted(i for i in baseline if baseline[i] is not None and candidate[i] is not None)
    base = np.array([baseline[i] for i in paired], dtype=np.float64)
    cand = np.array([candidate[i] for i in paired], dtype=np.float64)
    difference = None
    if paired:
        diffs = cand - base
        replicates = bs.mean_replicates(diffs, rng, resamples)
        difference = bs.percentile_interval(float(diffs.mean()), replicates, confidence, "items")
    baseline_unanswered = sorted(i for i in baseline if baseline[i] is None)
    candidate_unanswered = sorted(i for i in candidate if candidate[i] is None)
    within = difference is not None and difference.low is not None and difference.low >= -tolerance
    return QualityResult(
        prompt_class=prompt_class, sampling=sampling, items=len(paired),
        baseline_mean=float(base.mean()) if paired else None, candidate_mean=float(cand.mean()) if paired else None,
        difference=difference, tolerance=tolerance,
        baseline_unanswered=baseline_unanswered, candidate_unanswered=candidate_unanswered,
        passed=within and not baseline_unanswered and not candidate_unanswered,
    )


def _check(baseline: Scores, candidate: Scores, where: str, tolerance: float) -> None:
    only_baseline, only_candidate = sorted(set(baseline) - set(candidate)), sorted(set(candidate) - set(baseline))
    if only_baseline or only_candidate:
        raise InputError(f"{where}: the arms scored different items: missing from the candidate: "
                         f"{', '.join(only_baseline) or 'none'}; missing from the baseline: "
                         f"{', '.join(only_candidate) or 'none'}")
    if not baseline:
        raise InputError(f"{where}: no scored items")
    for arm, scores in (("baseline", baseline), ("candidate", candidate)):
        bad = sorted(i for i, s in scores.items() if s is not None and not 0.0 <= s <= 1.0)
        if bad:
            raise InputError(f"{where}: {arm} scores must be in [0, 1] (items {', '.join(bad)})")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise InputError(f"{where}: quality tolerance must be >= 0 (got {tolerance!r})")


def quality_not_run(why: str) -> GateResult:
    """The quality gate of an arm that could not run it, e.g. ``why`` = "prompt class 'chat' has
    no scored set": it has not passed, so a decision rejects and its reason says so."""
    return GateResult(gate="quality", passed=False, ran=False, detail=f"quality gate not run: {why}")
