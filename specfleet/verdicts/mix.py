"""The verdict at the production traffic mix: the seed's entry gate ("Production gates": net
SLO-qualified cost per million accepted tokens lower than the baseline by more than the
measurement noise, at the production concurrency distribution, on at least three prompt classes).

Formulas, over the measured cells of the mix only (never filled in):

- Mix throughput per replica (seed: "Results template and calculator", per-replica SLO-qualified
  tokens per second): the token-share-weighted harmonic mean T = sum(f) / sum(f / T_cell), the
  replica-seconds per token averaged over the tokens the fleet serves, f a cell's token share,
  T_cell the geometric mean of the cell's runs.
- Whole replicas and cost per million: ``specfleet.economics.cost.hardware_fleet_cost`` at peak demand, for the
  baseline and the candidate; saving = 1 - candidate cost / baseline cost.
- Interval: the mix speedup T_candidate / T_baseline is a claim of the sweep's family
  (``specfleet.verdicts.rule``): a t interval on its log, whose variance (the gradient of the
  harmonic mean over every run) includes request-level spread and the run-to-run and
  server-to-server noise, corrected for every comparison of the sweep. Its ends, through whole
  replicas, are the pessimistic and optimistic savings.
- Entry gate, checked one by one: (a) the mix saving's corrected interval lies above the
  break-even (the speedup that saves a whole replica): beyond the noise; (b) every load with a
  positive share has a measured cell; (c) the measured cells carry at least
  ``analysis.min_coverage`` of the mix (default all of it); (d) at least three prompt classes (the
  seed's number; a config with fewer classes cannot pass, and says so) pass (a) on their own at
  the load shares, each covering the class as (c) requires.

A k policy serves each load with the k it chose there, k = 0 with the baseline's own cells (the
candidate is the baseline: a measured speedup of exactly 1). Its choice of k is made on the same
data, so every assignment of k to loads it could have chosen is a claim of the family: the
max-T correction covers the one it chose.

Each verdict is one of the rule's three: ``adopt`` (adoptable: the entry gate and the other gates
pass); ``reject`` (the SLO, a gate or an unusable candidate cell blocks it, its saving is shown not
to pay, a side has no qualified tokens, or too few classes can still pass (d)); else
``inconclusive``: the saving's corrected interval contains the break-even, cells of the mix are
not measured yet, or classes that (d) needs are themselves inconclusive.

A cell counts when both arms have SLO-qualified tokens there. One where the candidate had none is
measured: the mix cannot be served there, so no saving figure is formed. A candidate cell that is
not usable (its server died, too many errors, a saturated client) counts against the arm: the
verdict is not adoptable. The other tests a cell's decision runs (the SLO, the equivalence and
quality gates) are reported beside the entry gate as ``other_gates``.
"""

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import arm_plans, load_label
from specfleet.contract.models import HardwareSpec
from specfleet.contract.sweep import SweepConfig
from specfleet.economics.cost import break_even_speedup, hardware_fleet_cost
from specfleet.stats import bootstrap as bs
from specfleet.stats.runs import ConfigKey, add_weights
from specfleet.verdicts.cell import CellCase, Decision, ReasonCode
from specfleet.verdicts.detection import Detection, detection
from specfleet.verdicts.evidence import Evidence
from specfleet.verdicts.kpolicy import KPolicy, KPolicyReport, composed_policy_name
from specfleet.verdicts.rule import Claim, ClaimKind, ClaimResult, Verdict
from specfleet.verdicts.sequential import Carried
from specfleet.verdicts.traffic_mix import CellKey, TrafficMix, cell_token_shares, effective_mix

MIN_CLASSES = 3
"""The seed's entry gate: at least three prompt classes."""

CheckName = Literal["saving_beyond_noise", "production_load_distribution", "coverage", "prompt_classes",
                    "other_gates"]

BLOCKING: tuple[ReasonCode, ...] = ("slo_missed", "no_gate", "gate_failed", "gate_not_run", "quality_not_run",
                                    "candidate_not_usable")
"""Decision codes that reject a cell whatever its cost: the SLO, the gates, and a candidate cell
that could not be measured."""


