"""The verdict at the production traffic mix: the seed's entry gate ("Production gates": net
SLO-qualified cost per million accepted tokens lower than the baseline by more than the
measurement noise, at the production concurrency distribution, on at least three prompt classes).

Formulas, over the measured cells of the mix only (never filled in):

- Mix throughput per replica (seed: "Results template and calculator", per-replica SLO-qualified
  tokens per second): the token-share-weighted harmonic mean T = sum(f) / sum(f / T_cell), the
  replica-seconds per token averaged over the tokens the fleet serves, f a cell's token share.
- Whole replicas and cost per million: ``specfleet.cost.fleet_cost`` at peak demand, for the
  baseline and the candidate; saving = 1 - candidate cost / baseline cost.
- Interval: every cell's candidate at its speedup interval's low (high) end, baseline_tps x end,
  combined the same way: the pessimistic (optimistic) saving. All cells at their ends at once is
  conservative: wider than an interval of the mix's own throughput.
- Noise floor: the largest noise floor of the measured cells (conservative: the mix's relative
  spread is at most its worst cell's when cells move together).
- Entry gate, checked one by one: (a) pessimistic saving > noise floor; (b) every load with a
  positive share has a measured cell; (c) at least three classes (every class of the mix when
  fewer) pass (a) alone: the class's cells at the load shares, the fleet sized for peak demand.

A cell counts when its decision has a comparison. One where an arm had no SLO-qualified tokens
is measured, not missing: the mix cannot be served there, so no saving figure is formed.

The entry gate weighs cost alone. The other tests a cell's decision runs (the SLO, the equivalence
and quality gates) are reported beside it as ``other_gates``: a verdict is adoptable only when the
entry gate passes and no measured cell of the mix was rejected by one of them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import arm_plans
from specfleet.contract.models import HardwareSpec
from specfleet.contract.sweep import SweepConfig
from specfleet.cost import fleet_cost
from specfleet.decisions import Decision, ReasonCode
from specfleet.kpolicy import KPolicyReport
from specfleet.traffic import CellKey, TrafficMix, cell_token_shares, effective_mix

MIN_CLASSES = 3
"""The entry gate's prompt classes, or every class of the mix when it has fewer."""

CheckName = Literal["saving_beyond_noise", "production_load_distribution", "prompt_classes", "other_gates"]

BLOCKING: tuple[ReasonCode, ...] = ("slo_missed", "no_gate", "gate_failed", "quality_not_run")
"""Decision codes that reject a cell whatever its cost: the SLO and the gates."""


class MixCell(RecordModel):
    """One (prompt class, load) cell of the mix with a positive share, and whether it counts."""

    prompt_class: str
    load_value: float
    token_share: float
    k: int | None = Field(description="The speculative k serving this cell; 0 where a k policy turns it off.")
    measured: bool
    reason: str | None = Field(description="Why the cell is left out; None when measured.")
    blocked_by: str | None = Field(
        None, description="The decision's reason code when the SLO or a gate rejected the measured cell.")


class MixFigures(RecordModel):
    """Mix-weighted figures over measured cells; None with ``reason`` where one cannot be formed."""

    covered_share: float = Field(description="Token share of the selection's cells that were measured.")
    baseline_tokens_per_s_per_replica: float | None
    candidate_tokens_per_s_per_replica: float | None
    baseline_replicas: int | None
    candidate_replicas: int | None
    baseline_cost_per_million_usd: float | None
    candidate_cost_per_million_usd: float | None
    saving_fraction: float | None
    pessimistic_saving_fraction: float | None
    optimistic_saving_fraction: float | None
    noise_floor: float | None
    reason: str | None = Field(description="Why a figure above is None; None when all are set.")

    @property
    def beyond_noise(self) -> bool:
        """The seed's test: the saving at the interval's low end exceeds the noise floor."""
        low, noise = self.pessimistic_saving_fraction, self.noise_floor
        return low is not None and noise is not None and low > noise


class GateCheck(RecordModel):
    name: CheckName
    passed: bool
    detail: str


