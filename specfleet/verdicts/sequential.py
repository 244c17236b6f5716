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
"""

from dataclasses import dataclass
from typing import Literal

from scipy import stats

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
