"""Which verdicts an equivalence gate decides: the seed pairs each gate with its decoding mode
(exact match for greedy decoding, the distribution test for stochastic sampling).

A verdict at a sampled mode consumes every gate of its arm. A verdict at a greedy mode does too,
unless the traffic declares greedy requests only (``traffic.sampling``): then the tests of sampled
decoding decide nothing the fleet serves, and a failed one becomes the arm's serving warning
instead of a rejection. Without the declaration the fleet may send any mode, so every gate
applies to every verdict of the arm.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.contract.sweep import SweepConfig
from specfleet.stats.quality import GateResult

SAMPLED_ONLY_GATES = ("stochastic_distribution",)
"""Gates that validate sampled decoding only (``StochasticResult.gate``, ``ArmEquivalence.gates``)."""

SAMPLED_WARNING = "do not serve sampled requests with this arm"


@dataclass(frozen=True)
class ScopedGates:
    """The gates one verdict consumes, and the failures it leaves to the arm's serving warning."""

    gates: list[GateResult]
    serving_warning: str | None


def scoped_gates(gates: Sequence[GateResult], config: SweepConfig, sampling: str) -> ScopedGates:
    """An arm's equivalence gates as a verdict at the ``sampling`` mode consumes them."""
    mode = next(s for s in config.sampling if s.name == sampling)
    if not mode.greedy or config.traffic is None or not config.traffic.greedy_only(config.sampling):
        return ScopedGates(list(gates), None)
    kept = [g for g in gates if g.gate not in SAMPLED_ONLY_GATES]
    unmet = [g for g in gates if g.gate in SAMPLED_ONLY_GATES and not g.passed]
    return ScopedGates(kept, serving_warning(unmet))


def serving_warning(unmet: Sequence[GateResult]) -> str | None:
    """``do not serve sampled requests with this arm: GATE FAILED: detail`` (None: every gate passed)."""
    if not unmet:
        return None
    return f"{SAMPLED_WARNING}: " + "; ".join(
        f"{g.gate} FAILED: {g.detail}" if g.ran else f"{g.gate} not run: {g.detail}" for g in unmet)
