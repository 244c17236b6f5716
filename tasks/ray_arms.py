"""Arms as Ray tasks. Each requests its arm's accelerators, runs one server life
(``tasks.arm.run_arm``: start, probes, cells stored as they finish, stop) and returns
plain data. Ray remote functions called from an ordinary Prefect task avoid prefect-ray's
result-storage and retry pitfalls (docs/measurement.md, "Orchestration and tracking pitfalls").
"""

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import ray
from prefect import task
from prefect.cache_policies import NO_CACHE
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig
from specfleet.errors import InputError
from specfleet.prompts import PromptItem
from specfleet.results import ArmTiming, CellResult
from tasks.arm import run_arm
from tasks.store import ResultsStore
from tasks.sweep_plan import ArmWork, SweepPlan

ARM_RESOURCE = "specfleet_arm"
"""Custom resource, one per CPU node: CPU arms never share a machine's cores."""
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


def is_cpu(config: SweepConfig) -> bool:
    return config.hardware.accelerator.strip().lower() == "cpu"


@contextmanager
def ray_session(config: SweepConfig) -> Iterator[dict[str, Any]]:
    """Local Ray unless ``RAY_ADDRESS`` names a cluster; yields each arm's resource request
    and always shuts Ray down (its workers stop their servers on SIGTERM)."""
    quiet: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if os.environ.get("RAY_ADDRESS"):
        _connect(quiet)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, resources={ARM_RESOURCE: 1} if is_cpu(config) else None, **quiet)
    try:
        yield arm_resources(config)
    finally:
        ray.shutdown()


def _connect(options: dict[str, Any], attempts: int = 3, backoff_s: float = 5.0) -> None:
    """Join the cluster at ``RAY_ADDRESS``. Through the Ray client (``ray://``) the head starts a
    server process per driver, which can miss its start-up deadline on a loaded head: retry."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(**options)
            return
        except ConnectionAbortedError:
            if attempt == attempts:
                raise
            time.sleep(backoff_s * attempt)


def arm_resources(config: SweepConfig) -> dict[str, Any]:
    """GPU arms ask for their tensor-parallel degree; a CPU arm takes a whole node's cores."""
    if not is_cpu(config):
        gpus = config.hardware.tensor_parallel_size
        seen = ray.cluster_resources().get("GPU", 0)  # type: ignore[no-untyped-call]
        if seen < gpus:
            raise InputError(f"hardware.tensor_parallel_size {gpus}: Ray sees {seen:g} GPUs "
                             f"(hardware.accelerator is {config.hardware.accelerator!r}; use 'cpu' for the CPU build)")
        return {"num_gpus": gpus, "num_cpus": 1}
    cores = [node["Resources"].get("CPU", 1.0) for node in ray.nodes()  # type: ignore[no-untyped-call]
             if node["Alive"] and ARM_RESOURCE in node["Resources"]]
    if not cores:
        raise InputError(f"the Ray cluster has no {ARM_RESOURCE!r} resource: start each CPU node with "
                         f"--resources '{{\"{ARM_RESOURCE}\": 1}}'")
    return {"num_cpus": min(cores), "resources": {ARM_RESOURCE: 1}}


@ray.remote(max_retries=ARM_RETRIES)
def _arm_task(
    config: SweepConfig, arm: ArmPlan, cells: list[tuple[CellIdentity, str]], resolved: dict[str, str],
    prompts_by_class: dict[str, list[PromptItem]], results_root: str, sweep_id: str, probe: bool,
) -> dict[str, Any]:
    """One server life on a Ray worker; the store must be reachable there (local, or shared)."""
    store = ResultsStore(Path(results_root), sweep_id)
    outcome = run_arm(config, arm, cells, resolved, prompts_by_class, store, probe=probe)
    return {
        "arm": outcome.arm, "error": outcome.error, "timing": outcome.timing.model_dump(mode="json"),
        "cells": [cell.model_dump(mode="json") for cell in outcome.cells],
    }


def _report(work: ArmWork, ref: ray.ObjectRef) -> ArmReport:  # type: ignore[type-arg]
    try:
        data = ray.get(ref)
    except ray.exceptions.RayError as err:  # died past its retries: its stored cells stay, resume does the rest
        return ArmReport(arm=work.arm.arm, phase=work.phase, cells=[], error=f"Ray task failed: {err}",
                         timing=None)
    return ArmReport(arm=data["arm"], phase=work.phase, error=data["error"],
                     timing=ArmTiming.model_validate(data["timing"]),
                     cells=[CellResult.model_validate(c) for c in data["cells"]])


class CellProgress:
    """A rich progress bar over the sweep's pending cells, advanced as cell files land in the store."""

    def __init__(self, total: int) -> None:
        self.started = time.time()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("cells"), TimeElapsedColumn())
        self.task = self.bar.add_task("measuring", total=total)

    def __enter__(self) -> "CellProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def update(self, store: ResultsStore, keys: set[str], stage: str) -> None:
        done = sum(1 for key in keys if _written_since(store.cell_path(key), self.started))
        self.bar.update(self.task, completed=done, description=stage)


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


@task(cache_policy=NO_CACHE)  # a measurement must run when asked; resume is keyed on the store
def run_stage(plan: SweepPlan, stage: Sequence[ArmWork], resources: dict[str, Any], progress: CellProgress,
              label: str) -> list[ArmReport]:
    """Submit the stage's arms at once (Ray places them as accelerators free up); wait for all."""
    refs = {
        _arm_task.options(**resources).remote(
            plan.config, work.arm, work.cells, plan.resolved, plan.prompts_by_class,
            str(plan.store.root), plan.sweep_id, work.probe,
        ): work
        for work in stage
    }
    keys = {key for work in plan.work for _, key in work.cells}
    reports, waiting = [], list(refs)
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1, timeout=POLL_S)
        reports += [_report(refs[ref], ref) for ref in done]
        progress.update(plan.store, keys, label)
        raise_if_interrupted()
    return reports


_INTERRUPTED = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


@contextmanager
def ctrl_c_stops_the_sweep() -> Iterator[None]:
    """Ctrl-C ends the sweep even where a library swallows the KeyboardInterrupt (one raised
    inside ``ray.wait`` can be): the flag it sets is checked every poll and between stages."""
    _INTERRUPTED.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def raise_if_interrupted() -> None:
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt
