"""``specfleet canary``'s measurements: per prompt class, the same prompts in the same order at the
same load to a baseline and a candidate replica side by side, each class's scored set answered
by both, and the sweep's noise, break-even and rollback arguments (``--from``). Every class's
claims go into one family (``specfleet.verdicts.rule``), paired prompt by prompt;
``specfleet.production.canary`` makes the verdict; the cells and records are stored like a sweep's."""

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from specfleet.contract import SamplingSpec
from specfleet.contract.prompts import PromptItem
from specfleet.gates.scored_set import ScoredSet, score_answers
from specfleet.measure.acceptance import client_mean_acceptance_length
from specfleet.production.canary import (
    AcceptanceFigure,
    AgeDifference,
    CanaryResult,
    ClassComparison,
    PairedClass,
    UnusableCell,
    acceptance_figure,
    age_difference,
    canary_family,
    canary_verdict,
    class_claims,
    compare_class,
    uncompared_class,
)
from specfleet.production.replica_age import AgeCoverage, Replica
from specfleet.results import CellResult
from specfleet.results.records import RequestRecord
from specfleet.stats.quality import QualityResult, quality_gate
from specfleet.stats.samples import CellSample
from specfleet.verdicts.rule import Claim, ClaimResult
from specfleet_tasks.arm.cell import CellPlan, endpoint_cell_plan, measure_cell
from specfleet_tasks.arm.energy import EnergyWindow
from specfleet_tasks.arm.probes import answer_probe
from specfleet_tasks.canary.context import CanaryLoad, SweepContext
from specfleet_tasks.loadgen import ServerEndpoint, run_async
from specfleet_tasks.plan.prompt_sets import bundled_dir, resolve_prompts
from specfleet_tasks.store.parquet import read_records_parquet
from specfleet_tasks.store.results import ResultsStore

SIDE_BY_SIDE = "canary: replicas measured at once; energy is not attributable to any one of them"


def _plan(prompt_class: str, prompts: Sequence[PromptItem], load: CanaryLoad, context: SweepContext, replica: str,
          canary_id: str) -> CellPlan:
    return endpoint_cell_plan(
        arm=replica, prompt_class=prompt_class, prompts=prompts,
        sampling=SamplingSpec(name="canary", temperature=load.temperature), concurrency=load.concurrency,
        rate=load.rate, requests=load.requests, warmup=load.warmup, max_tokens=load.max_tokens, slo=context.slo,
        key_salt=canary_id, max_error_fraction=context.max_error_fraction,
        client_lag_limit_ms=context.client_lag_limit_ms)


async def _side_by_side(replicas: Sequence[ServerEndpoint], plans: Sequence[CellPlan],
                        store: ResultsStore) -> list[CellResult]:
    cells = await asyncio.gather(*(measure_cell(endpoint, plan, EnergyWindow(None, SIDE_BY_SIDE), store)
                                   for endpoint, plan in zip(replicas, plans, strict=True)))
    return list(cells)


async def _answers(replicas: Sequence[ServerEndpoint], scored: ScoredSet, max_tokens: int
                   ) -> list[dict[str, float | None]]:
    prompts = [item.as_prompt() for item in scored.items]
    greedy = SamplingSpec(name="greedy", temperature=0.0)
    outcomes = await asyncio.gather(*(answer_probe(endpoint, prompts, max_tokens, greedy) for endpoint in replicas))
    return [score_answers(scored.items, answers) for answers, _ in outcomes]


