"""Arms as Ray tasks. Each requests its arm's accelerators, runs one server life
(``tasks.arm.lifecycle.run_arm``: start, probes, cells stored as they finish, stop) and returns
plain data. Ray remote functions called from an ordinary Prefect task avoid prefect-ray's
result-storage and retry pitfalls (docs/measurement.md, "Orchestration and tracking pitfalls").
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig
from specfleet.prompts import PromptItem
from specfleet.results import ArmTiming, CellResult
from specfleet.scored_set import ScoredSet
from tasks.arm.lifecycle import run_arm
from tasks.cluster.interrupt import raise_if_interrupted
from tasks.cluster.progress import CellProgress
from tasks.plan.sweep_plan import ArmWork, SweepPlan
from tasks.store.results import ResultsStore

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



@ray.remote(max_retries=ARM_RETRIES)
def arm_task(
    config: SweepConfig, arm: ArmPlan, cells: list[tuple[CellIdentity, str]], resolved: dict[str, str],
    prompts_by_class: dict[str, list[PromptItem]], results_root: str, sweep_id: str, probe: bool,
    scored_sets: dict[str, ScoredSet | None] | None, replica: int = 0,
) -> dict[str, Any]:
    """One server life on a Ray worker; the store must be reachable there (local, or shared)."""
    store = ResultsStore(Path(results_root), sweep_id)
    outcome = run_arm(config, arm, cells, resolved, prompts_by_class, store, probe=probe, scored_sets=scored_sets,
                      replica=replica)
    return {
        "arm": outcome.arm, "error": outcome.error, "timing": outcome.timing.model_dump(mode="json"),
        "cells": [cell.model_dump(mode="json") for cell in outcome.cells],
    }


def arm_report(work: ArmWork, ref: ray.ObjectRef) -> ArmReport:  # type: ignore[type-arg]
    try:
        data = ray.get(ref)
    except ray.exceptions.RayError as err:  # died past its retries: its stored cells stay, resume does the rest
        return ArmReport(arm=work.arm.arm, phase=work.phase, cells=[], error=f"Ray task failed: {err}",
                         timing=None)
    return ArmReport(arm=data["arm"], phase=work.phase, error=data["error"],
                     timing=ArmTiming.model_validate(data["timing"]),
                     cells=[CellResult.model_validate(c) for c in data["cells"]])


def run_stage(plan: SweepPlan, stage: Sequence[ArmWork], resources: dict[str, Any], progress: CellProgress,
              label: str) -> list[ArmReport]:
    """Submit the stage's arms at once (Ray places them as accelerators free up); wait for all."""
    refs = {
        arm_task.options(**resources).remote(
            plan.config, work.arm, work.cells, plan.resolved, plan.prompts_by_class,
            str(plan.store.root), plan.sweep_id, work.probe, plan.scored_sets if work.quality_probe else None,
            work.replica,
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
