"""The verdict per prompt class: does some speculative arm save on this class, at the traffic
mix's load shares? The class claims are the ones the verdicts at the mix check (``per_class`` of
each arm's ``MixVerdict``), decided in the sweep's one family by ``specfleet.verdicts.rule``: a
class is ``adopt`` when one of them is adopted and covers the class as ``analysis.min_coverage``
asks, ``reject`` when every arm's class claim is rejected (shown not to pay, or no saving can be
formed), else ``inconclusive``. The arm shown is the adopted one whose corrected interval's low end saves most (else the
one that came closest); the interval shown is that corrected one, simultaneous over the family,
so picking the best arm and showing its interval is covered.
"""

from collections.abc import Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import arm_plans, load_label
from specfleet.contract.sweep import SweepConfig
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.kpolicy import KPolicy, KPolicyReport
from specfleet.verdicts.mix import MixFigures, MixVerdict
from specfleet.verdicts.rule import Verdict


class ClassVerdict(RecordModel):
    label: str = Field(description="The prompt class, with the sampling mode when the sweep has more than one.")
    prompt_class: str
    sampling: str
    verdict: Verdict
    arm: str | None = Field(description="The arm shown (adopted, or closest); None when no arm has a figure here.")
    method: str | None
    k: int | None
    figures: MixFigures | None = Field(description="The arm's figures on this class alone at the load shares.")
    reason: str
    adopted_at: list[str] = Field(description="The cells of this class adopted on their own (arm @ load).")
    comparisons: int | None = Field(description="Comparisons of the sweep the verdict was corrected for.")
    policy: KPolicy | None
    speculative_config: dict[str, object] | None
    config_note: str = Field(description="Why there is no config, or that it is a fixed k rather than a schedule.")


def row_label(config: SweepConfig, prompt_class: str, sampling: str) -> str:
    """The prompt class, with the sampling mode when the sweep has more than one."""
    return prompt_class if len(config.sampling) == 1 else f"{prompt_class} / {sampling}"


def _low(f: MixFigures) -> float:
    return f.pessimistic_saving_fraction if f.pessimistic_saving_fraction is not None else float("-inf")


def _reason(f: MixFigures | None, adopted: bool, min_coverage: float) -> str:
    if f is None:
        return "no arm has a figure on this class"
    if f.saving_fraction is None:
        return f"no saving figure: {f.reason}"
    interval = f.speedup_corrected
    bounds = (f" [{interval.low:.3f}, {interval.high:.3f}] ({interval.uncertainty})"
              if interval is not None and interval.low is not None and interval.high is not None else "")
    figures = f"saving {f.saving_fraction:+.1%}, corrected speedup{bounds}"
    if adopted:
        return f"{figures}: beyond the noise"
    if f.adopted and f.covered_share < min_coverage:
        return f"{figures}: PARTIAL, covers {f.covered_share:.1%} of the class, under analysis.min_coverage"
    if f.verdict == "reject":
        return f"{figures}: shown not to pay"
    return f"{figures}: inconclusive, the interval reaches the break-even"


def _deployable(policy: KPolicy | None, arm: str | None, adopted: bool,
                config: SweepConfig) -> tuple[dict[str, object] | None, str]:
    if policy is not None:
        schedule = policy.speculative_config()
        return schedule, policy.refused or ("" if schedule else "speculation adopted at no measured level: keep it off")
    if adopted and arm is not None:
        fixed = next(p.speculative_config for p in arm_plans(config) if p.arm == arm)
        return fixed, "fixed k: no concurrency levels were measured, so no per-batch-size schedule"
    return None, "speculation adopted nowhere in this class: keep it off"


def class_verdicts(config: SweepConfig, decisions: Sequence[Decision], mix: Sequence[MixVerdict],
                   policies: Sequence[KPolicyReport]) -> list[ClassVerdict]:
    """Per prompt class and sampling mode, over the speculative arms' verdicts at the mix."""
    plans = {p.arm: p for p in arm_plans(config)}
    arms = [v for v in mix if v.name in plans]
    out = []
    for pc in config.prompt_classes:
        for s in config.sampling:
            options = [(v, v.per_class[pc.name]) for v in arms if v.sampling == s.name and pc.name in v.per_class]
            adopted = [(v, f) for v, f in options if f.adopted and f.covered_share >= config.analysis.min_coverage]
            pick = max(adopted or options, key=lambda o: _low(o[1]), default=None)
            plan = plans[pick[0].name] if pick else None
            policy = None if plan is None else next(
                (p.specfleet for p in policies if p.specfleet.prompt_class == pc.name
                 and p.specfleet.sampling == s.name and p.specfleet.spec_name == plan.spec_name), None)
            deploy, note = _deployable(policy, plan.arm if plan else None, bool(adopted), config)
            cells = [d for d in decisions if d.slice.prompt_class == pc.name and d.slice.sampling == s.name]
            shown = bool(options) and all(f.verdict == "reject" for _, f in options)
            verdict: Verdict = "adopt" if adopted else "reject" if shown else "inconclusive"
            out.append(ClassVerdict(
                label=row_label(config, pc.name, s.name), prompt_class=pc.name, sampling=s.name,
                verdict=verdict, arm=plan.arm if plan else None,
                method=plan.method if plan else None, k=plan.k if plan else None,
                figures=pick[1] if pick else None,
                reason=_reason(pick[1] if pick else None, bool(adopted), config.analysis.min_coverage),
                adopted_at=[f"{d.slice.arm} @ {load_label(d.slice.load_mode, d.slice.load_value)}"
                            for d in cells if d.verdict == "adopt"],
                comparisons=pick[0].comparisons if pick else None, policy=policy, speculative_config=deploy,
                config_note=note))
    return out


