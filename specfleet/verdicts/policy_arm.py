"""The k policy measured as an arm (``policy.measure``): the arm a derived policy runs, and its
measured verdict beside the one composed from fixed-k cells.

A composed policy verdict (``specfleet.verdicts.mix``) serves each load with the cells measured
there at one k for every request. The engine running the policy switches k per step by its
running batch, which is not the client's concurrency, and pays for that itself; only a server
started with the schedule measures what the recommendation does. The policy arm is derived after
the fixed-k arms and before the closing baseline, from the cells measured by then, and decided on
like any arm: its cells, gates and its own verdict at the mix.
"""

from collections.abc import Sequence

from pydantic import Field

from specfleet.contract.arms import SCHEDULE_KEY, ArmSpec, KSchedule, schedule_text
from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import arm_plans
from specfleet.contract.policy import PolicySpec
from specfleet.contract.sweep import SweepConfig
from specfleet.results.cell import CellResult
from specfleet.verdicts.kpolicy import (
    PEER_MIN_RUNS,
    KPolicy,
    KPolicyReport,
    Recommendation,
    composed_policy_name,
    peer_k_policy,
)
from specfleet.verdicts.mix import MixVerdict
from specfleet.verdicts.rule import Verdict


class DerivedPolicy(RecordModel):
    """One speculative arm's all-classes k policy as the sweep derived it, and the arm that runs it."""

    spec_name: str
    sampling: str
    policy: KPolicy
    arm: ArmSpec | None = Field(description="The arm measuring it; None when there is nothing to measure.")
    reason: str | None = Field(description="Why nothing is measured; None when ``arm`` is set.")


class DerivedPolicies(RecordModel):
    """What a sweep's policy stage derived (stored once, so a resumed sweep measures the same arms)."""

    derived_from: str = Field(description="The sweep whose fixed-k cells the policies come from.")
    cells: int = Field(description="Cells the derivation read.")
    policies: list[DerivedPolicy]

    @property
    def arms(self) -> list[ArmSpec]:
        return [p.arm for p in self.policies if p.arm is not None]


def policy_arm_name(spec_name: str) -> str:
    return f"{spec_name}-policy"


def derive_policies(config: SweepConfig, reports: Sequence[KPolicyReport], cells: Sequence[CellResult],
                    sweep_id: str) -> DerivedPolicies:
    """The all-classes policy of each fixed-k speculative arm at the policy's sampling, by the
    config's ``policy.rule`` (specfleet's from ``reports``; vLLM's proposed tuner from ``cells``), as
    an arm: the arm's own settings with the schedule and k = the schedule's largest."""
    spec = config.policy or PolicySpec()
    sampling, rule = config.policy_sampling, spec.rule
    plans = arm_plans(config)
    ours = {r.specfleet.spec_name: r.specfleet for r in reports if r.peer is None and r.specfleet.sampling == sampling}
    derived = []
    for base in (a for a in config.arms if a.method != "baseline" and not a.adaptive and not a.synthetic):
        if rule == "specfleet":
            policy = ours.get(base.name)
            if policy is None:
                continue
        else:
            policy = peer_k_policy(cells, plans, base.name, sampling=sampling, min_runs=PEER_MIN_RUNS,
                                   max_relative_mad=spec.peer_max_relative_mad)
        derived.append(_policy_arm(base, policy, sampling))
    return DerivedPolicies(derived_from=sweep_id, cells=len(cells), policies=derived)


def _policy_arm(base: ArmSpec, policy: KPolicy, sampling: str) -> DerivedPolicy:
    if policy.refused is not None:
        return DerivedPolicy(spec_name=base.name, sampling=sampling, policy=policy, arm=None,
                             reason=f"no policy: {policy.refused}")
    largest = max((k for *_, k in policy.schedule), default=0)
    if largest == 0:
        return DerivedPolicy(spec_name=base.name, sampling=sampling, policy=policy, arm=None,
                             reason="the policy turns speculation off at every load: it is the baseline, which the "
                             "sweep measures")
    extra = {**base.speculative_extra, SCHEDULE_KEY: [list(r) for r in policy.schedule]}
    arm = base.model_copy(update={"name": policy_arm_name(base.name), "k": [largest], "speculative_extra": extra,
                                  "policy_of": base.name})
    return DerivedPolicy(spec_name=base.name, sampling=sampling, policy=policy,
                         arm=ArmSpec.model_validate(arm.model_dump()), reason=None)


def with_policy_arms(config: SweepConfig, policies: DerivedPolicies | None) -> SweepConfig:
    """The config with the derived policies' arms after its own (the matrix then holds their cells)."""
    if policies is None or not policies.arms:
        return config
    known = {a.name for a in config.arms}
    return config.model_copy(update={"arms": [*config.arms, *(a for a in policies.arms if a.name not in known)]})


