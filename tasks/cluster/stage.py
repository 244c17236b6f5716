"""Arms as Ray tasks. Each requests its arm's accelerators, runs one server life
(``specfleet_tasks.arm.lifecycle.run_arm``: start, probes, cells stored as they finish, stop) and returns
plain data. Ray remote functions called from an ordinary Prefect task avoid prefect-ray's
result-storage and retry pitfalls (docs/measurement.md, "Orchestration and tracking pitfalls").
Under a budget a stage's arms are submitted most decision-relevant first (by their best cell).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from specfleet.contract import SweepConfig
from specfleet.contract.prompts import PromptItem
from specfleet.gates.scored_set import ScoredSet
from specfleet.planning.budget import CellBudget, NotMeasured
from specfleet.results import ArmTiming, CellResult
from specfleet_tasks.arm.lifecycle import run_arm
from specfleet_tasks.cluster.interrupt import raise_if_interrupted
from specfleet_tasks.cluster.progress import CellProgress
from specfleet_tasks.plan.sweep_plan import ArmWork, SweepPlan
from specfleet_tasks.store.results import ResultsStore

POLL_S = 1.0
ARM_RETRIES = 1
"""Ray re-runs an arm whose worker or node died (not one that raised): the retry skips the
cells already stored, so a lost node costs only its unfinished cells (measured elsewhere)."""


@dataclass(frozen=True)
class ArmReport:
    """What one arm's Ray task returned, parsed on the flow side."""

    arm: str
    phase: str
    cells: list[CellResult]
    error: str | None
    timing: ArmTiming | None
    """None when the task died past its retries: where its time went was never reported."""
    not_measured: list[NotMeasured] = field(default_factory=list)
    """Cells the budget did not start."""


@ray.remote(max_retries=ARM_RETRIES)
def arm_task(
    config: SweepConfig, work: ArmWork, resolved: dict[str, str], prompts_by_class: dict[str, list[PromptItem]],
    results_root: str, sweep_id: str, scored_sets: dict[str, ScoredSet | None] | None, budget: CellBudget | None,
) -> dict[str, Any]:
    """One server life on a Ray worker; the store must be reachable there (local, or shared)."""
    store = ResultsStore(Path(results_root), sweep_id)
    outcome = run_arm(config, work.arm, work.cells, resolved, prompts_by_class, store, probe=work.probe,
                      scored_sets=scored_sets, replica=work.replica, budget=budget,
                      closing=work.phase == "baseline_end")
    return {
        "arm": outcome.arm, "error": outcome.error, "timing": outcome.timing.model_dump(mode="json"),
        "cells": [cell.model_dump(mode="json") for cell in outcome.cells],
        "not_measured": [skipped.model_dump(mode="json") for skipped in outcome.not_measured],
    }


def arm_report(work: ArmWork, ref: ray.ObjectRef) -> ArmReport:  # type: ignore[type-arg]
    try:
        data = ray.get(ref)
    except ray.exceptions.RayError as err:  # died past its retries: its stored cells stay, resume does the rest
        return ArmReport(arm=work.arm.arm, phase=work.phase, cells=[], error=f"Ray task failed: {err}",
                         timing=None)
    return ArmReport(arm=data["arm"], phase=work.phase, error=data["error"],
                     timing=ArmTiming.model_validate(data["timing"]),
                     cells=[CellResult.model_validate(c) for c in data["cells"]],
                     not_measured=[NotMeasured.model_validate(c) for c in data["not_measured"]])


def run_stage(plan: SweepPlan, stage: Sequence[ArmWork], resources: dict[str, Any], progress: CellProgress,
              label: str, budget: CellBudget | None = None) -> list[ArmReport]:
    """Submit the stage's arms at once (Ray places them as accelerators free up); wait for all."""
    if budget is not None:
        stage = sorted(stage, key=lambda work: min(budget.priority.get(key, math.inf) for _, key in work.cells))
    refs = {
        arm_task.options(**resources).remote(
            plan.config, work, plan.resolved, plan.prompts_by_class, str(plan.store.root), plan.sweep_id,
            plan.scored_sets if work.quality_probe else None, budget,
        ): work
        for work in stage
    }
    keys = {key for work in plan.work for _, key in work.cells}
    reports, waiting = [], list(refs)
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1, timeout=POLL_S)
        reports += [arm_report(refs[ref], ref) for ref in done]
        progress.update(plan.store, keys, label)
        raise_if_interrupted()
    return reports