class MixCell(RecordModel):
    """One (prompt class, load) cell of the mix with a positive share, and whether it counts."""

    prompt_class: str
    load_value: float
    token_share: float
    k: int | None = Field(description="The speculative k serving this cell; 0 where a k policy turns it off.")
    measured: bool
    reason: str | None = Field(description="Why the cell is left out; None when measured.")
    blocked_by: str | None = Field(
        None, description="The decision's reason code when the SLO, a gate or an unusable candidate cell rejected it.")


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
    pessimistic_saving_fraction: float | None = Field(description="Saving at the corrected interval's low end.")
    optimistic_saving_fraction: float | None = Field(description="Saving at the corrected interval's high end.")
    noise_floor: float | None = Field(description="The sweep's run-to-run noise (relative spread of one window).")
    reason: str | None = Field(description="Why a figure above is None; None when all are set.")
    speedup: bs.Interval | None = Field(
        None, description="Candidate / baseline mix throughput, this comparison alone (None for a k policy: chosen on "
        "the same data, only its corrected interval covers).")
    speedup_corrected: bs.Interval | None = Field(
        None, description="The same, corrected for every comparison of the sweep: what the verdict reads.")
    break_even_speedup: float | None = Field(None, description="The mix speedup that saves a whole replica.")
    adopted: bool = Field(False, description="The one rule: the corrected interval lies above the break-even.")
    verdict: Verdict = Field(
        "inconclusive", description="The rule on this saving alone: adopt (corrected interval above the "
        "break-even), reject (below it, or no saving can be formed though cells were measured), inconclusive.")
    detection: Detection | None = Field(
        None, description="The minimum detectable saving at 80 % power and, when inconclusive, what would decide "
        "it (None without an interval).")

    @model_validator(mode="before")
    @classmethod
    def _two_verdict_summary(cls, data: object) -> object:
        """A summary written with two verdicts: the third read from its corrected interval (no saving
        figure over measured cells rejects, as ``MixClaims._figures`` does)."""
        if not isinstance(data, dict) or "verdict" in data:
            return data
        interval, be = data.get("speedup_corrected"), data.get("break_even_speedup")
        high = interval.get("high") if isinstance(interval, dict) else None
        shown = (high is not None and be is not None and high < be) or (
            data.get("saving_fraction") is None and (data.get("covered_share") or 0.0) > 0.0)
        return {**data, "verdict": "adopt" if data.get("adopted") else "reject" if shown else "inconclusive"}

    @property
    def beyond_noise(self) -> bool:
        """The seed's test, as the one rule decides it (``specfleet.verdicts.rule``)."""
        return self.adopted


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
    checks: list[GateCheck] = Field(description="The entry gate's conditions, in the seed's order.")
    other_gates: GateCheck = Field(description="The SLO, equivalence and quality gates over the measured cells.")
    comparisons: int | None = Field(None, description="Comparisons of the sweep the verdict was corrected for.")
    min_coverage: float = Field(1.0, description="The share of the mix a verdict must cover to be adoptable.")
    serving_warning: str | None = Field(
        None, description="Its cells' serving warnings (``Decision.serving_warning``): a failed gate of sampled "
        "decoding that greedy-only traffic leaves out of the verdict, shown on its headline.")
    carried: Carried | None = Field(
        None, description="With analysis.nights: the earlier look that decided this verdict, which it keeps "
        "(None: decided, or left inconclusive, by this sweep).")
    verdict: Verdict = Field(
        "inconclusive", description="adopt, reject or inconclusive (the module's rule), always derived from the "
        "figures and checks above, or the verdict carried from an earlier look.")

    @model_validator(mode="after")
    def _derive_verdict(self) -> "MixVerdict":
        object.__setattr__(self, "verdict", self._three_way())
        return self

    def _three_way(self) -> Verdict:
        if self.carried is not None:
            return self.carried.verdict
        if self.adoptable:
            return "adopt"
        if not any(c.measured for c in self.cells):
            return "inconclusive"
        if not self.other_gates.passed or self.fleet.verdict == "reject":
            return "reject"
        if not self.name.endswith("-k-policy"):
            open_classes = [f for f in self.per_class.values()
                            if f.verdict != "reject" and (f.covered_share >= self.min_coverage or self.partial)]
            if len(open_classes) < MIN_CLASSES:
                return "reject"
        return "inconclusive"

    @property
    def coverage(self) -> float:
        return self.fleet.covered_share

    @property
    def partial(self) -> bool:
        return self.coverage < 1.0

    @property
    def passed(self) -> bool:
        """The entry gate: all its conditions."""
        return all(c.passed for c in self.checks)

    @property
    def adoptable(self) -> bool:
        """The entry gate and the other gates pass; a verdict short of ``min_coverage`` never is. A verdict
        an earlier look decided (``carried``) is adoptable when it was adopted there."""
        if self.carried is not None:
            return self.carried.verdict == "adopt"
        return self.passed and self.other_gates.passed and self.coverage >= self.min_coverage

    @property
    def headline(self) -> str:
        """First line: partial coverage first, then the verdict and its figures, then a default mix."""
        partial = f"PARTIAL (covers {self.coverage:.1%} of the mix): " if self.partial else ""
        failed = [c.name for c in self.checks if not c.passed]
        verdict = "entry gate passed" if not failed else f"entry gate FAILED ({', '.join(failed)})"
        if not self.other_gates.passed:
            verdict += ", other gates FAILED: not adoptable" if not failed else ", other gates FAILED"
        default = " (default mix: no traffic block)" if self.mix.default else ""
        figures = _figures_line(self.fleet, self.comparisons)
        warning = f"; {self.serving_warning}" if self.serving_warning else ""
        carried = f" ({self.carried.text})" if self.carried is not None else ""
        return (f"{partial}{self.subject} / {self.sampling}: {self.verdict.upper()}{carried}, {verdict}: {figures}"
                f"{default}{warning}")


