"""Power: the smallest true saving a claim decides, from its design and its noise alone.

A claim is adopted when its corrected lower bound clears the break-even b (``rule``):
log(estimate) - c se_hat > log b, c the corrected one-sided critical value and se_hat the standard
error read from the sweep's noise estimate, with df degrees of freedom. With theta the true log
ratio, (log(estimate) - theta) / se_hat is t with df degrees of freedom, so, to first order in the
shift (se_hat taken at se where it moves the truth), the claim is adopted with probability
``power`` where

    theta >= log b + (c + t_{power, df}) se

(t_{power, df} the power quantile of t). That is the minimum detectable speedup at that power. Its
mirror: a claim is rejected (shown not to pay: corrected upper bound below b) with probability
``power`` where theta <= log b - (c_high + t_{power, df}) se, c_high the upper bound's critical
value. Between the two the claim is inconclusive more often than 1 - power. A saving is
1 - 1 / speedup (whole-replica rounding aside). Neither figure depends on the run values: only on
the design (se through its weights, df) and the noise, so a plan states them before a sweep.
"""

import math
from dataclasses import dataclass
from typing import Literal

from scipy import stats

from specfleet.verdicts.rule import ClaimResult

POWER = 0.8
Side = Literal["adopt", "reject"]


@dataclass(frozen=True)
class Detectable:
    """The true speedups a claim decides at ``power``: adopted at or above ``adopt_speedup``,
    rejected at or below ``reject_speedup``."""

    adopt_speedup: float
    reject_speedup: float
    power: float
    se: float
    """The claim's standard error (log scale) the figures rest on."""

    @property
    def adopt_saving(self) -> float:
        """The minimum detectable saving: the cost saved at the smallest speedup adopted at power."""
        return saving(self.adopt_speedup)

    @property
    def reject_saving(self) -> float:
        """The saving (negative: a loss) at the largest speedup rejected at power."""
        return saving(self.reject_speedup)


def saving(speedup: float) -> float:
    """The share of cost a true speedup saves: 1 - 1 / speedup."""
    return 1.0 - 1.0 / speedup


def speedup_of(saving_share: float) -> float:
    """The speedup that saves ``saving_share`` of the cost (below 1)."""
    if not saving_share < 1.0:
        raise ValueError(f"a saving of {saving_share:.0%} needs an infinite speedup")
    return 1.0 / (1.0 - saving_share)


def detectable_log_ratio(se: float, df: float, critical: float, break_even: float, power: float = POWER,
                         side: Side = "adopt") -> float:
    """The true log ratio decided with probability ``power``: for ``adopt`` the smallest adopted,
    log(break_even) + (critical + t_{power, df}) se; for ``reject`` the largest rejected,
    log(break_even) - (critical + t_{power, df}) se (``critical`` then the upper bound's)."""
    if not 0.0 < power < 1.0:
        raise ValueError(f"power {power} is not between 0 and 1")
    if se < 0 or df <= 0 or break_even <= 0:
        raise ValueError(f"se {se}, df {df} and break-even {break_even}: se >= 0, df > 0, break-even > 0")
    reach = (critical + float(stats.t.ppf(power, df))) * se
    return math.log(break_even) + (reach if side == "adopt" else -reach)


def detectable(se: float, df: float, low_critical: float, high_critical: float, break_even: float,
               power: float = POWER) -> Detectable:
    """Both sides of a claim's power from its standard error, degrees of freedom and corrected
    critical values."""
    return Detectable(
        adopt_speedup=math.exp(detectable_log_ratio(se, df, low_critical, break_even, power, "adopt")),
        reject_speedup=math.exp(detectable_log_ratio(se, df, high_critical, break_even, power, "reject")),
        power=power, se=se)


def detectable_of(result: ClaimResult, power: float = POWER) -> Detectable | None:
    """A decided claim's power, read back from its intervals: se from the marginal two-sided t
    interval, the critical values from the corrected bounds around the estimate. None where the
    claim has no interval (no noise estimate: nothing is decided on it at any true ratio)."""
    marginal, corrected = result.marginal, result.corrected
    ends = (marginal.low, marginal.high, corrected.low, corrected.high)
    if marginal.confidence is None or marginal.df is None or any(e is None or e <= 0 for e in ends):
        return None
    assert marginal.low is not None and marginal.high is not None
    assert corrected.low is not None and corrected.high is not None
    two_sided = float(stats.t.isf((1.0 - marginal.confidence) / 2.0, marginal.df))
    se = (math.log(marginal.high) - math.log(marginal.low)) / (2.0 * two_sided)
    if se <= 0:
        return None
    log_estimate = result.claim.log_estimate
    low = (log_estimate - math.log(corrected.low)) / se
    high = (math.log(corrected.high) - log_estimate) / se
    return detectable(se, marginal.df, low, high, result.claim.break_even, power)
