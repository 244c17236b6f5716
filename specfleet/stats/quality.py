"""Gate results shared by every equivalence check, and the held-out quality gate.

Seed: "Add a held-out task-quality gate for both lossless and lossy methods."
"""

import math

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.errors import InputError


class GateResult(RecordModel):
    """One gate's outcome for one speculative arm, as a decision consumes it."""

    gate: str = Field(description="e.g. 'greedy_exact_match', 'stochastic_distribution', 'quality'.")
    passed: bool
    detail: str


class QualityGate(RecordModel):
    """A held-out task score per arm; the drop from the baseline must stay within tolerance."""

    task: str
    baseline_score: float
    candidate_score: float
    tolerance: float
    higher_is_better: bool
    drop: float = Field(description="How much worse the candidate scored (negative: it scored better).")
    passed: bool

    def gate(self) -> GateResult:
        verb = "within" if self.passed else "exceeds"
        return GateResult(gate="quality", passed=self.passed, detail=(
            f"{self.task}: candidate {self.candidate_score:g} vs baseline {self.baseline_score:g}, "
            f"drop {self.drop:g} {verb} tolerance {self.tolerance:g}"
        ))


def quality_gate(
    task: str,
    baseline_score: float,
    candidate_score: float,
    tolerance: float,
    higher_is_better: bool = True,
) -> QualityGate:
    """Pass when the candidate is worse than the baseline by at most ``tolerance`` score units."""
    for name, value in (("baseline score", baseline_score), ("candidate score", candidate_score)):
        if not math.isfinite(value):
            raise InputError(f"{task}: {name} must be finite (got {value!r})")
    if not tolerance >= 0:
        raise InputError(f"{task}: quality tolerance must be >= 0 (got {tolerance!r})")
    drop = baseline_score - candidate_score if higher_is_better else candidate_score - baseline_score
    return QualityGate(task=task, baseline_score=baseline_score, candidate_score=candidate_score,
                       tolerance=tolerance, higher_is_better=higher_is_better, drop=drop,
                       passed=drop <= tolerance)
