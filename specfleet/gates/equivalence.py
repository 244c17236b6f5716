"""The equivalence gates of a sweep, per speculative arm, from the probes each arm stored.

Seed, "The benchmark contract": greedy exact match against the baseline, with the baseline's
own repeat as the control, and the pre-specified stochastic distribution test. The sweep's
aggregate step calls ``arm_equivalence`` and its summary stores the results; every reader shows
them from there (a report recomputes them only for a sweep that stopped before aggregating).
"""

from collections.abc import Mapping, Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import ArmPlan
from specfleet.contract.sweep import SweepConfig
from specfleet.stats.equivalence import (
    GreedyEquivalence,
    StochasticResult,
    greedy_equivalence,
    stochastic_equivalence,
)
from specfleet.stats.quality import GateResult

PERMUTATIONS = 999


class EquivalenceProbe(RecordModel):
    """What one arm's equivalence probe stored (``equivalence/<arm>.json``): token ids per prompt id."""

    arm: str
    greedy: dict[str, list[int]]
    greedy_repeat: dict[str, list[int]] | None = Field(
        None, description="The baseline's second greedy pass: the numerical-stability control.")
    stochastic: dict[str, list[list[int]]] | None = Field(
        None, description="Sampled continuations; None when the config has no stochastic test.")


class ArmEquivalence(RecordModel):
    """The equivalence results of one speculative arm (stored in the sweep's summary)."""

    arm: str
    greedy: GreedyEquivalence | None
    stochastic: StochasticResult | None
    unavailable: list[str] = Field(description="Why a test has no result (no stored probe, no samples, no "
                                   "stochastic spec).")
    engine_findings: tuple[str, ...] = Field(
        (), description="Engine defects that taint sampled continuations (specfleet.gates.engine_findings).")
    stochastic_configured: bool = Field(
        False, description="The config declares the stochastic test: without its result the arm has a gate that "
        "did not run.")

    @property
    def gates(self) -> list[GateResult]:
        """The gates a decision consumes: none without a greedy result (the decision says so). A
        configured stochastic test whose samples are missing is a gate that did not run: it rejects."""
        if self.greedy is None:
            return []
        if self.stochastic is not None:
            return [self.greedy.gate(), self.stochastic_gate]
        if self.stochastic_configured:
            missing = next((m for m in self.unavailable if m.startswith("stochastic")), "stochastic: no result")
            return [self.greedy.gate(), GateResult(gate="stochastic_distribution", passed=False, ran=False,
                                                   detail=f"configured but not run ({missing})")]
        return [self.greedy.gate()]

    @property
    def stochastic_gate(self) -> GateResult:
        """The stochastic test's gate, its detail naming any engine defect behind the samples."""
        assert self.stochastic is not None
        gate = self.stochastic.gate()
        if not self.engine_findings:
            return gate
        return gate.model_copy(update={"detail": "; ".join([gate.detail, *self.engine_findings])})


def arm_equivalence(config: SweepConfig, plans: list[ArmPlan], probes: Mapping[str, EquivalenceProbe],
                    engine_findings: Sequence[str] = ()) -> list[ArmEquivalence]:
    """``plans[0]`` is the baseline; ``probes`` holds the arms that stored a probe."""
    baseline = probes.get(plans[0].arm)
    spec = config.equivalence.stochastic
    out = []
    for plan in plans[1:]:
        probe = probes.get(plan.arm)
        missing = []
        greedy = stochastic = None
        if baseline is None or probe is None:
            missing.append(f"greedy: no stored probe of {plans[0].arm if baseline is None else plan.arm}")
        else:
            greedy = greedy_equivalence(baseline.greedy, probe.greedy, baseline.greedy_repeat)
        if spec is None:
            missing.append("stochastic: not configured (equivalence.stochastic is unset)")
        else:
            if baseline is None or probe is None or baseline.stochastic is None or probe.stochastic is None:
                missing.append("stochastic: no stored samples of both arms")
            else:
                stochastic = stochastic_equivalence(
                    baseline.stochastic, probe.stochastic, significance=spec.significance, power=spec.power,
                    min_detectable_tv=spec.min_detectable_tv, permutations=PERMUTATIONS, seed=config.analysis.seed)
        out.append(ArmEquivalence(arm=plan.arm, greedy=greedy, stochastic=stochastic, unavailable=missing,
                                  engine_findings=tuple(engine_findings), stochastic_configured=spec is not None))
    return out