def _scored_set(prompt_class: str) -> ScoredSet | None:
    """A bundled class's scored set (``configs/prompts/scored/``); a prompt file has none."""
    path = bundled_dir() / "scored" / f"{prompt_class}.jsonl"
    return ScoredSet.parse(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else None


def _acceptance(records: Sequence[RequestRecord]) -> tuple[AcceptanceFigure, float | None]:
    """vLLM's per-request figure where sent, else the client's; and the client's (all steps) alone."""
    measured = [r for r in records if r.ok]
    client = [client_mean_acceptance_length(r) for r in measured]
    per_step = acceptance_figure([], client)
    return acceptance_figure([r.request_mean_acceptance_length for r in measured], client), per_step.value


def _quality(replicas: Sequence[ServerEndpoint], class_name: str, load: CanaryLoad, context: SweepContext,
             rng: np.random.Generator) -> QualityResult | None:
    """Both replicas answer the class's scored set at greedy; None where the class has none."""
    scored = _scored_set(class_name)
    if scored is None:
        return None
    base_scores, cand_scores = run_async(_answers(replicas, scored, load.max_tokens))
    return quality_gate(base_scores, cand_scores, prompt_class=class_name, sampling="greedy",
                        tolerance=context.quality_tolerance, confidence=context.analysis.confidence,
                        resamples=context.analysis.bootstrap_resamples, rng=rng)


@dataclass(frozen=True)
class _Measured:
    """One class's stored cells and records per replica; ``paired`` (the reference against the
    candidate) when both their cells are usable (compared); ``aged`` (the baseline against the twin)
    when a twin was measured and both their cells are usable."""

    name: str
    bundled: bool
    cells: dict[Replica, CellResult]
    records: dict[Replica, list[RequestRecord]]
    pair: tuple[Replica, Replica]
    """The reference replica (the twin, else the baseline) and the candidate."""
    paired: PairedClass | None
    aged: PairedClass | None

    def pair_records(self) -> list[list[RequestRecord]]:
        return [self.records[replica] for replica in self.pair]


def _compared(measured: _Measured, results: Mapping[str, ClaimResult], claims: Mapping[str, Claim],
              replicas: Sequence[ServerEndpoint], load: CanaryLoad, context: SweepContext, covered: bool,
              rng: np.random.Generator) -> ClassComparison:
    """A class both compared replicas measured usably: its decided claims, acceptance and quality."""
    quality = _quality(replicas, measured.name, load, context, rng) if measured.bundled else None
    (base_acc, _), (cand_acc, cand_per_step) = (_acceptance(recs) for recs in measured.pair_records())
    assert measured.paired is not None
    comparison, decided = class_claims(measured.paired, results, claims, context.slo, context.noise)
    return compare_class(measured.name, comparison, decided, base_acc, cand_acc, cand_per_step,
                         context.break_even_tokens_per_step, quality, measured.bundled, covered)


def _unusable(measured: _Measured, replicas: Sequence[Replica]) -> dict[Replica, UnusableCell]:
    return {replica: UnusableCell(replica=replica, status=measured.cells[replica].status,
                                  reasons=measured.cells[replica].reasons)
            for replica in replicas if not measured.cells[replica].usable}


def _uncompared(measured: _Measured, replicas: Sequence[ServerEndpoint], load: CanaryLoad, context: SweepContext,
                rng: np.random.Generator) -> ClassComparison:
    """A class a compared replica's unusable cell keeps from being compared; what can still be said
    (the other replica's acceptance, the scored set's answers) is kept, and a replica that cannot
    answer the scored set then leaves quality None with why."""
    unusable = _unusable(measured, measured.pair)
    quality, quality_note = None, None
    try:
        quality = _quality(replicas, measured.name, load, context, rng) if measured.bundled else None
    except httpx.HTTPError as err:  # a replica that stopped answering; the class is not compared anyway
        quality_note = f"a replica could not answer the scored set: {type(err).__name__}: {err}"

    def side(replica: Replica) -> tuple[AcceptanceFigure, float | None]:
        cell = unusable.get(replica)
        return _acceptance(measured.records[replica]) if cell is None else (cell.acceptance(), None)

    (base_acc, _), (cand_acc, cand_per_step) = (side(r) for r in measured.pair)
    return uncompared_class(measured.name, list(unusable.values()), base_acc, cand_acc, cand_per_step,
                            context.break_even_tokens_per_step, quality, quality_note, measured.bundled)


def _measure_class(name: str, prompts: Sequence[PromptItem], replicas: Mapping[Replica, ServerEndpoint],
                   load: CanaryLoad, context: SweepContext, store: ResultsStore, canary_id: str) -> _Measured:
    """One class on every replica side by side, stored; paired where the cells allow."""
    class_name = Path(name).stem
    plans = {replica: _plan(class_name, prompts, load, context, replica, canary_id) for replica in replicas}
    cells = dict(zip(plans, run_async(_side_by_side(list(replicas.values()), list(plans.values()), store)),
                     strict=True))
    records = {replica: read_records_parquet(store.records_path(plan.key)) for replica, plan in plans.items()}

    def paired(sides: tuple[Replica, Replica]) -> PairedClass | None:
        if not all(replica in cells and cells[replica].usable for replica in sides):
            return None
        reference, candidate = (CellSample.from_records(cells[r], records[r], context.slo) for r in sides)
        return PairedClass(class_name, reference, candidate, sides)

    pair: tuple[Replica, Replica] = ("twin" if "twin" in replicas else "baseline", "candidate")
    return _Measured(class_name, Path(name).suffix == "", cells, records, pair, paired(pair),
                     paired(("baseline", "twin")))


def _age_differences(measured: Sequence[_Measured], context: SweepContext) -> dict[str, AgeDifference]:
    """With a twin: each class's long-running baseline against the twin, decided in a family of its own."""
    family, claims = canary_family([m.aged for m in measured if m.aged is not None], context.noise_runs,
                                   context.noise, context.slo, context.analysis)
    results = family.decide()
    return {m.name: age_difference(results, claims[m.name]) if m.aged is not None else age_difference(
        None, None, "; ".join(u.describe() for u in _unusable(m, ("baseline", "twin")).values())) for m in measured}


def run_canary(replicas: Mapping[Replica, ServerEndpoint], prompt_sets: Sequence[str], load: CanaryLoad,
               context: SweepContext, results_dir: Path, age: AgeCoverage) -> tuple[CanaryResult, Path]:
    """Each class side by side on every replica (baseline, candidate and, where given, the twin),
    then every class's claims decided together, then the verdict; returns it and the canary's
    folder. The candidate is compared with the twin where one is given, else with the baseline;
    the baseline against the twin is each class's age difference. A class whose compared cells
    are not both usable is stored and reported as not compared."""
    classes = {name: resolve_prompts(name) for name in prompt_sets}
    canary_id = f"canary-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    store = ResultsStore(results_dir, canary_id)
    rng = np.random.default_rng(context.analysis.seed)
    measured = [_measure_class(name, prompts, replicas, load, context, store, canary_id)
                for name, prompts in classes.items()]
    family, claims = canary_family([m.paired for m in measured if m.paired is not None], context.noise_runs,
                                   context.noise, context.slo, context.analysis)
    results = family.decide()
    aged = _age_differences(measured, context) if "twin" in replicas else {}
    compared = []
    for m in measured:
        pair = [replicas[replica] for replica in m.pair]
        row = (_compared(m, results, claims[m.name], pair, load, context, age.covered, rng) if m.paired is not None
               else _uncompared(m, pair, load, context, rng))
        compared.append(row.model_copy(update={"age_difference": aged.get(m.name)}))
    noise = context.noise["qualified_tokens_per_s"]
    verdict, reason = canary_verdict(compared, noise.estimated, age.reason)
    result = CanaryResult(
        verdict=verdict, reason=reason, noise_floor=noise.relative_sd,
        noise_source=f"{context.sweep_id}: {noise.source}" if context.sweep_id else noise.source,
        comparisons=len(family.claims) or None, sweep_id=context.sweep_id, arm=context.arm,
        rollback_server_args=context.rollback_server_args, classes=compared, age=age)
    store.write_json("canary.json", result)
    return result, store.dir