class MixVerdict(RecordModel):
    """One speculative arm, or one k policy, at the traffic mix."""

    name: str = Field(description="Arm id (e.g. 'draft-k3') or '<arm spec>-k-policy': a stable key for metrics.")
    subject: str = Field(description="Arm id (e.g. 'draft-k3') or the k policy with its k per load.")
    sampling: str
    mix: TrafficMix
    cells: list[MixCell]
    fleet: MixFigures
    per_class: dict[str, MixFigures] = Field(description="Each class alone at the load shares, peak demand.")
    checks: list[GateCheck] = Field(description="The entry gate's three conditions, in the seed's order.")
    other_gates: GateCheck = Field(description="The SLO, equivalence and quality gates over the measured cells.")

    @property
    def coverage(self) -> float:
        return self.fleet.covered_share

    @property
    def passed(self) -> bool:
        """The entry gate: all three conditions."""
        return all(c.passed for c in self.checks)

    @property
    def adoptable(self) -> bool:
        return self.passed and self.other_gates.passed

    @property
    def headline(self) -> str:
        """First line: partial coverage first, then the verdict and its figures, then a default mix."""
        partial = "" if self.coverage >= 1.0 else f"PARTIAL (covers {self.coverage:.1%} of the mix): "
        failed = [c.name for c in self.checks if not c.passed]
        verdict = "entry gate passed" if not failed else f"entry gate FAILED ({', '.join(failed)})"
        if not self.other_gates.passed:
            verdict += ", other gates FAILED: not adoptable" if not failed else ", other gates FAILED"
        default = " (default mix: no traffic block)" if self.mix.default else ""
        return f"{partial}{self.subject} / {self.sampling}: {verdict}: {_figures_line(self.fleet)}{default}"


@dataclass(frozen=True, slots=True)
class _Cell:
    """What one measured cell contributes: throughputs, the speedup interval's ends, noise."""

    baseline_tokens_per_s: float
    candidate_tokens_per_s: float
    speedup_low: float | None
    speedup_high: float | None
    noise_floor: float | None
    blocked_by: str | None = None


def _figures_line(f: MixFigures) -> str:
    if f.saving_fraction is None:
        return f"no saving figure ({f.reason})"
    low, high = f.pessimistic_saving_fraction, f.optimistic_saving_fraction
    interval = f"[{low:+.1%}, {high:+.1%}]" if low is not None and high is not None else "(no interval)"
    noise = f"{f.noise_floor:.1%}" if f.noise_floor is not None else "unknown"
    return (f"saving {f.saving_fraction:+.1%} {interval} vs noise {noise}, "
            f"{f.baseline_replicas} -> {f.candidate_replicas} replicas")


def _harmonic_tokens_per_s(parts: Sequence[tuple[float, float | None]]) -> float | None:
    """sum(f) / sum(f / T) over (token share f, tokens per s T); 0 when a cell with a share has
    T = 0 (the mix cannot be served there), None when a T is missing."""
    if any(t is None for _, t in parts):
        return None
    if any(t == 0 for f, t in parts if f > 0):
        return 0.0
    return sum(f for f, _ in parts) / sum(f / t for f, t in parts if f > 0 and t)


def _replicas_cost(hardware: HardwareSpec, tokens_per_s: float) -> tuple[int, float]:
    cost = fleet_cost(hardware.accelerators_per_replica, hardware.accelerator_hour_usd, tokens_per_s,
                      hardware.peak_demand_tokens_per_s)
    return cost.replicas, cost.cost_per_million_usd


def _saving_at_end(hardware: HardwareSpec, parts: Sequence[tuple[float, _Cell]], base_cost_usd: float,
                   end: Literal["low", "high"]) -> float | None:
    """Saving were every cell's candidate at its speedup interval's ``end``."""
    speedups = [c.speedup_low if end == "low" else c.speedup_high for _, c in parts]
    usable = [s for s in speedups if s is not None and s > 0]
    if len(usable) != len(parts):
        return None
    tps = _harmonic_tokens_per_s([(f, c.baseline_tokens_per_s * s) for (f, c), s in zip(parts, usable, strict=True)])
    return None if not tps else 1.0 - _replicas_cost(hardware, tps)[1] / base_cost_usd


def _noise(parts: Sequence[tuple[float, _Cell]]) -> float | None:
    floors = [c.noise_floor for _, c in parts]
    return None if not floors or any(n is None for n in floors) else max(n for n in floors if n is not None)


def _mix_figures(hardware: HardwareSpec, parts: Sequence[tuple[float, _Cell]], total_share: float) -> MixFigures:
    """Whole-replica figures of the measured ``parts`` (token share, cell) out of ``total_share``."""
    base_tps = _harmonic_tokens_per_s([(f, c.baseline_tokens_per_s) for f, c in parts]) if parts else None
    cand_tps = _harmonic_tokens_per_s([(f, c.candidate_tokens_per_s) for f, c in parts]) if parts else None
    noise = _noise(parts)
    base = cand = None
    saving = low = high = None
    if base_tps and cand_tps:
        base, cand = _replicas_cost(hardware, base_tps), _replicas_cost(hardware, cand_tps)
        saving = 1.0 - cand[1] / base[1]
        low, high = _saving_at_end(hardware, parts, base[1], "low"), _saving_at_end(hardware, parts, base[1], "high")
    return MixFigures(
        covered_share=sum(f for f, _ in parts) / total_share if total_share else 0.0,
        baseline_tokens_per_s_per_replica=base_tps, candidate_tokens_per_s_per_replica=cand_tps,
        baseline_replicas=base[0] if base else None, candidate_replicas=cand[0] if cand else None,
        baseline_cost_per_million_usd=base[1] if base else None,
        candidate_cost_per_million_usd=cand[1] if cand else None,
        saving_fraction=saving, pessimistic_saving_fraction=low, optimistic_saving_fraction=high,
        noise_floor=noise, reason=_why_missing(parts, base_tps, cand_tps, low, noise),
    )


