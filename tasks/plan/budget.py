"""A sweep plan's ``CellBudget``: the deadline, the closing baseline's reserve, and each pending
cell's predicted seconds and priority (``specfleet.planning.budget`` says how a sweep uses them).

The times are ``specfleet plan``'s (``specfleet.planning.estimate``): calibrated on the sweep itself
when it is resumed or continued with usable cells, else on the newest earlier finished sweep of
its config (servers' start-up from their records); the performance model's cold-start prior
otherwise. The reserve is the closing stage (its servers' slowest recorded start, the twins of the
opening cells measured) and the time after it (aggregation). The order is ``specfleet.planning.priority``'s.
"""

from specfleet.errors import InputError
from specfleet.planning.budget import CellBudget, unbaselined
from specfleet.planning.estimate import estimate_sweep, stage_wall_s
from specfleet.planning.priority import cell_order
from specfleet.planning.replicas import slots
from specfleet.planning.timing import CalibratedTiming, PriorTiming
from specfleet_tasks.plan.estimate import calibrated_timing, prior_timing
from specfleet_tasks.plan.preflight import config_base_dir
from specfleet_tasks.plan.sweep_plan import SweepPlan, planned_cells
from specfleet_tasks.store.sweep import StoredSweep, stored_sweeps


def plan_timing(plan: SweepPlan) -> PriorTiming | CalibratedTiming:
    """Calibrated on the sweep's own cells when it is resumed with usable ones, else on the newest of
    the three latest finished sweeps of its config that has usable cells, else the prior. The
    start-ups of all of them bound the budget's (``CalibratedTiming.startup_high_s``)."""
    prior = prior_timing(plan.config, config_base_dir(plan.config_path))
    earlier = [s for s in stored_sweeps(plan.store.root, plan.config.name)
               if s.id != plan.sweep_id and s.aggregated][:3]
    candidates = ([StoredSweep(plan.store.dir, config=plan.config)] if plan.resumed else []) + earlier
    history = [s.summary for s in candidates if s.summary is not None]
    for sweep in candidates:
        try:
            return calibrated_timing(sweep, prior, history)
        except InputError:  # nothing usable to calibrate on
            continue
    return prior


def scored_items(plan: SweepPlan) -> dict[str, int]:
    """Held-out items per prompt class (what the quality probe's predicted time reads)."""
    return {name: len(s.items) for name, s in plan.scored_sets.items() if s is not None}


def cell_budget(plan: SweepPlan, budget_s: float, started_unix_s: float) -> CellBudget:
    """The budget of ``plan``'s pending cells for a sweep that started at ``started_unix_s``."""
    timing = plan_timing(plan)
    times = estimate_sweep(timing, plan.config, scored_items(plan), budget_s)
    seconds = times.cell_seconds()
    pending = {ident: key for work in plan.work for ident, key in work.cells}
    high = timing.cell_high_scale()  # a cell counts at its slow end, so an overrun is rare (docs/performance-model.md)
    cell_s = {key: seconds[ident] * high for ident, key in pending.items() if ident in seconds}
    start_s: dict[str, float] = {}
    for server in times.arms:  # an arm's first server runs the probes: the longest start
        start_s[server.arm.arm] = max(start_s.get(server.arm.arm, 0.0),
                                      timing.startup_high_s(server.arm) + server.probe_s)
    # An opening baseline cell starts only with room for its closing twin (twin_s); the reserve holds
    # the closing servers' start and the twins of opening cells already measured. The aggregation after
    # the closing stage is reserved too (``after_stages_s``).
    complete = plan.store.complete_keys()
    opening_key = {ident: key for _, _, _, owed in planned_cells(plan.config, plan.fingerprint.digest)
                   for ident, key in owed if ident.phase == "main" and ident.method == "baseline"}
    twin_s = {opening_key[twin]: cell_s[key] for ident, key in pending.items() if ident.phase == "baseline_end"
              and (twin := ident.model_copy(update={"phase": "main"})) in opening_key
              and opening_key[twin] not in complete and key in cell_s}
    closing = [timing.startup_high_s(server.arm) + sum(cell_s.get(pending[c], 0.0) for c in owed
                                      if opening_key.get(c.model_copy(update={"phase": "main"})) in complete)
               for server in times.arms if server.stage == "closing baseline"
               if (owed := [c for c in server.cells if c in pending])]
    noise = timing.calibration.noise_floor if isinstance(timing, CalibratedTiming) else None
    decided = StoredSweep(plan.store.dir, config=plan.config).decided_before()
    order = cell_order(timing, plan.config, [(work.arm, ident) for work in plan.work for ident, _ in work.cells], noise,
                       decided)
    reserve_s = stage_wall_s(closing, slots(plan.config)[0]) + timing.after_stages_s()
    measured = (cell.identity for cell in plan.store.cells() if cell.key in complete)
    return CellBudget(deadline_unix_s=started_unix_s + budget_s, reserve_s=reserve_s, twin_s=twin_s,
                      cell_s=cell_s, priority={pending[ident]: float(rank) for rank, ident in enumerate(order)},
                      server_start_s=start_s, blocked=unbaselined(pending.items(), measured))