def _figures_line(f: MixFigures, comparisons: int | None) -> str:
    if f.saving_fraction is None:
        return f"no saving figure ({f.reason})"
    low, high = f.pessimistic_saving_fraction, f.optimistic_saving_fraction
    interval = f"[{low:+.1%}, {high:+.1%}]" if low is not None and high is not None else "(no interval)"
    corrected = f" (corrected for {comparisons} comparisons)" if comparisons and low is not None else ""
    noise = f"{f.noise_floor:.1%}" if f.noise_floor is not None else "unknown"
    return (f"saving {f.saving_fraction:+.1%} {interval}{corrected} vs noise {noise}, "
            f"{f.baseline_replicas} -> {f.candidate_replicas} replicas")


def _load_label(mix: TrafficMix, load: float) -> str:
    return load_label(mix.load_mode, load)


# --- the cells a subject is measured at ----------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    """Where a cell of the mix gets its candidate: an arm's runs, or the baseline's (k = 0)."""

    arm: str
    config: ConfigKey
    k: int


@dataclass(frozen=True)
class _Missing:
    """A cell of the mix without figures: why, and the arm whose cell it would have been."""

    reason: str
    arm: str | None = None


NOT_MEASURED = _Missing("not measured")
Found = dict[CellKey, tuple[int | None, _Source | _Missing]]
"""Per cell of the mix: the k serving it and where its figures come from, or why it has none."""
Inside = Callable[[CellKey], bool]


@dataclass
class _Selection:
    """One subject (an arm, or a k assignment of a spec) at the mix: its cells and claim keys."""

    name: str
    subject: str
    sampling: str
    found: Found
    fleet_key: str | None = None
    class_keys: dict[str, str | None] = field(default_factory=dict)


