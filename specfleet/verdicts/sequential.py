"""Deciding over nights: a claim left inconclusive is measured again and decided as its runs
accumulate, and every look is another chance of a wrong verdict. The error rate holds across the
looks when each look spends its own share of it.

A continued claim declares its maximum number of looks K up front. Look k (1-based) decides at
confidence 1 - (A(k / K) - A((k - 1) / K)), A the cumulative spending function with A(1) = 1 -
confidence: by the union bound over looks, the chance of any wrong adopt (and, apart, of any wrong
reject) over all K looks is at most 1 - confidence, whatever the looks' correlation. Each look's
family is still corrected over its own claims (``rule``), so the bound holds for the whole
sequence of sweeps. A claim decided (adopt or reject) stays decided: it is not looked at again.

- ``bonferroni``: equal shares, A(t) = alpha t: the simple valid choice.
- ``obrien_fleming``: O'Brien-Fleming-like spending (Lan & DeMets 1983), A(t) = 2 - 2 Phi(z_{1 -
  alpha / 2} / sqrt t): almost nothing spent on the first looks, when the runs are few, and most
  of it on the last, so the final look decides at nearly the plain confidence. Used here with the
  union bound (no joint distribution of the looks), so it is conservative, never anticonservative.

``analysis.nights`` makes consecutive sweeps of a config the looks of one sequence (``Look``): each
look pools the runs of the sequence's earlier sweeps with its own and decides at its share of the
error rate; a claim an earlier look decided carries that verdict (``Carried``).
"""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field
from scipy import stats

from specfleet.contract.base import RecordModel
from specfleet.contract.checks import NightsSpec

Spending = Literal["bonferroni", "obrien_fleming"]
Verdict = Literal["adopt", "reject", "inconclusive"]


@dataclass(frozen=True)
class LookPlan:
    """How a claim's error rate is spent over at most ``max_looks`` looks."""

    max_looks: int
    confidence: float
    spending: Spending = "obrien_fleming"

    def __post_init__(self) -> None:
        if self.max_looks < 1:
            raise ValueError(f"max_looks {self.max_looks}: at least one look")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence {self.confidence} is not between 0 and 1")

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    def spent(self, fraction: float) -> float:
        """A(t): the error rate spent by information fraction ``fraction`` (0 to 1)."""
        t = min(max(fraction, 0.0), 1.0)
        if t == 0.0:
            return 0.0
        if self.spending == "bonferroni":
            return self.alpha * t
        return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.isf(self.alpha / 2.0) / t**0.5))

    def confidence_at(self, look: int) -> float:
        """The confidence look ``look`` (1-based) decides at: 1 - its share of the error rate."""
        if not 1 <= look <= self.max_looks:
            raise ValueError(f"look {look} is outside 1..{self.max_looks}")
        share = self.spent(look / self.max_looks) - self.spent((look - 1) / self.max_looks)
        return 1.0 - share


def carried(previous: Verdict | None, now: Verdict) -> Verdict:
    """A decided claim stays decided; an inconclusive one takes this look's verdict."""
    return previous if previous in ("adopt", "reject") else now


class Look(RecordModel):
    """Which look of its sequence a sweep is (``analysis.nights``) and the confidence it decides at."""

    look: int = Field(description="This sweep's look, 1-based.")
    of: int = Field(description="The sequence's most looks (analysis.nights.looks).")
    confidence: float = Field(description="The confidence this look decides at: 1 - its share of the error rate.")
    spending: Spending
    earlier_sweeps: list[str] = Field(
        default_factory=list, description="The sequence's earlier sweeps, oldest first: their runs are pooled "
        "with this sweep's, and the newest one's decided verdicts are carried.")

    @property
    def text(self) -> str:
        """"look k of K, decided at confidence c": the line every output showing a verdict carries."""
        share = 1.0 - self.confidence
        level = f"1 - {share:.2g}" if share < 1e-3 else f"{self.confidence:.4g}"
        return f"look {self.look} of {self.of} ({self.spending} spending), decided at confidence {level}"


class Carried(RecordModel):
    """A verdict an earlier look of the sequence decided, which this look keeps (``carried``)."""

    verdict: Literal["adopt", "reject"]
    sweep: str = Field(description="The sweep whose look decided it.")
    look: int

    @property
    def text(self) -> str:
        return f"{self.verdict} carried from look {self.look} (sweep {self.sweep})"


def next_look(nights: NightsSpec, confidence: float, previous: tuple[str, Look | None] | None) -> Look:
    """The look a sweep is, after ``previous`` (the newest earlier finished sweep of the same config and
    fingerprint, with its look; None: there is none): the next look of its sequence, or look 1 of a new
    one after a sequence's last look, after a sweep decided without ``analysis.nights`` or under
    another plan of looks."""
    plan = LookPlan(nights.looks, confidence, nights.spending)
    earlier = previous[1] if previous is not None else None
    same_plan = (earlier is not None and earlier.of == nights.looks and earlier.spending == nights.spending
                 and earlier.look < nights.looks)
    if previous is None or earlier is None or not same_plan:
        return Look(look=1, of=plan.max_looks, confidence=plan.confidence_at(1), spending=plan.spending)
    look = earlier.look + 1
    return Look(look=look, of=plan.max_looks, confidence=plan.confidence_at(look), spending=plan.spending,
                earlier_sweeps=[*earlier.earlier_sweeps, previous[0]])
