"""Speculative arm vs baseline, cell by cell: speedup with intervals, whole-replica cost, verdict.

Seed, "Production gates": adopt only where SLO-qualified cost per million accepted tokens
falls by more than the measurement noise, the SLO holds and the equivalence gates pass.
Negative cells are published with the same detail as positive ones.
"""

import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from specfleet.acceptance import pooled_tokens_per_step
from specfleet.contract.base import RecordModel
from specfleet.contract.checks import AnalysisSpec
from specfleet.contract.models import HardwareSpec
from specfleet.contract.sweep import SweepConfig
from specfleet.contract.workload import SLOSpec
from specfleet.cost import FleetCost, fleet_cost
from specfleet.errors import InputError
from specfleet.quality_gates import SliceKey
from specfleet.results.cell import CellResult
from specfleet.stats import bootstrap as bs
from specfleet.stats.noise import ConfigKey, baseline_noise, config_key, noise_for
from specfleet.stats.quality import GateResult, quality_not_run
from specfleet.stats.samples import CellSample

ReasonCode = Literal[
    "adopt", "baseline_unqualified", "candidate_not_usable", "baseline_not_usable", "no_qualified_tokens",
    "slo_missed", "no_gate", "gate_failed", "no_noise_estimate", "cost_not_lower", "within_noise",
    "interval_not_lower", "quality_not_run",
]


class Slice(RecordModel):
    """One speculative arm at one matched configuration."""

    arm: str
    method: str
    k: int
    prompt_class: str
    load_mode: str
    load_value: float
    sampling: str


class Comparison(RecordModel):
    basis: bs.Basis
    baseline_runs: int
    candidate_runs: int
    baseline_qualified_tokens_per_s: float
    candidate_qualified_tokens_per_s: float
    qualified_tps_speedup: bs.Interval | None = Field(description="Candidate / baseline; None if baseline 0.")
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
    pessimistic_saving_fraction: float | None = Field(description="Saving at the speedup interval's low end.")
    optimistic_saving_fraction: float | None = Field(
        None, description="Saving at the speedup interval's high end (None in summaries written before it existed).")
    noise_floor: float | None
    noise_source: str


class Decision(RecordModel):
    slice: Slice
    verdict: Literal["adopt", "reject"]
    reason_code: ReasonCode
    reason: str
    comparison: Comparison | None
    cost: CostFigures | None
    gates: list[GateResult]

    @property
    def interval(self) -> bs.Interval | None:
        return self.comparison.qualified_tps_speedup if self.comparison else None