@dataclass
class MixClaims:
    """The claims the verdicts at the traffic mix rest on, added to the sweep's family before it
    is decided; ``verdicts`` reads the decided family."""

    config: SweepConfig
    mix: TrafficMix
    shares: dict[CellKey, float]
    evidence: Evidence
    arms: list[_Selection] = field(default_factory=list)
    policies: dict[tuple[str, str, tuple[tuple[float, int], ...]], _Selection] = field(default_factory=dict)
    figures: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Claim key -> (covered share, baseline mix tokens/s, candidate mix tokens/s)."""

    @classmethod
    def add_to(cls, evidence: Evidence, cases: Sequence[CellCase], config: SweepConfig,
               output_tokens_per_request: Mapping[str, float] | None = None) -> "MixClaims":
        """Every arm at every sampling mode, and (concurrency mixes) every assignment of a spec's
        k values (or 0) to the mix's loads: the candidates a k policy chooses among."""
        mix = effective_mix(config)
        claims = cls(config, mix, cell_token_shares(mix, output_tokens_per_request), evidence)
        by_arm = {(c.where.arm, c.where.sampling, c.where.prompt_class, c.where.load_value): c for c in cases
                  if c.where.load_mode == mix.load_mode}
        plans = [p for p in arm_plans(config) if not p.is_baseline]
        for plan in plans:
            for sampling in (s.name for s in config.sampling):
                if plan.policy_of is not None and sampling != config.policy_sampling:
                    continue  # a measured policy runs at its own sampling only
                found: Found = {key: (plan.k, _arm_source(by_arm.get((plan.arm, sampling, *key)), plan.arm))
                                for key in claims.shares}
                claims.arms.append(claims._add(plan.arm, plan.arm, sampling, found))
        if mix.load_mode != "concurrency":
            return claims
        loads = sorted(load for load, q in mix.load_shares.items() if q > 0)
        for spec in sorted({p.spec_name for p in plans if not p.adaptive}):
            arm_of = {p.k: p.arm for p in plans if p.spec_name == spec and p.k is not None}
            for sampling in (s.name for s in config.sampling):
                for ks in itertools.product([0, *sorted(arm_of)], repeat=len(loads)):
                    if not any(ks):
                        continue
                    k_by_load = dict(zip(loads, ks, strict=True))
                    found = {key: (k_by_load[key[1]], _policy_source(by_arm, evidence, arm_of, k_by_load[key[1]],
                                                                     sampling, key))
                             for key in claims.shares if key[1] in k_by_load}
                    assignment = tuple(sorted(k_by_load.items()))
                    name = f"{spec}-k-policy"
                    claims.policies[(spec, sampling, assignment)] = claims._add(
                        name, f"{spec} k policy ({_ks(mix, k_by_load)})", sampling, found)
        return claims

    def _add(self, name: str, subject: str, sampling: str, found: Found) -> _Selection:
        """The subject's fleet claim, and an arm's per-class claims, added to the family where they can
        be formed. A composed k policy makes no per-class claims: with every assignment of k a
        candidate they would be thousands of comparisons (measure the policy as an arm to have them)."""
        selection = _Selection(name, subject, sampling, found)
        policy = name.endswith("-k-policy")
        prefix = (f"policy:{subject}" if policy else f"mix:{name}") + f"/{sampling}"
        selection.fleet_key = self._claim(prefix, "policy" if policy else "mix", found, lambda key: True)
        for pc in sorted({key[0] for key, share in self.shares.items() if share > 0}):
            selection.class_keys[pc] = None if policy else self._claim(f"{prefix}/class:{pc}", "class", found,
                                                                      _in_class(pc))
        return selection

    def _claim(self, key: str, kind: ClaimKind, found: Found, inside: Inside) -> str | None:
        """The harmonic-mean speedup over the measured cells of ``found`` inside the selection."""
        parts = [(share, src) for cell, share in self.shares.items() if share > 0 and inside(cell)
                 and isinstance(src := found.get(cell, (None, NOT_MEASURED))[1], _Source)]
        total = sum(share for cell, share in self.shares.items() if share > 0 and inside(cell))
        tps = self.evidence.tps
        base_arm = self.evidence.baseline_arm
        if not parts or any(not tps.has(src.arm, src.config) or not tps.has(base_arm, src.config)
                            for _, src in parts):
            return None
        base = np.array([math.exp(tps.log_mean(base_arm, src.config)) for _, src in parts])
        cand = np.array([math.exp(tps.log_mean(src.arm, src.config)) for _, src in parts])
        f = np.array([share for share, _ in parts])
        base_mix, cand_mix = f.sum() / np.sum(f / base), f.sum() / np.sum(f / cand)
        h_cand, h_base = (f / cand) / np.sum(f / cand), (f / base) / np.sum(f / base)
        sources = [src for _, src in parts]
        weights = add_weights(
            *(tps.weights(src.arm, src.config, hc) for src, hc in zip(sources, h_cand, strict=True)),
            *(tps.weights(base_arm, src.config, -hb) for src, hb in zip(sources, h_base, strict=True)))
        demand = self.config.hardware.peak_demand_tokens_per_s
        self.evidence.family.add(Claim(key=key, kind=kind, log_estimate=float(np.log(cand_mix / base_mix)),
                                       weights=weights, break_even=break_even_speedup(demand, float(base_mix))))
        self.figures[key] = (float(f.sum() / total), float(base_mix), float(cand_mix))
        return key

    # --- after the family is decided -----------------------------------------------------------

    def verdicts(self, results: Mapping[str, ClaimResult], decisions: Sequence[Decision],
                 policies: Sequence[KPolicyReport], measured: Sequence[KPolicy] = ()) -> list[MixVerdict]:
        """Every arm at every sampling mode, then each arm spec's chosen all-classes k policy, then
        the policies of another rule the sweep measured as arms (``measured``), composed the same way."""
        blocked = {(d.slice.arm, d.slice.sampling, d.slice.prompt_class, d.slice.load_value): d.reason_code
                   for d in decisions if d.reason_code in BLOCKING}
        warned = {(d.slice.arm, d.slice.sampling, d.slice.prompt_class, d.slice.load_value): d.serving_warning
                  for d in decisions if d.serving_warning}
        out = [self._verdict(s, results, blocked, warned) for s in self.arms]
        chosen_policies = [r.specfleet for r in policies if r.peer is None]
        for policy in [*chosen_policies, *(p for p in measured if p.rule != "specfleet")]:
            if policy.refused is not None or policy.sampling is None:
                continue
            k_by_load = {float(level.level): level.k for level in policy.levels if float(level.level) in
                         self.mix.load_shares and self.mix.load_shares[float(level.level)] > 0}
            chosen = self.policies.get((policy.spec_name, policy.sampling, tuple(sorted(k_by_load.items()))))
            name = composed_policy_name(policy.spec_name, policy.rule)
            subject = f"{policy.spec_name} k policy" + ("" if policy.rule == "specfleet" else f", {policy.rule} rule")
            if chosen is None:  # k = 0 everywhere: the baseline itself, its cells measured, no claim to make
                found: Found = {key: (0, _policy_source({}, self.evidence, {}, 0, policy.sampling, key))
                                for key in self.shares if key[1] in k_by_load}
                chosen = _Selection(name, f"{subject} ({_ks(self.mix, k_by_load)})", policy.sampling, found)
            elif chosen.name != name:
                chosen = replace(chosen, name=name, subject=f"{subject} ({_ks(self.mix, k_by_load)})")
            out.append(self._verdict(chosen, results, blocked, warned))
        return out

    def _verdict(self, s: _Selection, results: Mapping[str, ClaimResult],
                 blocked: Mapping[tuple[str, str, str, float], ReasonCode],
                 warned: Mapping[tuple[str, str, str, float], str]) -> MixVerdict:
        cells, warnings = [], []
        for key, share in self.shares.items():
            if share <= 0:
                continue
            k, got = s.found.get(key, (None, NOT_MEASURED))
            arm = got.arm if (isinstance(got, _Source) and got.k > 0) or isinstance(got, _Missing) else None
            cells.append(MixCell(prompt_class=key[0], load_value=key[1], token_share=share, k=k,
                                 measured=isinstance(got, _Source),
                                 reason=got.reason if isinstance(got, _Missing) else None,
                                 blocked_by=blocked.get((arm, s.sampling, key[0], key[1])) if arm else None))
            warnings.append(warned.get((arm, s.sampling, key[0], key[1])) if arm else None)
        classes = sorted({key[0] for key, share in self.shares.items() if share > 0})
        selected = s.name.endswith("-k-policy")
        fleet = self._figures(s.fleet_key, results, cells, lambda key: True, selected)
        per_class = {pc: self._figures(s.class_keys.get(pc), results, cells, _in_class(pc), selected) for pc in classes}
        comparisons = next((results[k].comparisons for k in (s.fleet_key, *s.class_keys.values())
                            if k is not None and k in results), None)
        classes_check = (_check_classes(per_class, self.config.analysis.min_coverage) if not selected else GateCheck(
            name="prompt_classes", passed=False, detail="a composed k policy makes no per-class claims (its k per load "
            "is chosen on the same data among every assignment); measure the policy as an arm to test its classes"))
        return MixVerdict(
            name=s.name, subject=s.subject, sampling=s.sampling, mix=self.mix, cells=cells, fleet=fleet,
            per_class=per_class,
            checks=[_check_saving(fleet, comparisons), _check_loads(self.mix, cells),
                    _check_coverage(fleet, self.config.analysis.min_coverage), classes_check],
            other_gates=_check_other_gates(cells), comparisons=comparisons,
            min_coverage=self.config.analysis.min_coverage,
            serving_warning="; ".join(dict.fromkeys(w for w in warnings if w)) or None)

    def _figures(self, key: str | None, results: Mapping[str, ClaimResult], cells: Sequence[MixCell],
                 inside: Inside, selected: bool = False) -> MixFigures:
        """Whole-replica figures of a claim, or why there are none. A claim chosen on the same data (a k
        policy's, fleet or class) shows its corrected interval only: its marginal one would not cover."""
        hardware = self.config.hardware
        chosen = [c for c in cells if inside((c.prompt_class, c.load_value))]
        total = sum(c.token_share for c in chosen)
        covered = sum(c.token_share for c in chosen if c.measured) / total if total else 0.0
        noise = self.evidence.noise["qualified_tokens_per_s"].relative_sd
        result = results.get(key) if key is not None else None
        if result is None:
            measured = any(c.measured for c in chosen)
            return MixFigures(covered_share=covered, baseline_tokens_per_s_per_replica=None,
                              candidate_tokens_per_s_per_replica=None, baseline_replicas=None, candidate_replicas=None,
                              baseline_cost_per_million_usd=None, candidate_cost_per_million_usd=None,
                              saving_fraction=None, pessimistic_saving_fraction=None, optimistic_saving_fraction=None,
                              noise_floor=noise, reason=_why_missing(chosen),
                              verdict="reject" if measured and not _baseline_itself(chosen) else "inconclusive")
        _, base_tps, cand_tps = self.figures[result.claim.key]
        base, cand = _replicas_cost(hardware, base_tps), _replicas_cost(hardware, cand_tps)
        corrected = result.corrected
        why = None if self.evidence.noise["qualified_tokens_per_s"].estimated else result.why_not
        return MixFigures(
            covered_share=covered, baseline_tokens_per_s_per_replica=base_tps,
            candidate_tokens_per_s_per_replica=cand_tps, baseline_replicas=base[0], candidate_replicas=cand[0],
            baseline_cost_per_million_usd=base[1], candidate_cost_per_million_usd=cand[1],
            saving_fraction=1.0 - cand[1] / base[1],
            pessimistic_saving_fraction=_saving(hardware, base_tps, base[1], corrected.low),
            optimistic_saving_fraction=_saving(hardware, base_tps, base[1], corrected.high),
            noise_floor=noise, reason=why, speedup=None if selected else result.marginal,
            speedup_corrected=corrected,
            break_even_speedup=result.claim.break_even if math.isfinite(result.claim.break_even) else None,
            adopted=result.adopted, verdict=result.verdict,
            detection=detection(result, lambda speedup: _saving(hardware, base_tps, base[1], speedup)))


