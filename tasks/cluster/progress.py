"""A sweep's progress over its pending cells (``specfleet_tasks.progress``), advanced as cell files land in
the store, with the time left as the plan predicts it (``specfleet plan``'s estimate: calibrated
on the config's last finished sweep here, else the performance model's prior)."""

import time
from pathlib import Path

from specfleet.errors import InputError
from specfleet.planning.estimate import estimate_sweep
from specfleet.planning.replicas import slots
from specfleet_tasks.plan.budget import plan_timing, scored_items
from specfleet_tasks.plan.sweep_plan import ArmWork, SweepPlan
from specfleet_tasks.progress import JobProgress
from specfleet_tasks.store.results import ResultsStore


class CellProgress:
    """The sweep's pending cells: a bar in a terminal, a line per finished cell in a log."""

    def __init__(self, plan: SweepPlan) -> None:
        self.started = time.time()
        self.unpredicted: str | None = None
        """Why the plan cannot predict this sweep (its prior lacks the hardware or a model's config):
        the time left is then shown as not known, never guessed."""
        self.parallel = slots(plan.config)[0]
        self._predict(plan)
        self.done: set[str] = set()
        self.stage: str | None = None
        self.predicted_at_event = self._predicted_remaining_s()
        self.event_at = time.monotonic()
        self.job = JobProgress("sweep", plan.pending_cells, "cells", predicted=True)

    def _predict(self, plan: SweepPlan) -> None:
        self.work = list(plan.work)
        self.labels = {key: ident.label for work in plan.work for ident, key in work.cells}
        try:
            timing = plan_timing(plan)
            times = estimate_sweep(timing, plan.config, scored_items(plan))
        except InputError as err:
            self.unpredicted = str(err)
            self.cell_s: dict[str, float] = {}
            self.start_s: list[float] = []
        else:
            cell_s = times.cell_seconds()
            self.cell_s = {key: cell_s[ident] for work in plan.work for ident, key in work.cells}
            self.start_s = [timing.startup_s(work.arm) + (max(a.probe_s for a in times.arms if a.arm == work.arm)
                            if work.probe or work.quality_probe else 0.0) for work in plan.work]
            self.after_s = timing.after_stages_s()

    def replan(self, plan: SweepPlan) -> None:
        """The plan grew as the sweep ran (the k policy stage): its cells counted and predicted too."""
        self._predict(plan)
        self.job.grow(plan.pending_cells)
        self.predicted_at_event, self.event_at = self._predicted_remaining_s(), time.monotonic()

    def __enter__(self) -> "CellProgress":
        self.job.__enter__()
        self.job.update(0, "starting", self.predicted_at_event, line=None if self.unpredicted is None else
                        f"sweep: no predicted time left ({self.unpredicted})")
        return self

    def __exit__(self, *exc: object) -> None:
        self.job.__exit__(*exc)

    def update(self, store: ResultsStore, keys: set[str], stage: str) -> None:
        if stage != self.stage:
            self.stage = stage
            self.job.update(len(self.done), stage, self._remaining_now(), line=f"stage started: {stage}")
        finished = sorted((key for key in keys - self.done if _written_since(store.cell_path(key), self.started)),
                          key=lambda key: self.labels.get(key, key))
        for key in finished:
            self.done.add(key)
            self.predicted_at_event, self.event_at = self._predicted_remaining_s(), time.monotonic()
            self.job.update(len(self.done), stage, self.predicted_at_event,
                            line=f"cell {len(self.done)}/{self.job.total} finished: {self.labels.get(key, key)}")
        self.job.update(len(self.done), stage, self._remaining_now())

    def _remaining_now(self) -> float | None:
        if self.predicted_at_event is None:
            return None
        return max(0.0, self.predicted_at_event - (time.monotonic() - self.event_at))

    def _predicted_remaining_s(self) -> float | None:
        """The servers' predicted work left (a server with no cell finished yet still owes its start
        and probes), spread over the sweep's parallel slots, and the aggregation after them."""
        if self.unpredicted is not None:
            return None
        left = sum(self._left_s(work, start_s) for work, start_s in zip(self.work, self.start_s, strict=True))
        return left / self.parallel + self.after_s

    def _left_s(self, work: ArmWork, start_s: float) -> float:
        owed = [key for _, key in work.cells if key not in self.done]
        started = len(owed) < len(work.cells)
        return (0.0 if started else start_s) + sum(self.cell_s[key] for key in owed)


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False