class PolicyComparison(RecordModel):
    """A k policy's verdict at the mix composed from fixed-k cells beside the one measured on its own server."""

    spec_name: str
    sampling: str
    rule: str = Field("specfleet", description="The rule that chose the schedule (policy.rule).")
    schedule: KSchedule = Field(description="The schedule the policy arm ran (derived before the closing baseline).")
    measured_arm: str | None = Field(description="The policy arm's id; None when nothing was measured.")
    composed: str | None = Field(description="The composed verdict's headline; None when it could not be formed.")
    measured: str | None = Field(description="The measured verdict's headline; None when nothing was measured.")
    composed_saving_fraction: float | None
    measured_saving_fraction: float | None
    saving_difference: float | None = Field(description="Measured less composed saving; None without both.")
    composed_speedup: float | None = Field(None, description="The composed mix speedup (candidate / baseline "
                                           "SLO-qualified tokens/s per replica); whole replicas can hide it.")
    measured_speedup: float | None = Field(None, description="The measured policy arm's mix speedup.")
    composed_adoptable: bool | None
    measured_adoptable: bool | None
    composed_verdict: Verdict | None = Field(None, description="The composed verdict at the mix: adopt, reject or "
                                             "inconclusive (None: not formed, or a summary written before it).")
    measured_verdict: Verdict | None = Field(None, description="The measured policy arm's verdict at the mix.")
    notes: list[str] = Field(default_factory=list)

    @property
    def line(self) -> str:
        """One line: both savings, how far apart, and which verdict is adoptable."""
        def saving(value: float | None, adoptable: bool | None, verdict: Verdict | None) -> str:
            if value is None:
                return "no saving figure"
            return f"saving {value:+.1%} ({verdict or ('adoptable' if adoptable else 'not adoptable')})"
        def speedup(value: float | None) -> str:
            return "" if value is None else f", mix speedup {value:.3f}x"
        head = f"{self.spec_name} k policy, {self.rule} rule ({schedule_text(self.schedule)}) / {self.sampling}"
        composed = (f"composed {saving(self.composed_saving_fraction, self.composed_adoptable, self.composed_verdict)}"
                    f"{speedup(self.composed_speedup)}")
        if self.measured_arm is None:
            return f"{head}: {composed}; not measured"
        gap = "" if self.saving_difference is None else \
            f"; measured less composed: saving {self.saving_difference:+.1%}"
        if self.composed_speedup and self.measured_speedup:
            gap += f", speedup x{self.measured_speedup / self.composed_speedup:.3f}"
        measured = (saving(self.measured_saving_fraction, self.measured_adoptable, self.measured_verdict)
                    + speedup(self.measured_speedup))
        return f"{head}: {composed}; measured ({self.measured_arm}) {measured}{gap}"


def _composed(mix: Sequence[MixVerdict], policy: KPolicy, sampling: str) -> MixVerdict | None:
    name = composed_policy_name(policy.spec_name, policy.rule)
    return next((v for v in mix if v.name == name and v.sampling == sampling), None)


def compare_policies_measured(policies: DerivedPolicies, mix: Sequence[MixVerdict], reports: Sequence[KPolicyReport],
                              composed_mix: Sequence[MixVerdict] | None = None) -> list[PolicyComparison]:
    """Each derived policy's composed and measured verdicts, with notes where the final analysis
    (closing baseline included) chose another schedule than the one measured. ``composed_mix``: a
    follow-up's (``--policy-from``) composed verdicts, from the sweep that chose the policies."""
    final = {(r.specfleet.spec_name, r.specfleet.sampling): r.specfleet for r in reports if r.peer is None}
    out = []
    for derived in policies.policies:
        composed = _composed(mix if composed_mix is None else composed_mix, derived.policy, derived.sampling)
        arm = derived.arm.name if derived.arm is not None else None
        measured = next((v for v in mix if arm is not None and v.name == arm and v.sampling == derived.sampling), None)
        notes = [derived.reason] if derived.reason else []
        if composed_mix is not None:
            notes.append(f"composed in sweep {policies.derived_from} against its own baseline; measured here against "
                         "this sweep's")
        now = final.get((derived.spec_name, derived.sampling))
        if derived.policy.rule == "specfleet" and now is not None and tuple(now.schedule) != tuple(
                derived.policy.schedule):
            notes.append(f"the final analysis, with the closing baseline, chose {schedule_text(now.schedule)}: the "
                         "measured schedule was derived before it")
        c_saving = composed.fleet.saving_fraction if composed is not None else None
        m_saving = measured.fleet.saving_fraction if measured is not None else None
        out.append(PolicyComparison(
            spec_name=derived.spec_name, sampling=derived.sampling, rule=derived.policy.rule,
            schedule=tuple(derived.policy.schedule),
            measured_arm=arm,
            composed=composed.headline if composed is not None else None,
            measured=measured.headline if measured is not None else None,
            composed_saving_fraction=c_saving, measured_saving_fraction=m_saving,
            saving_difference=None if c_saving is None or m_saving is None else m_saving - c_saving,
            composed_adoptable=composed.adoptable if composed is not None else None,
            measured_adoptable=measured.adoptable if measured is not None else None,
            composed_verdict=composed.verdict if composed is not None else None,
            measured_verdict=measured.verdict if measured is not None else None,
            composed_speedup=_speedup(composed), measured_speedup=_speedup(measured), notes=notes))
    return out


def _speedup(verdict: MixVerdict | None) -> float | None:
    interval = verdict.fleet.speedup_corrected if verdict is not None else None
    return interval.estimate if interval is not None else None


def recommendation(report: KPolicyReport, comparisons: Sequence[PolicyComparison]) -> Recommendation:
    """Measured when a policy arm ran exactly this schedule at this sampling, or when the policy
    turns speculation off everywhere (the baseline is measured); else composed."""
    policy = report.specfleet
    if report.speculative_config is None:
        return "measured"
    return "measured" if any(c.spec_name == policy.spec_name and c.sampling == policy.sampling and c.rule == "specfleet"
                             and c.measured_arm is not None and c.schedule == tuple(policy.schedule)
                             for c in comparisons) else "composed, not measured"


def with_recommendations(reports: Sequence[KPolicyReport],
                         comparisons: Sequence[PolicyComparison]) -> list[KPolicyReport]:
    """The all-classes reports marked measured or composed; the per-class ones are never deployed."""
    return [r if r.peer is not None else r.model_copy(update={"recommended": recommendation(r, comparisons)})
            for r in reports]