def _in_class(prompt_class: str) -> Inside:
    return lambda key: key[0] == prompt_class


def _arm_source(case: CellCase | None, arm: str) -> _Source | _Missing:
    """The arm's own cell there, or why it has none."""
    if case is None:
        return _Missing("not measured", arm)
    if case.comparison is None:
        assert case.unusable is not None
        side, cells = case.unusable
        why = "; ".join(r for c in cells for r in c.reasons)
        return _Missing(f"unusable: no usable {side} cell" + (f": {why}" if why else ""), arm)
    return _Source(case.where.arm, case.where.config, case.where.k)


def _policy_source(by_arm: Mapping[tuple[str, str, str, float], CellCase], evidence: Evidence,
                   arm_of: Mapping[int, str], k: int, sampling: str, key: CellKey) -> _Source | _Missing:
    """k > 0: the arm of that k; k = 0: the baseline's own cells there (measured when they are usable)."""
    if k > 0:
        return _arm_source(by_arm.get((arm_of[k], sampling, *key)), arm_of[k])
    config: ConfigKey = (key[0], "concurrency", key[1], sampling)
    if evidence.tps.has(evidence.baseline_arm, config):
        return _Source(evidence.baseline_arm, config, 0)
    return _Missing("unusable: no usable baseline cell (k = 0 serves it with the baseline)")