def _why_missing(parts: Sequence[tuple[float, _Cell]], base_tps: float | None, cand_tps: float | None,
                 low: float | None, noise: float | None) -> str | None:
    if not parts:
        return "no measured cell"
    if not base_tps or not cand_tps:
        side = "baseline" if not base_tps else "speculative arm"
        return f"the {side} has no SLO-qualified tokens in a cell of the mix"
    missing = [name for name, v in (("speedup interval", low), ("noise floor", noise)) if v is None]
    return f"a measured cell has no {' or '.join(missing)}" if missing else None


def _decision_cell(d: Decision) -> _Cell | str:
    """The figures a decision gives its cell, or why it is unusable (no comparison)."""
    c = d.comparison
    if c is None:
        return f"unusable: {d.reason}"
    interval = c.qualified_tps_speedup
    return _Cell(c.baseline_qualified_tokens_per_s, c.candidate_qualified_tokens_per_s,
                 interval.low if interval else None, interval.high if interval else None,
                 d.cost.noise_floor if d.cost else None, d.reason_code if d.reason_code in BLOCKING else None)


def _baseline_cell(d: Decision) -> _Cell | str:
    """Speculation off (k = 0): the candidate is the baseline, speedup exactly 1."""
    c = d.comparison
    if c is None:
        return f"unusable: {d.reason}"
    base = c.baseline_qualified_tokens_per_s
    return _Cell(base, base, 1.0, 1.0, d.cost.noise_floor if d.cost else None)


Found = dict[CellKey, tuple[int, _Cell | str]]
"""Per cell of the mix: the k serving it and its figures, or why it is unusable."""


def _measured(entry: tuple[int, _Cell | str] | None) -> bool:
    return entry is not None and isinstance(entry[1], _Cell)


def _load_label(mix: TrafficMix, load: float) -> str:
    return f"c{load:g}" if mix.load_mode == "concurrency" else f"r{load:g}/s"


def _check_saving(fleet: MixFigures) -> GateCheck:
    low, noise = fleet.pessimistic_saving_fraction, fleet.noise_floor
    if low is None or noise is None:
        return GateCheck(name="saving_beyond_noise", passed=False, detail=f"no figure: {fleet.reason}")
    sign = ">" if fleet.beyond_noise else "<="
    return GateCheck(name="saving_beyond_noise", passed=fleet.beyond_noise,
                     detail=f"pessimistic {low:+.1%} {sign} noise {noise:.1%}")


def _check_loads(mix: TrafficMix, cells: Sequence[MixCell]) -> GateCheck:
    """Every load with a positive share has at least one measured cell."""
    covered = {c.load_value for c in cells if c.measured}
    missing = [_load_label(mix, load) for load, q in mix.load_shares.items() if q > 0 and load not in covered]
    detail = f"no measured cell at {', '.join(missing)}" if missing else "a measured cell at every load"
    return GateCheck(name="production_load_distribution", passed=not missing, detail=detail)


def _check_classes(per_class: Mapping[str, MixFigures]) -> GateCheck:
    """At least three classes (every class of the mix when fewer) save beyond noise on their own."""
    beyond = [name for name, f in per_class.items() if f.beyond_noise]
    required = min(MIN_CLASSES, len(per_class))
    return GateCheck(name="prompt_classes", passed=len(beyond) >= required,
                     detail=f"{len(beyond)} of {len(per_class)} classes beyond noise ({', '.join(beyond) or 'none'}), "
                     f"{required} required")


def _check_other_gates(cells: Sequence[MixCell]) -> GateCheck:
    """No measured cell of the mix was rejected by the SLO or a gate (its decision's reason code)."""
    measured = [c for c in cells if c.measured]
    if not measured:
        return GateCheck(name="other_gates", passed=False, detail="no measured cell")
    blocked = [c for c in measured if c.blocked_by]
    codes = sorted({c.blocked_by for c in blocked if c.blocked_by})
    detail = (f"{len(blocked)} of {len(measured)} measured cells rejected by {', '.join(codes)}" if blocked
              else f"SLO and gates pass at all {len(measured)} measured cells")
    return GateCheck(name="other_gates", passed=not blocked, detail=detail)