def _percentile(values: np.ndarray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else None


def _slo_holds(samples: Sequence[CellSample], slo: SLOSpec) -> tuple[bool, float | None, float | None]:
    ttft = _percentile(np.concatenate([s.ttft_ms for s in samples]), slo.percentile)
    itl = _percentile(np.concatenate([s.pooled_itl_ms() for s in samples]), slo.percentile)
    holds = ttft is not None and ttft <= slo.ttft_ms and (itl is None or itl <= slo.itl_ms)
    return holds, ttft, itl


def _acceptance(cells: Sequence[CellResult]) -> tuple[float | None, float | None]:
    stats = [c.spec_decode for c in cells if c.spec_decode is not None]
    drafts = sum(s.num_drafts for s in stats)
    proposed = sum(s.num_draft_tokens for s in stats)
    accepted = sum(s.num_accepted_tokens for s in stats)
    return (accepted / proposed if proposed else None, 1.0 + accepted / drafts if drafts else None)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def compare_cells(
    baseline: Sequence[CellSample], candidate: Sequence[CellSample], slo: SLOSpec, analysis: AnalysisSpec,
    rng: np.random.Generator,
) -> Comparison:
    """Speedups in SLO-qualified tokens/s and in SLO-percentile ITL, with bootstrap intervals
    over repeats when both arms ran at least twice, else over requests (pooled repeats)."""
    if not baseline or not candidate:
        raise InputError("a comparison needs at least one baseline and one candidate cell")
    n, conf, q = analysis.bootstrap_resamples, analysis.confidence, slo.percentile
    base_tps = float(np.mean([s.qualified_tokens_per_s for s in baseline]))
    cand_tps = float(np.mean([s.qualified_tokens_per_s for s in candidate]))
    base_ok, _, _ = _slo_holds(baseline, slo)
    cand_ok, cand_ttft, _ = _slo_holds(candidate, slo)
    repeats = len(baseline) >= 2 and len(candidate) >= 2
    basis: bs.Basis = "repeats" if repeats else "requests"

    def tps_reps(samples: Sequence[CellSample], tps: float) -> np.ndarray:
        if repeats:
            return bs.mean_replicates(np.array([s.qualified_tokens_per_s for s in samples]), rng, n)
        tokens = np.concatenate([s.qualified_tokens for s in samples])
        return tps * bs.rate_replicates(tokens, np.concatenate([s.durations_s for s in samples]), rng, n)

    def per_run_itl(samples: Sequence[CellSample]) -> np.ndarray:
        return np.array([np.nan if (v := _percentile(s.pooled_itl_ms(), q)) is None else v for s in samples])

    def itl_point(samples: Sequence[CellSample]) -> float | None:
        if repeats:
            runs = per_run_itl(samples)
            return float(np.mean(runs)) if np.all(np.isfinite(runs)) else None
        return _percentile(np.concatenate([s.pooled_itl_ms() for s in samples]), q)

    def itl_reps(samples: Sequence[CellSample]) -> np.ndarray:
        if repeats:
            return bs.mean_replicates(per_run_itl(samples), rng, n)
        return bs.pooled_percentile_replicates([x for s in samples for x in s.itl_ms], q, rng, n)

    base_reps, cand_reps = tps_reps(baseline, base_tps), tps_reps(candidate, cand_tps)
    base_itl, cand_itl = itl_point(baseline), itl_point(candidate)
    tps_speedup = _ratio(cand_tps, base_tps)
    itl_speedup = _ratio(base_itl, cand_itl)
    base_itl_reps, cand_itl_reps = itl_reps(baseline), itl_reps(candidate)
    rate, length = _acceptance([s.cell for s in candidate])
    return Comparison(
        basis=basis, baseline_runs=len(baseline), candidate_runs=len(candidate),
        baseline_qualified_tokens_per_s=base_tps, candidate_qualified_tokens_per_s=cand_tps,
        qualified_tps_speedup=None if tps_speedup is None else bs.ratio_interval(
            tps_speedup, cand_reps, base_reps, conf, basis),
        itl_statistic=slo.itl_statistic, slo_percentile=q,
        baseline_itl_ms=base_itl, candidate_itl_ms=cand_itl,
        itl_speedup=None if itl_speedup is None else bs.ratio_interval(
            itl_speedup, base_itl_reps, cand_itl_reps, conf, basis),
        candidate_ttft_ms=cand_ttft, baseline_slo_holds=base_ok, candidate_slo_holds=cand_ok,
        acceptance_rate=rate, mean_acceptance_length=length,
        tokens_per_step=pooled_tokens_per_step([s.cell for s in candidate]),
        engine_version=candidate[0].cell.engine_version,
    )


def _cost(hardware: HardwareSpec, tokens_per_s: float) -> FleetCost:
    return fleet_cost(hardware.accelerators_per_replica, hardware.accelerator_hour_usd, tokens_per_s,
                      hardware.peak_demand_tokens_per_s)


def _saving_at(hardware: HardwareSpec, base: FleetCost, base_tps: float, speedup: float | None) -> float | None:
    """Whole-replica saving were the candidate exactly ``speedup`` times the baseline (an interval end)."""
    if speedup is None or speedup <= 0:
        return None
    return 1.0 - _cost(hardware, base_tps * speedup).cost_per_million_usd / base.cost_per_million_usd


def _cost_figures(c: Comparison, hardware: HardwareSpec, noise: float | None, source: str) -> CostFigures:
    cand = _cost(hardware, c.candidate_qualified_tokens_per_s)
    base_tps = c.baseline_qualified_tokens_per_s
    base = _cost(hardware, base_tps) if base_tps > 0 else None
    saving = pessimistic = optimistic = None
    if base is not None:
        saving = 1.0 - cand.cost_per_million_usd / base.cost_per_million_usd
        interval = c.qualified_tps_speedup
        pessimistic = _saving_at(hardware, base, base_tps, interval.low if interval else None)
        optimistic = _saving_at(hardware, base, base_tps, interval.high if interval else None)
    return CostFigures(
        baseline_replicas=base.replicas if base else None, candidate_replicas=cand.replicas,
        baseline_cost_per_million_usd=base.cost_per_million_usd if base else None,
        candidate_cost_per_million_usd=cand.cost_per_million_usd,
        baseline_ideal_cost_per_million_usd=base.ideal_cost_per_million_usd if base else None,
        candidate_ideal_cost_per_million_usd=cand.ideal_cost_per_million_usd,
        saving_fraction=saving, pessimistic_saving_fraction=pessimistic, optimistic_saving_fraction=optimistic,
        noise_floor=noise, noise_source=source,
    )


BEFORE_QUALITY: tuple[ReasonCode, ...] = ("no_qualified_tokens", "slo_missed", "no_gate", "gate_failed")
"""Rejections that stand whether or not the quality gate ran."""


def decide(
    where: Slice, c: Comparison, hardware: HardwareSpec, noise: float | None, noise_source: str,
    gates: Sequence[GateResult], quality: GateResult,
) -> Decision:
    """Adopt only when every test passes, checked in this order; the first failure is the reason.

    ``gates`` are the arm's equivalence gates, ``quality`` this slice's held-out quality gate. A
    quality gate that did not run has not passed, so it rejects the slice, with its own code
    (``quality_not_run``, never mistaken for a failed gate) and a reason naming why it did not
    run and what the other tests concluded (issue 15: it never passes silently).
    """
    code, reason, cost = _verdict(c, hardware, noise, noise_source, gates, quality)
    if not quality.ran and code not in BEFORE_QUALITY:
        code, reason = "quality_not_run", (f"{quality.detail}: not adopted, since a gate that did not run has not "
                                           f"passed (were it to pass: {reason})")
    return Decision(slice=where, verdict="adopt" if code in ("adopt", "baseline_unqualified") else "reject",
                    reason_code=code, reason=reason, comparison=c, cost=cost, gates=[*gates, quality])


def _verdict(c: Comparison, hardware: HardwareSpec, noise: float | None, noise_source: str,
             gates: Sequence[GateResult], quality: GateResult) -> tuple[ReasonCode, str, CostFigures | None]:
    """The first test that fails, in order; a quality gate that did not run is left to ``decide``."""
    if c.candidate_qualified_tokens_per_s <= 0:
        return "no_qualified_tokens", "no request of the speculative arm met its SLO", None
    cost = _cost_figures(c, hardware, noise, noise_source)
    if not c.candidate_slo_holds:
        return "slo_missed", f"p{c.slo_percentile:g} TTFT or ITL of the speculative arm misses the SLO", cost
    if not gates:
        return "no_gate", "no equivalence gate result for this arm", cost
    failed = [g for g in (*gates, quality) if g.ran and not g.passed]
    if failed:
        return "gate_failed", "; ".join(f"{g.gate}: {g.detail}" for g in failed), cost
    if cost.saving_fraction is None:
        return "baseline_unqualified", "the baseline produced no SLO-qualified tokens at this load", cost
    saving = f"whole-replica cost {cost.saving_fraction:+.1%} saving"
    if cost.saving_fraction <= 0:
        return "cost_not_lower", f"{saving}: speculation does not lower cost per million", cost
    if noise is None:
        return "no_noise_estimate", f"{saving} but {noise_source}: noise unknown", cost
    if cost.saving_fraction <= noise:
        return "within_noise", f"{saving} is within the noise floor {noise:.1%}", cost
    if cost.pessimistic_saving_fraction is None or cost.pessimistic_saving_fraction <= 0:
        return "interval_not_lower", f"{saving}, but none at the speedup interval's low end", cost
    return "adopt", f"{saving} beyond noise {noise:.1%}; SLO and gates pass", cost


def decide_all(
    cells: Sequence[CellResult],
    samples: Mapping[str, CellSample],
    config: SweepConfig,
    gates: Mapping[str, Sequence[GateResult]],
    quality: Mapping[SliceKey, GateResult],
) -> list[Decision]:
    """Every speculative (arm, configuration) against the baseline's main-phase cells.

    ``samples`` is keyed by ``CellResult.key``; ``gates`` (equivalence) by arm name (e.g.
    'draft-k3'); ``quality`` by (arm, prompt class, sampling), a slice missing there has a
    quality gate that did not run. The baseline's end-of-sweep cells feed the noise floor only;
    its replica check cells (``specfleet.replicas``) are main-phase runs, pooled like repeats.
    """
    floors = baseline_noise(cells)
    baselines: dict[ConfigKey, list[CellResult]] = defaultdict(list)
    candidates: dict[tuple[ConfigKey, str], list[CellResult]] = defaultdict(list)
    for cell in cells:
        ident = cell.identity
        if ident.method == "baseline":
            if ident.phase == "main":
                baselines[config_key(ident)].append(cell)
        else:
            candidates[(config_key(ident), ident.arm)].append(cell)
    decisions = []
    for (key, arm), runs in sorted(candidates.items(), key=lambda item: item[0]):
        ident = runs[0].identity
        where = Slice(arm=arm, method=ident.method, k=ident.num_speculative_tokens, prompt_class=key[0],
                      load_mode=key[1], load_value=key[2], sampling=key[3])
        usable = [_sample(c, samples) for c in runs if c.usable]
        base = [_sample(c, samples) for c in baselines.get(key, []) if c.usable]
        arm_gates = gates.get(arm, [])
        slice_quality = quality.get((arm, where.prompt_class, where.sampling)) or quality_not_run(
            f"{where.prompt_class}/{where.sampling}: no quality gate result for {arm}")
        if not usable or not base:
            decisions.append(_unusable(where, runs if not usable else baselines.get(key, []),
                                       "candidate" if not usable else "baseline", [*arm_gates, slice_quality]))
            continue
        rng = np.random.default_rng([config.analysis.seed, zlib.crc32(where.model_dump_json().encode())])
        comparison = compare_cells(base, usable, config.slo, config.analysis, rng)
        noise, source = noise_for(key, floors)
        decisions.append(decide(where, comparison, config.hardware, noise, source, arm_gates, slice_quality))
    return decisions


def _unusable(where: Slice, cells: Sequence[CellResult], side: Literal["candidate", "baseline"],
              gates: Sequence[GateResult]) -> Decision:
    why = "; ".join(r for c in cells for r in c.reasons)
    code: ReasonCode = "candidate_not_usable" if side == "candidate" else "baseline_not_usable"
    return Decision(slice=where, verdict="reject", reason_code=code, comparison=None, cost=None,
                    reason=f"no usable {side} cell" + (f": {why}" if why else ""), gates=list(gates))


def _sample(cell: CellResult, samples: Mapping[str, CellSample]) -> CellSample:
    if cell.key not in samples:
        raise InputError(f"no per-request sample for usable cell {cell.identity.label} (key {cell.key})")
    return samples[cell.key]