def _ks(mix: TrafficMix, k_by_load: Mapping[float, int]) -> str:
    return ", ".join(f"{_load_label(mix, load)}: k={k}" for load, k in sorted(k_by_load.items()))


def _replicas_cost(hardware: HardwareSpec, tokens_per_s: float) -> tuple[int, float]:
    cost = hardware_fleet_cost(hardware, tokens_per_s)
    return cost.replicas, cost.cost_per_million_usd


def _saving(hardware: HardwareSpec, base_tps: float, base_cost_usd: float, speedup: float | None) -> float | None:
    if speedup is None or not speedup > 0:
        return None
    return 1.0 - _replicas_cost(hardware, base_tps * speedup)[1] / base_cost_usd


def _baseline_itself(cells: Sequence[MixCell]) -> bool:
    """A k policy with k = 0 at every load: the rule adopted no k anywhere, which is not a k shown not to
    pay (its levels say which k are still undecided), so it is no negative result."""
    return bool(cells) and all(c.k == 0 for c in cells)


def _why_missing(cells: Sequence[MixCell]) -> str:
    """Why a selection with measured cells has no claim: a side without qualified tokens somewhere,
    or a k policy that turns speculation off at every load."""
    if not any(c.measured for c in cells):
        return "no measured cell"
    if _baseline_itself(cells):
        return "k = 0 at every load: the policy is the baseline itself, nothing to adopt"
    return "the speculative arm or the baseline has no SLO-qualified tokens in a measured cell of the mix"


def _check_saving(fleet: MixFigures, comparisons: int | None) -> GateCheck:
    interval = fleet.speedup_corrected
    if interval is None or fleet.pessimistic_saving_fraction is None:
        return GateCheck(name="saving_beyond_noise", passed=False, detail=f"no figure: {fleet.reason}")
    if interval.confidence is None:
        return GateCheck(name="saving_beyond_noise", passed=False, detail=f"no noise estimate: {fleet.reason}")
    sign = ">" if fleet.adopted else "<="
    be = ("none (one replica)" if fleet.break_even_speedup is None
          else bs.speedup_text(fleet.break_even_speedup, digits=3))
    return GateCheck(name="saving_beyond_noise", passed=fleet.adopted, detail=(
        f"corrected speedup {bs.speedup_text(interval.estimate, interval.low, interval.high, digits=3)} low end {sign} "
        f"break-even {be} (saving at the low end {fleet.pessimistic_saving_fraction:+.1%}; {interval.uncertainty})"))


def _check_loads(mix: TrafficMix, cells: Sequence[MixCell]) -> GateCheck:
    """Every load with a positive share has at least one measured cell."""
    covered = {c.load_value for c in cells if c.measured}
    missing = [_load_label(mix, load) for load, q in mix.load_shares.items() if q > 0 and load not in covered]
    detail = f"no measured cell at {', '.join(missing)}" if missing else "a measured cell at every load"
    return GateCheck(name="production_load_distribution", passed=not missing, detail=detail)


def _check_coverage(fleet: MixFigures, min_coverage: float) -> GateCheck:
    passed = fleet.covered_share >= min_coverage
    return GateCheck(name="coverage", passed=passed, detail=(
        f"measured cells carry {fleet.covered_share:.1%} of the mix, "
        f"{'at least' if passed else 'under'} analysis.min_coverage {min_coverage:.0%}"))


def _check_classes(per_class: Mapping[str, MixFigures], min_coverage: float) -> GateCheck:
    """At least three classes (the seed's gate) save beyond the noise on their own, each covered."""
    beyond = [name for name, f in per_class.items() if f.adopted and f.covered_share >= min_coverage]
    fewer = (f"; the config has {len(per_class)} prompt classes in its mix, fewer than the seed's {MIN_CLASSES}"
             if len(per_class) < MIN_CLASSES else "")
    return GateCheck(name="prompt_classes", passed=len(beyond) >= MIN_CLASSES,
                     detail=f"{len(beyond)} of {len(per_class)} classes beyond noise ({', '.join(beyond) or 'none'}), "
                     f"{MIN_CLASSES} required{fewer}")


def _check_other_gates(cells: Sequence[MixCell]) -> GateCheck:
    """No cell of the mix was rejected by the SLO or a gate, and no candidate cell was unusable."""
    measured = [c for c in cells if c.measured]
    if not measured:
        return GateCheck(name="other_gates", passed=False, detail="no measured cell")
    blocked = [c for c in cells if c.blocked_by]
    codes = sorted({c.blocked_by for c in blocked if c.blocked_by})
    detail = (f"{len(blocked)} of {len(cells)} cells rejected by {', '.join(codes)}" if blocked
              else f"SLO and gates pass at all {len(measured)} measured cells")
    return GateCheck(name="other_gates", passed=not blocked, detail=detail)
