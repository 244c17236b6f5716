"""Running a sweep within a wall-clock budget (issue 18, "Run within a budget"). Pure, no I/O.

A ``CellBudget`` holds the deadline and the predictions (``specfleet_tasks.plan.budget.cell_budget`` makes
it). Cells run most decision-relevant first (``by_priority``); a cell starts only if it ``fits``:
its predicted time, plus the closing baseline's (``reserve_s``) unless it is itself a closing
baseline cell, ends by the deadline. A cell without a prediction does not fit: a budget is a
promise about the clock, and a cell nobody can time could break it. Cells in flight always finish.
A closing baseline cell whose opening twin was measured always starts (``bracket_keys``): the
opening and closing baseline bracket the sweep, so drift enters the noise floor. A speculative cell
whose configuration's opening baseline was not measured never starts (``unbaselined``): its
decision could only be ``baseline_not_usable``. A cell that does not start is ``NotMeasured``:
listed apart, never read by a decision.
"""

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from specfleet.contract import BudgetSpec, CellIdentity, SweepConfig
from specfleet.contract.base import RecordModel
from specfleet.contract.durations import duration_flag
from specfleet.contract.workload import AdaptiveStoppingSpec, LoadSpec

BUDGET_HALF_WIDTH = 0.1
"""Adaptive stopping's target under a budget when the config sets none: both decision statistics
known to within 10 % of their estimate."""
Item = TypeVar("Item")


@dataclass(frozen=True)
class CellBudget:
    deadline_unix_s: float
    """Wall-clock time by which no new cell may start unless it fits."""
    reserve_s: float
    """Predicted time of the closing baseline stage (its server start included), kept back."""
    cell_s: Mapping[str, float]
    """Predicted seconds per cell key; a key without one does not fit."""
    priority: Mapping[str, float]
    """Per cell key, lower runs first; a key without one runs last."""
    server_start_s: Mapping[str, float] = field(default_factory=dict)
    """Predicted start-up and probe seconds per arm (``ArmPlan.arm``); missing: 0."""
    twin_s: Mapping[str, float] = field(default_factory=dict)
    """Per opening baseline cell key, its closing twin's predicted seconds: an opening cell starts
    only if its twin fits too (the reserve then holds it; ``reserve_s`` holds those measured before)."""
    blocked: Mapping[str, str] = field(default_factory=dict)
    """Per cell key, why it may not start whatever the clock says: a speculative cell whose opening
    baseline cell (same class, load and sampling) was not measured (``unbaselined``)."""


class NotMeasured(RecordModel):
    """A planned cell the budget did not start."""

    identity: CellIdentity
    key: str
    reason: Literal["budget"] = "budget"
    detail: str

    @property
    def label(self) -> str:
        return self.identity.label


def seconds_left(budget: CellBudget, now_unix_s: float, closing: bool, committed_s: float = 0.0) -> float:
    """Time a cell starting now may take: to the deadline, less the reserve (and ``committed_s``, the
    twins of opening cells measured since the budget was made) unless ``closing``."""
    return budget.deadline_unix_s - now_unix_s - (0.0 if closing else budget.reserve_s + committed_s)


def cell_cost_s(budget: CellBudget, key: str) -> float | None:
    """A cell's predicted seconds with its closing twin's (an opening baseline cell); None: no prediction."""
    predicted = budget.cell_s.get(key)
    return None if predicted is None else predicted + budget.twin_s.get(key, 0.0)


def fits(budget: CellBudget, key: str, now_unix_s: float, closing: bool, committed_s: float = 0.0) -> bool:
    """May cell ``key`` start at ``now_unix_s``? ``closing``: it is a closing baseline cell."""
    predicted = cell_cost_s(budget, key)
    return (key not in budget.blocked and predicted is not None
            and predicted <= seconds_left(budget, now_unix_s, closing, committed_s))


def not_measured(budget: CellBudget, identity: CellIdentity, key: str, now_unix_s: float, closing: bool,
                 start_s: float = 0.0, committed_s: float = 0.0) -> NotMeasured:
    """The record of a cell that did not fit at ``now_unix_s`` (after a server start of ``start_s``
    when its server is not up yet), with the figures that say why."""
    if key in budget.blocked:
        return NotMeasured(identity=identity, key=key, detail=budget.blocked[key])
    predicted = cell_cost_s(budget, key)
    left = max(0.0, seconds_left(budget, now_unix_s, closing, committed_s))
    after = f" after a {math.ceil(start_s)} s server start" if start_s > 0 else ""
    detail = ("no predicted time for this cell" if predicted is None
              else f"predicted {math.ceil(predicted)} s{after}, {math.floor(left)} s left")
    return NotMeasured(identity=identity, key=key, detail=detail)


def by_priority(budget: CellBudget, items: Iterable[Item], key: Callable[[Item], str]) -> list[Item]:
    """``items`` most decision-relevant first (lower priority first, unranked last, ties in order)."""
    return sorted(items, key=lambda item: budget.priority.get(key(item), math.inf))


def bracket_keys(closing: Iterable[tuple[CellIdentity, str]], measured: Iterable[CellIdentity]) -> frozenset[str]:
    """Keys of the ``closing`` baseline cells whose opening twin (same cell, phase main) was measured."""
    opening = {ident for ident in measured if ident.phase == "main"}
    return frozenset(key for ident, key in closing if ident.model_copy(update={"phase": "main"}) in opening)


def budget_stopping(load: LoadSpec) -> AdaptiveStoppingSpec | None:
    """The config's own adaptive stopping, else a cell stops at ``BUDGET_HALF_WIDTH`` and never
    measures more than ``requests_per_cell``: a budget shortens cells, it never lengthens one
    (a cell of one request has nothing to stop early: None)."""
    most = load.requests_per_cell
    if load.adaptive_stopping is not None or most < 2:
        return load.adaptive_stopping
    return AdaptiveStoppingSpec(relative_half_width=BUDGET_HALF_WIDTH, min_requests=min(most, max(2, most // 4)),
                                max_requests=most)


def budgeted(config: SweepConfig, flag: str | None) -> SweepConfig:
    """The config a sweep runs: under a budget (``--budget`` over the config's block) adaptive
    stopping is on; without one, ``config`` as it is. A bad ``flag`` is an ``InputError``."""
    budget = config.budget
    if flag is not None:
        duration_flag("--budget", flag)
        budget = BudgetSpec(duration=flag)
    if budget is None:
        return config
    load = config.load.model_copy(update={"adaptive_stopping": budget_stopping(config.load)})
    return config.model_copy(update={"budget": budget, "load": load})


BLOCKED_NO_BASELINE = ("its opening baseline cell (same class, load and sampling) was not measured: its decision "
                       "could only be baseline_not_usable")


def unbaselined(pending: Iterable[tuple[CellIdentity, str]], measured: Iterable[CellIdentity]) -> dict[str, str]:
    """Keys of the ``pending`` speculative cells whose configuration (class, load, sampling) has no
    measured opening baseline cell, each with why it may not start. One measured but not usable
    (a saturated client) does not block: its closing twin still runs and can be the baseline."""
    opened = {(i.prompt_class, i.load_mode, i.load_value, i.sampling) for i in measured
              if i.method == "baseline" and i.phase == "main"}
    return {key: BLOCKED_NO_BASELINE for ident, key in pending if ident.method != "baseline"
            and (ident.prompt_class, ident.load_mode, ident.load_value, ident.sampling) not in opened}
