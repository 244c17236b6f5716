"""Speculative arm vs baseline, cell by cell: speedup with intervals, whole-replica cost, verdict.

Seed, "Production gates": adopt only where SLO-qualified cost per million accepted tokens
falls by more than the measurement noise, the SLO holds and the equivalence gates pass.
Negative cells are published with the same detail as positive ones.

Each cell's speedup is a claim of the sweep's family (``specfleet.verdicts.rule``): its interval
includes the runs' request-level spread and the sweep's run-to-run noise, and the rule's three
verdicts decide it: adopt, reject (shown not to pay) or inconclusive. A reason outside statistics
(no qualified tokens, the SLO missed, a gate failed or not run, an unusable cell) rejects the cell
with its own code, whatever the interval. The baseline at a configuration is every usable baseline
run there: the opening cells, their repeats and replica checks, and the closing cells.
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from specfleet.contract.base import RecordModel
from specfleet.contract.models import HardwareSpec
from specfleet.contract.sweep import SweepConfig
from specfleet.contract.workload import SLOSpec
from specfleet.economics.cost import FleetCost, break_even_speedup, hardware_fleet_cost
from specfleet.errors import InputError
from specfleet.gates.quality import SliceKey
from specfleet.measure.acceptance import pooled_tokens_per_step
from specfleet.results.cell import CellResult
from specfleet.results.records import pooled_acceptance_length
from specfleet.stats import bootstrap as bs
from specfleet.stats.quality import GateResult, quality_not_run
from specfleet.stats.runs import ConfigKey, config_key
from specfleet.stats.samples import CellSample
from specfleet.verdicts.detection import Detection, detection
from specfleet.verdicts.evidence import Evidence
from specfleet.verdicts.rule import Claim, ClaimResult, Verdict
from specfleet.verdicts.sampling_scope import scoped_gates
from specfleet.verdicts.sequential import Carried

ReasonCode = Literal[
    "adopt", "baseline_unqualified", "candidate_not_usable", "baseline_not_usable", "no_qualified_tokens",
    "slo_missed", "no_gate", "gate_failed", "gate_not_run", "no_noise_estimate", "cost_not_lower", "within_noise",
    "not_after_correction", "interval_not_lower", "quality_not_run", "shown_not_to_pay",
]
"""Why a cell was not adopted (or ``adopt``). Inconclusive: ``no_noise_estimate``, ``within_noise``
(the cell's own interval reaches the break-even) and ``not_after_correction`` (its own interval does
not, the one corrected for the family does). Rejected as shown not to pay: ``shown_not_to_pay``
(the corrected interval lies below the break-even) and ``cost_not_lower`` (no speedup saves a whole
replica at this load). Every other code rejects for a reason outside statistics.
``interval_not_lower`` is only read from summaries written before the one rule."""

INCONCLUSIVE: tuple[ReasonCode, ...] = ("no_noise_estimate", "within_noise", "not_after_correction")
"""The reason codes of an inconclusive cell: the sweep could not tell."""


class Slice(RecordModel):
    """One speculative arm at one matched configuration."""

    arm: str
    method: str
    k: int
    prompt_class: str
    load_mode: str
    load_value: float
    sampling: str

    @property
    def config(self) -> ConfigKey:
        return (self.prompt_class, self.load_mode, self.load_value, self.sampling)


class Comparison(RecordModel):
    basis: bs.Basis
    baseline_runs: int
    candidate_runs: int
    baseline_qualified_tokens_per_s: float = Field(description="Geometric mean over the baseline's runs.")
    candidate_qualified_tokens_per_s: float
    qualified_tps_speedup: bs.Interval | None = Field(
        description="Candidate / baseline, this comparison alone; None if either side had no qualified tokens.")
    qualified_tps_speedup_corrected: bs.Interval | None = Field(
        None, description="The same, corrected for every comparison of the sweep (what the verdict reads); "
        "None in summaries written before the one rule.")
    itl_statistic: str
    slo_percentile: float
    baseline_itl_ms: float | None
    candidate_itl_ms: float | None
    itl_speedup: bs.Interval | None = Field(description="Baseline ITL / candidate ITL at the SLO percentile.")
    candidate_ttft_ms: float | None
    baseline_slo_holds: bool
    candidate_slo_holds: bool
    acceptance_rate: float | None = Field(description="Telemetry r = accepted / proposed. Not alpha.")
    mean_acceptance_length: float | None = Field(
        description="1 + accepted / drafts from the counters, bonus token included: the length conditional on "
        "drafting (steps that proposed nothing are not in it).")
    tokens_per_step: float | None = Field(
        None, description="Tokens per engine step over all steps, drafting or not (the client's estimate, pooled "
        "over the candidate's cells): what speedup follows. None in summaries written before it existed.")
    engine_version: str | None


class CostFigures(RecordModel):
    baseline_replicas: int | None
    candidate_replicas: int
    baseline_cost_per_million_usd: float | None
    candidate_cost_per_million_usd: float
    baseline_ideal_cost_per_million_usd: float | None
    candidate_ideal_cost_per_million_usd: float
    saving_fraction: float | None = Field(description="1 - candidate / baseline whole-replica cost.")
    pessimistic_saving_fraction: float | None = Field(
        description="Saving at the low end of the corrected speedup interval: what the verdict reads.")
    optimistic_saving_fraction: float | None = Field(
        None, description="Saving at the corrected interval's high end (None in summaries written before it existed).")
    break_even_speedup: float | None = Field(
        None, description="The speedup that saves a whole replica at the baseline's throughput (None: "
        "none can, or a summary written before it existed).")
    noise_floor: float | None = Field(description="The sweep's run-to-run noise (relative spread of one window).")
    noise_source: str


class Decision(RecordModel):
    slice: Slice
    verdict: Verdict = Field(description="adopt; reject (shown not to pay, or a reason outside statistics: see "
                             "reason_code); inconclusive (the corrected interval contains the break-even, or no "
                             "noise estimate).")
    reason_code: ReasonCode
    reason: str
    comparison: Comparison | None
    cost: CostFigures | None
    gates: list[GateResult]
    comparisons: int | None = Field(
        None, description="Comparisons of the sweep the verdict was corrected for (None: no comparison, or a "
        "summary written before the one rule).")
    detection: Detection | None = Field(
        None, description="The cell's minimum detectable saving at 80 % power and, when inconclusive, what would "
        "decide it (None: no interval, no finite break-even, or a summary written before it existed).")
    serving_warning: str | None = Field(
        None, description="A gate of sampled decoding that failed on this arm and was left out of this greedy "
        "verdict, since the traffic declares greedy requests only (specfleet.verdicts.sampling_scope).")
    carried: Carried | None = Field(
        None, description="With analysis.nights: the earlier look that decided this cell, whose verdict it keeps "
        "(None: decided, or left inconclusive, by this sweep).")

    @model_validator(mode="before")
    @classmethod
    def _two_verdict_summary(cls, data: object) -> object:
        """A summary written with two verdicts rejected what its sweep could not tell: read as inconclusive."""
        if isinstance(data, dict) and data.get("verdict") == "reject" and data.get("reason_code") in INCONCLUSIVE:
            return {**data, "verdict": "inconclusive"}
        return data

    @property
    def interval(self) -> bs.Interval | None:
        return self.comparison.qualified_tps_speedup if self.comparison else None

    @property
    def beyond_noise(self) -> bool:
        """The one rule's statistical answer (gates aside): the corrected interval's low end saves a
        whole replica, on an interval that includes run-to-run noise."""
        corrected = self.comparison.qualified_tps_speedup_corrected if self.comparison else None
        return (corrected is not None and corrected.confidence is not None and corrected.low is not None
                and self.cost is not None and self.cost.pessimistic_saving_fraction is not None
                and self.cost.pessimistic_saving_fraction > 0)


@dataclass(frozen=True)
class CellCase:
    """One (arm, configuration) before the family is decided: its comparison and its claim in the
    family, or the cells that left it without one."""

    where: Slice
    gates: list[GateResult]
    comparison: Comparison | None
    claim: Claim | None
    unusable: tuple[Literal["candidate", "baseline"], list[CellResult]] | None = None
    serving_warning: str | None = None


def _percentile(values: np.ndarray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else None


def slo_holds(samples: Sequence[CellSample], slo: SLOSpec) -> tuple[bool, float | None, float | None]:
    ttft = _percentile(np.concatenate([s.ttft_ms for s in samples]), slo.percentile)
    itl = _percentile(np.concatenate([s.pooled_itl_ms() for s in samples]), slo.percentile)
    holds = ttft is not None and ttft <= slo.ttft_ms and (itl is None or itl <= slo.itl_ms)
    return holds, ttft, itl


def _acceptance(cells: Sequence[CellResult]) -> tuple[float | None, float | None]:
    stats = [c.spec_decode for c in cells if c.spec_decode is not None]
    drafts = sum(s.num_drafts for s in stats)
    proposed = sum(s.num_draft_tokens for s in stats)
    accepted = sum(s.num_accepted_tokens for s in stats)
    return (accepted / proposed if proposed else None, pooled_acceptance_length(accepted, drafts))


def _figure(evidence: Evidence, metric: str, arm: str, config: ConfigKey) -> float | None:
    table = evidence.tps if metric == "tps" else evidence.itl
    return float(np.exp(table.log_mean(arm, config))) if table.has(arm, config) else None


def claim_key(where: Slice) -> str:
    """The cell's claim in the family (its ITL speedup's is ``itl:`` before it)."""
    return f"cell:{where.arm}/{where.prompt_class}/{where.load_mode}{where.load_value:g}/{where.sampling}"


def compare(evidence: Evidence, where: Slice, baseline: Sequence[CellSample], candidate: Sequence[CellSample],
            slo: SLOSpec, hardware: HardwareSpec) -> tuple[Comparison, Claim | None]:
    """The cell's figures and its claim in the family (None when a side has no qualified tokens;
    the ITL speedup is shown, never decided on)."""
    arm, config = where.arm, where.config
    base_tps = _figure(evidence, "tps", evidence.baseline_arm, config) or 0.0
    cand_tps = _figure(evidence, "tps", arm, config) or 0.0
    base_ok, _, _ = slo_holds(baseline, slo)
    cand_ok, cand_ttft, _ = slo_holds(candidate, slo)
    break_even = break_even_speedup(hardware.peak_demand_tokens_per_s, base_tps) if base_tps > 0 else np.inf
    key = claim_key(where)
    claim = evidence.speedup_claim(key, "cell", arm, config, "qualified_tokens_per_s", break_even)
    itl_claim = evidence.speedup_claim(f"itl:{key}", "cell", arm, config, "itl")
    if itl_claim is not None:
        evidence.shown.add(itl_claim)
    rate, length = _acceptance([s.cell for s in candidate])
    noise = evidence.noise["qualified_tokens_per_s"]
    comparison = Comparison(
        basis="runs" if noise.estimated else "requests",
        baseline_runs=evidence.tps.count(evidence.baseline_arm, config), candidate_runs=evidence.tps.count(arm, config),
        baseline_qualified_tokens_per_s=base_tps, candidate_qualified_tokens_per_s=cand_tps,
        qualified_tps_speedup=None, itl_statistic=slo.itl_statistic, slo_percentile=slo.percentile,
        baseline_itl_ms=_figure(evidence, "itl", evidence.baseline_arm, config),
        candidate_itl_ms=_figure(evidence, "itl", arm, config),
        itl_speedup=None,
        candidate_ttft_ms=cand_ttft, baseline_slo_holds=base_ok, candidate_slo_holds=cand_ok,
        acceptance_rate=rate, mean_acceptance_length=length,
        tokens_per_step=pooled_tokens_per_step([s.cell for s in candidate]),
        engine_version=candidate[0].cell.engine_version,
    )
    return comparison, claim


def _cost(hardware: HardwareSpec, tokens_per_s: float) -> FleetCost:
    return hardware_fleet_cost(hardware, tokens_per_s)


def saving_at(hardware: HardwareSpec, base_tps: float, speedup: float | None) -> float | None:
    """Whole-replica saving were the candidate exactly ``speedup`` times the baseline (an interval end)."""
    if speedup is None or not speedup > 0 or not base_tps > 0:
        return None
    base = _cost(hardware, base_tps).cost_per_million_usd
    return 1.0 - _cost(hardware, base_tps * speedup).cost_per_million_usd / base


def _cost_figures(c: Comparison, hardware: HardwareSpec, evidence: Evidence) -> CostFigures:
    cand = _cost(hardware, c.candidate_qualified_tokens_per_s)
    base_tps = c.baseline_qualified_tokens_per_s
    base = _cost(hardware, base_tps) if base_tps > 0 else None
    corrected = c.qualified_tps_speedup_corrected
    noise = evidence.noise["qualified_tokens_per_s"]
    break_even = break_even_speedup(hardware.peak_demand_tokens_per_s, base_tps) if base is not None else None
    return CostFigures(
        baseline_replicas=base.replicas if base else None, candidate_replicas=cand.replicas,
        baseline_cost_per_million_usd=base.cost_per_million_usd if base else None,
        candidate_cost_per_million_usd=cand.cost_per_million_usd,
        baseline_ideal_cost_per_million_usd=base.ideal_cost_per_million_usd if base else None,
        candidate_ideal_cost_per_million_usd=cand.ideal_cost_per_million_usd,
        saving_fraction=None if base is None else 1.0 - cand.cost_per_million_usd / base.cost_per_million_usd,
        pessimistic_saving_fraction=saving_at(hardware, base_tps, corrected.low if corrected else None),
        optimistic_saving_fraction=saving_at(hardware, base_tps, corrected.high if corrected else None),
        break_even_speedup=None if break_even is None or not np.isfinite(break_even) else break_even,
        noise_floor=noise.relative_sd, noise_source=noise.source,
    )


BEFORE_QUALITY: tuple[ReasonCode, ...] = ("no_qualified_tokens", "slo_missed", "no_gate", "gate_failed",
                                          "gate_not_run")
"""Rejections that stand whether or not the quality gate ran."""


def cell_cases(cells: Sequence[CellResult], samples: Mapping[str, CellSample], config: SweepConfig,
               evidence: Evidence, gates: Mapping[str, Sequence[GateResult]],
               quality: Mapping[SliceKey, GateResult]) -> list[CellCase]:
    """Every speculative (arm, configuration) against every usable baseline run there, its claim
    added to the family. ``gates`` (equivalence) by arm name, scoped to each slice's sampling mode
    (``scoped_gates``); ``quality`` by (arm, prompt class, sampling), a slice missing there has a
    quality gate that did not run."""
    baselines: dict[ConfigKey, list[CellResult]] = defaultdict(list)
    candidates: dict[tuple[ConfigKey, str], list[CellResult]] = defaultdict(list)
    for cell in cells:
        ident = cell.identity
        if ident.method == "baseline":
            baselines[config_key(ident)].append(cell)
        else:
            candidates[(config_key(ident), ident.arm)].append(cell)
    cases = []
    for (key, arm), runs in sorted(candidates.items(), key=lambda item: item[0]):
        ident = runs[0].identity
        where = Slice(arm=arm, method=ident.method, k=ident.num_speculative_tokens, prompt_class=key[0],
                      load_mode=key[1], load_value=key[2], sampling=key[3])
        slice_quality = quality.get((arm, where.prompt_class, where.sampling)) or quality_not_run(
            f"{where.prompt_class}/{where.sampling}: no quality gate result for {arm}")
        scoped = scoped_gates(gates.get(arm, []), config, where.sampling)
        arm_gates = [*scoped.gates, slice_quality]
        usable = [_sample(c, samples) for c in runs if c.usable]
        base = [_sample(c, samples) for c in baselines.get(key, []) if c.usable]
        if not usable or not base:
            side: Literal["candidate", "baseline"] = "candidate" if not usable else "baseline"
            cases.append(CellCase(where, arm_gates, None, None, (side, runs if not usable else baselines.get(key, [])),
                                  scoped.serving_warning))
            continue
        comparison, claim = compare(evidence, where, base, usable, config.slo, config.hardware)
        cases.append(CellCase(where, arm_gates, comparison, evidence.family.add(claim) if claim else None,
                              serving_warning=scoped.serving_warning))
    return cases


def decide_cases(cases: Sequence[CellCase], results: Mapping[str, ClaimResult], config: SweepConfig,
                 evidence: Evidence) -> list[Decision]:
    """Each case's verdict from its claim's result in the decided family."""
    return [_decide(case, results, config, evidence) for case in cases]


def _decide(case: CellCase, results: Mapping[str, ClaimResult], config: SweepConfig, evidence: Evidence) -> Decision:
    """Adopt only when every test passes, checked in this order; the first failure is the reason.

    A quality gate that did not run has not passed, so it rejects the slice, with its own code
    (``quality_not_run``, never mistaken for a failed gate) and a reason naming why it did not
    run and what the other tests concluded (issue 15: it never passes silently).
    """
    if case.comparison is None:
        assert case.unusable is not None
        side, cells = case.unusable
        why = "; ".join(r for c in cells for r in c.reasons)
        code: ReasonCode = "candidate_not_usable" if side == "candidate" else "baseline_not_usable"
        return Decision(slice=case.where, verdict="reject", reason_code=code, comparison=None, cost=None,
                        reason=f"no usable {side} cell" + (f": {why}" if why else ""), gates=case.gates,
                        serving_warning=case.serving_warning)
    result = results.get(case.claim.key) if case.claim else None
    itl = results.get(f"itl:{claim_key(case.where)}")
    comparison = case.comparison if result is None else case.comparison.model_copy(update={
        "qualified_tps_speedup": result.marginal, "qualified_tps_speedup_corrected": result.corrected,
        "itl_speedup": itl.marginal if itl else None})
    cost = _cost_figures(comparison, config.hardware, evidence) if comparison.candidate_qualified_tokens_per_s > 0 \
        else None
    *gates, quality = case.gates
    code, reason = _verdict(comparison, cost, gates, quality, result)
    if not quality.ran and code not in BEFORE_QUALITY:
        code, reason = "quality_not_run", (f"{quality.detail}: not adopted, since a gate that did not run has not "
                                           f"passed (were it to pass: {reason})")
    base_tps = comparison.baseline_qualified_tokens_per_s
    found = detection(result, lambda speedup: saving_at(config.hardware, base_tps, speedup)) if result else None
    if found is not None and code not in INCONCLUSIVE:
        found = found.model_copy(update={"runs_factor": None, "to_decide": None})
    verdict: Verdict = "adopt" if code == "adopt" else "inconclusive" if code in INCONCLUSIVE else "reject"
    return Decision(slice=case.where, verdict=verdict, reason_code=code, reason=reason, comparison=comparison,
                    cost=cost, gates=case.gates, comparisons=result.comparisons if result else None, detection=found,
                    serving_warning=case.serving_warning)


def _verdict(c: Comparison, cost: CostFigures | None, gates: Sequence[GateResult], quality: GateResult,
             result: ClaimResult | None) -> tuple[ReasonCode, str]:
    """The first test that fails, in order; a quality gate that did not run is left to ``_decide``."""
    if cost is None:
        return "no_qualified_tokens", "no request of the speculative arm met its SLO"
    if not c.candidate_slo_holds:
        return "slo_missed", f"p{c.slo_percentile:g} TTFT or ITL of the speculative arm misses the SLO"
    if not gates:
        return "no_gate", "no equivalence gate result for this arm"
    failed = [g for g in (*gates, quality) if g.ran and not g.passed]
    if failed:
        return "gate_failed", "; ".join(f"{g.gate}: {g.detail}" for g in failed)
    not_run = [g for g in gates if not g.ran]
    if not_run:
        return "gate_not_run", "; ".join(f"{g.gate}: {g.detail}" for g in not_run)
    if cost.saving_fraction is None or result is None:
        served = f"{c.candidate_qualified_tokens_per_s:.1f}"
        return "baseline_unqualified", ("the baseline produced no SLO-qualified tokens at this load: no saving can "
                                        f"be formed (the speculative arm serves {served} qualified tokens/s there)")
    saving = f"whole-replica cost {cost.saving_fraction:+.1%} saving"
    if not np.isfinite(result.claim.break_even):
        return "cost_not_lower", f"{saving}: the baseline serves the demand on one replica, no speedup saves one"
    if not evidence_ok(result):
        return "no_noise_estimate", f"{saving} but {result.why_not}"
    corrected = result.corrected
    bounds = (f"{bs.speedup_text(corrected.estimate, corrected.low, corrected.high, digits=3)} "
              f"(break-even {bs.speedup_text(result.claim.break_even, digits=3)}), "
              f"corrected for {result.comparisons} comparisons")
    if result.verdict == "reject":
        return "shown_not_to_pay", f"{saving}, {result.why_not}: speedup {bounds}"
    if result.verdict == "inconclusive":
        code: ReasonCode = "within_noise" if (result.marginal.low or 0.0) <= result.claim.break_even else (
            "not_after_correction")
        return code, f"{saving}, {result.why_not}: speedup {bounds}"
    return "adopt", f"{saving} beyond the noise: speedup {bounds}; SLO and gates pass"


def evidence_ok(result: ClaimResult) -> bool:
    """The claim's interval includes run-to-run noise (it states a confidence)."""
    return result.marginal.confidence is not None


def _sample(cell: CellResult, samples: Mapping[str, CellSample]) -> CellSample:
    if cell.key not in samples:
        raise InputError(f"no per-request sample for usable cell {cell.identity.label} (key {cell.key})")
    return samples[cell.key]