def _verdict(name: str, subject: str, sampling: str, config: SweepConfig, mix: TrafficMix,
             shares: Mapping[CellKey, float], found: Found) -> MixVerdict:
    """The verdict over the cells of ``shares`` with a positive share; ``found`` gives measured ones."""
    cells, parts = [], {}
    for key, share in shares.items():
        if share <= 0:
            continue
        k, got = found.get(key, (None, "not measured"))
        cells.append(MixCell(prompt_class=key[0], load_value=key[1], token_share=share, k=k,
                             measured=isinstance(got, _Cell), reason=got if isinstance(got, str) else None,
                             blocked_by=got.blocked_by if isinstance(got, _Cell) else None))
        if isinstance(got, _Cell):
            parts[key] = (share, got)
    hardware = config.hardware
    classes = sorted({key[0] for key, share in shares.items() if share > 0})
    per_class = {name: _mix_figures(hardware, [p for key, p in parts.items() if key[0] == name],
                                    sum(s for key, s in shares.items() if key[0] == name))
                 for name in classes}
    fleet = _mix_figures(hardware, list(parts.values()), sum(s for s in shares.values() if s > 0))
    return MixVerdict(name=name, subject=subject, sampling=sampling, mix=mix, cells=cells, fleet=fleet,
                      per_class=per_class,
                      checks=[_check_saving(fleet), _check_loads(mix, cells), _check_classes(per_class)],
                      other_gates=_check_other_gates(cells))


def _at_mix(decisions: Sequence[Decision], mix: TrafficMix, sampling: str) -> list[Decision]:
    return [d for d in decisions if d.slice.sampling == sampling and d.slice.load_mode == mix.load_mode]


def arm_mix_verdict(
    decisions: Sequence[Decision], config: SweepConfig, arm: str, sampling: str, mix: TrafficMix | None = None,
    output_tokens_per_request: Mapping[str, float] | None = None,
) -> MixVerdict:
    """One speculative arm (e.g. 'draft-k3') at the mix (default ``effective_mix(config)``).

    ``output_tokens_per_request`` (per class) turns request shares into token shares."""
    mix = mix or effective_mix(config)
    found: Found = {(d.slice.prompt_class, d.slice.load_value): (d.slice.k, _decision_cell(d))
                    for d in _at_mix(decisions, mix, sampling) if d.slice.arm == arm}
    return _verdict(arm, arm, sampling, config, mix, cell_token_shares(mix, output_tokens_per_request), found)


def policy_mix_verdict(
    decisions: Sequence[Decision], config: SweepConfig, spec_name: str, k_by_load: Mapping[float, int],
    sampling: str, mix: TrafficMix | None = None, output_tokens_per_request: Mapping[str, float] | None = None,
) -> MixVerdict:
    """A k policy of arm spec ``spec_name``: at each load, the decision of the arm with that
    load's k; k = 0 serves the load with the baseline. A load without a k is not measured."""
    mix = mix or effective_mix(config)
    arm_of = {p.k: p.arm for p in arm_plans(config) if p.spec_name == spec_name and p.k is not None}
    found: Found = {}
    for d in _at_mix(decisions, mix, sampling):
        key, k = (d.slice.prompt_class, d.slice.load_value), k_by_load.get(d.slice.load_value)
        if k is not None and k > 0 and d.slice.arm == arm_of.get(k):
            found[key] = (k, _decision_cell(d))
        elif k == 0 and d.slice.arm in arm_of.values() and not _measured(found.get(key)):
            found[key] = (0, _baseline_cell(d))  # any arm's comparison at the cell carries the baseline
    ks = ", ".join(f"{_load_label(mix, load)}: k={k}" for load, k in sorted(k_by_load.items()))
    shares = cell_token_shares(mix, output_tokens_per_request)
    return _verdict(f"{spec_name}-k-policy", f"{spec_name} k policy ({ks})", sampling, config, mix, shares, found)


def mix_verdicts(
    decisions: Sequence[Decision], policies: Sequence[KPolicyReport], config: SweepConfig,
    output_tokens_per_request: Mapping[str, float] | None = None,
) -> list[MixVerdict]:
    """Every speculative arm at every sampling mode, then each arm spec's all-classes k policy
    (concurrency mixes only: the policy is a k per concurrency bucket), at the config's effective mix."""
    mix = effective_mix(config)
    verdicts = [arm_mix_verdict(decisions, config, plan.arm, sampling.name, mix, output_tokens_per_request)
                for plan in arm_plans(config) if not plan.is_baseline for sampling in config.sampling]
    if mix.load_mode != "concurrency":
        return verdicts
    for report in policies:
        policy = report.specfleet
        if report.peer is None and policy.refused is None and policy.sampling is not None:
            k_by_load = {float(level.level): level.k for level in policy.levels}
            verdicts.append(policy_mix_verdict(decisions, config, policy.spec_name, k_by_load, policy.sampling,
                                               mix, output_tokens_per_request))
    return verdicts
