"""What a claim can decide, shown beside its verdict: its minimum detectable saving at 80 % power
(``specfleet.verdicts.power``) and, for an inconclusive claim, what would decide it.

The minimum detectable saving is the whole-replica saving at the smallest true speedup the claim
adopts with 80 % probability, from its design (its standard error) and the sweep's noise (its
degrees of freedom, its corrected critical value): the same at any observed estimate.

What would decide it: an inconclusive claim whose estimate lies above the break-even would be
adopted at 80 % power once its reach (critical value plus power quantile, times the standard
error) fits between the break-even and the estimate; below the break-even, rejected once its
reach fits below it. Every part of the standard error shrinks as the square root of what it is
averaged over (runs per cell, requests per run, baseline server lives), so the factor is the
square of the ratio of the two reaches. A first-order figure: it assumes the estimate stays where
it is, and leaves the correction and the degrees of freedom as they are (more runs raise the
latter, so it errs high).
"""

import math
from collections.abc import Callable

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.verdicts.power import POWER, detectable_of
from specfleet.verdicts.rule import ClaimResult

MAX_SCALE = 20
"""Past this many times the sweep's measurement the words say the claim is out of reach rather than
quote a first-order factor that, at one or two degrees of freedom, runs into the thousands."""


class Detection(RecordModel):
    """A claim's power: the smallest true speedup and saving it adopts at ``power``, the largest
    it rejects, and for an inconclusive claim what would decide it."""

    power: float = Field(description="The probability the figures below are stated at.")
    speedup: float = Field(description="The minimum detectable speedup: the smallest true speedup adopted at "
                           "``power``.")
    saving_fraction: float | None = Field(
        description="The minimum detectable saving: the whole-replica saving at ``speedup`` (None where whole "
        "replicas give none).")
    reject_speedup: float = Field(description="The largest true speedup shown not to pay at ``power``.")
    runs_factor: float | None = Field(
        None, description="Inconclusive claims: how many times this sweep's runs, requests and baseline server "
        "lives would bring the minimum detectable effect within the observed one (None: decided, or the estimate "
        "sits at the break-even).")
    to_decide: str | None = Field(None, description="What would decide an inconclusive claim, in words.")


def detection(result: ClaimResult, saving_at: Callable[[float], float | None]) -> Detection | None:
    """The claim's power and, when inconclusive, what would decide it; None where it has no interval
    (no noise estimate: more repeated runs decide it) or no finite break-even. ``saving_at`` turns a
    speedup into a whole-replica saving, as the claim's own figures do."""
    if not math.isfinite(result.claim.break_even):
        return None
    found = detectable_of(result, POWER)
    if found is None:
        return None
    factor, words = (None, None) if result.verdict != "inconclusive" else _to_decide(
        result, found.adopt_speedup, found.reject_speedup, saving_at)
    return Detection(power=found.power, speedup=found.adopt_speedup, saving_fraction=saving_at(found.adopt_speedup),
                     reject_speedup=found.reject_speedup, runs_factor=factor, to_decide=words)


def _to_decide(result: ClaimResult, adopt_speedup: float, reject_speedup: float,
               saving_at: Callable[[float], float | None]) -> tuple[float | None, str]:
    log_be, log_est = math.log(result.claim.break_even), result.claim.log_estimate
    if log_est > log_be:
        reach, room, way = math.log(adopt_speedup) - log_be, log_est - log_be, "adopt"
    elif log_est < log_be:
        reach, room, way = log_be - math.log(reject_speedup), log_be - log_est, "show not to pay"
    else:
        return None, "its estimate sits at the break-even: no number of runs is sure to decide it"
    factor = (reach / room) ** 2
    observed = saving_at(math.exp(log_est))
    effect = f"saving {observed:+.1%}" if observed is not None else f"speedup {math.exp(log_est):.3f}x"
    if factor > MAX_SCALE:
        return factor, (f"more than {MAX_SCALE}x this sweep's runs per cell, requests and baseline server lives "
                        f"would be needed to {way} were the observed {effect} true: at this noise and design it "
                        "is out of reach (a first-order figure, high where the degrees of freedom are few); "
                        "`specfleet plan --detect` proposes a design for a stated saving")
    nights = max(math.ceil(factor) - 1, 1)
    return factor, (f"about {factor:.1f}x this sweep's runs per cell, requests and baseline server lives (with "
                    f"--continue, about {nights} more night{'s' if nights > 1 else ''} like this one) would {way} at "
                    f"80 % power were the observed {effect} true")
