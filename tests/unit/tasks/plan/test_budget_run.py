"""A budgeted sweep without an engine: an arm none of whose cells fits never starts its server,
and the aggregate lists the cells the budget left out apart from the measured ones, each beside
its prediction (PREDICTED), while decisions treat them as missing (the verdict at the mix says PARTIAL)."""

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specfleet.planning.budget import CellBudget, NotMeasured
from specfleet.planning.estimate import estimate_sweep
from specfleet.planning.timing import CalibratedTiming
from specfleet.report.sweep_report import SweepReport, run_status
from specfleet.results import ArmTiming
from specfleet_cli.render import print_sweep_summary
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.arm.lifecycle import run_arm
from specfleet_tasks.cluster.stage import ArmReport
from specfleet_tasks.fixtures.build import fixture_architecture
from specfleet_tasks.plan.budget import cell_budget, plan_timing, scored_items
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from tests.support.sweep_data import records, store_cell, write_config


def _plan(tmp_path: Path, resume: str | None = None) -> SweepPlan:
    """The unit config at concurrency 1 and 2, its stand-in models shaped like the fixture models
    (what the plan's prior reads), under a budget."""
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace("concurrency: [1]", "concurrency: [1, 2]"))
    for model in ("target", "draft"):
        (tmp_path / model / "config.json").write_text(json.dumps(fixture_architecture(model)))
    return plan_sweep(config, resume, tmp_path / "results", "1h")


def test_the_budget_times_every_pending_cell_and_keeps_the_closing_baseline_back(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    budget = cell_budget(plan, 3600, 1000.0)
    pending = {key: ident for work in plan.work for ident, key in work.cells}
    assert budget.deadline_unix_s == 4600.0 and set(budget.cell_s) == set(budget.priority) == set(pending)
    closing_s = sum(budget.cell_s[key] for key, ident in pending.items() if ident.phase == "baseline_end")
    # the closing start and the time after the stages (the prior's): no opening cell measured yet
    assert budget.reserve_s <= budget.server_start_s["baseline"] + 20.0
    assert sum(budget.twin_s.values()) == pytest.approx(closing_s)  # each opening cell carries its closing twin
    assert set(budget.server_start_s) == {"baseline", "draft-k2"} and min(budget.server_start_s.values()) > 0
    ranked = sorted(pending, key=budget.priority.__getitem__)
    assert [pending[key].arm for key in ranked[:2]] == ["baseline", "baseline"]  # every decision needs it
    for key, ident in pending.items():
        if ident.arm == "baseline" and ident.phase == "main":
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    resumed = cell_budget(_plan(tmp_path, plan.sweep_id), 3600, 1000.0)  # calibrated on its own cells now
    assert set(resumed.cell_s) == {key for key, ident in pending.items()
                                   if ident.arm != "baseline" or ident.phase != "main"}


def test_a_calibrated_budget_counts_on_the_slowest_start_and_the_longest_time_after_the_stages(
        tmp_path: Path) -> None:
    """Two earlier finished sweeps of the config: the budget calibrates on the newer, and counts
    on the slower baseline start and the longer time after the stages of either."""
    for startup_s, after_s in ((71.0, 9.0), (52.0, 6.5)):  # older first
        earlier = _plan(tmp_path)
        for key, ident in earlier.cells.items():
            store_cell(earlier.store, earlier.config, ident, key, records(gap_ms=5 if ident.k is None else 4))
        timing = ArmTiming(startup_s=startup_s, probe_s=0.0, wall_s=startup_s + 10, server_starts=1)
        reports = [ArmReport(arm="baseline", phase=phase, cells=[], error=None, timing=timing)
                   for phase in ("main", "baseline_end")]
        earlier.store.write_json("summary.json", aggregate(earlier, reports).model_copy(
            update={"wall_s": 2 * startup_s + 40, "after_stages_s": after_s}))
    budget = cell_budget(_plan(tmp_path), 3600, 1000.0)
    assert 71.0 < budget.server_start_s["baseline"] < 72.0  # the slower start (and the probes), not the newer's 52
    assert budget.reserve_s == pytest.approx(71.0 + 9.0)  # no opening cell measured: no twin owed yet


def test_a_calibrated_plan_counts_the_machines_median_start_not_a_first_one_that_compiled(tmp_path: Path) -> None:
    """The calibration sweep's opening baseline server compiled kernels (71 s, its closing one 37 s):
    with three starts of the arm's models recorded on this machine the plan counts their median, with
    fewer the sweep's own mean per start; the budget still counts on the slowest."""
    earlier = _plan(tmp_path)
    for key, ident in earlier.cells.items():
        store_cell(earlier.store, earlier.config, ident, key, records(gap_ms=5 if ident.k is None else 4))
    reports = [ArmReport(arm="baseline", phase=phase, cells=[], error=None,
                         timing=ArmTiming(startup_s=startup_s, probe_s=0.0, wall_s=startup_s + 10, server_starts=1))
               for phase, startup_s in (("main", 71.0), ("baseline_end", 37.0))]
    earlier.store.write_json("summary.json", aggregate(earlier, reports).model_copy(
        update={"wall_s": 160.0, "after_stages_s": 5.0}))
    plan = _plan(tmp_path)
    timing = plan_timing(plan)
    assert isinstance(timing, CalibratedTiming)
    base = next(work.arm for work in plan.work if work.arm.arm == "baseline")

    def recorded(*starts_s: float) -> CalibratedTiming:
        return replace(timing, prior=replace(timing.prior, recorded_startups_s={"baseline": list(starts_s)}))

    assert recorded(71.0, 37.0).startup_s(base) == pytest.approx(54.0)  # two recorded: the sweep's mean
    assert recorded(71.0, 37.0, 35.0).startup_s(base) == 37.0
    assert recorded(71.0, 37.0, 35.0).startup_high_s(base) == 71.0


def test_an_arm_none_of_whose_cells_fits_starts_no_server(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    work = next(w for w in plan.work if w.arm.arm == "draft-k2")
    keys = [key for _, key in work.cells]
    spent = CellBudget(deadline_unix_s=time.time() + 100, reserve_s=50, cell_s=dict.fromkeys(keys, 30),
                       priority={keys[-1]: 0}, server_start_s={"draft-k2": 25})
    outcome = run_arm(plan.config, work.arm, work.cells, plan.resolved, plan.prompts_by_class, plan.store,
                      budget=spent)
    assert outcome.timing.server_starts == 0 and outcome.error is None and outcome.cells == []
    assert [s.key for s in outcome.not_measured] == [keys[-1], *keys[:-1]]  # by priority, unranked last
    for skipped in outcome.not_measured:
        assert re.fullmatch(r"predicted 30 s after a 25 s server start, 4\d s left", skipped.detail), skipped
    assert not (plan.store.dir / "logs").exists()  # no server log: nothing was started


def test_not_measured_cells_are_listed_apart_with_predictions_and_decide_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(tmp_path)
    skipped = []
    for key, ident in plan.cells.items():
        if ident.arm == "draft-k2" and ident.load_value == 2:
            skipped.append(NotMeasured(identity=ident, key=key, detail="predicted 81 s, 70 s left"))
        else:
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=5 if ident.k is None else 4))
    summary = aggregate(plan, [ArmReport(arm="draft-k2", phase="main", cells=[], error=None, timing=None,
                                         not_measured=skipped)])
    assert summary.failed_cells == [] and run_status(summary) == "FINISHED"
    assert summary.cells_complete == len(plan.cells) - 1
    [cell] = summary.not_measured
    assert (cell.label, cell.reason, cell.detail) == ("draft-k2 / code / c2 / greedy / r0", "budget",
                                                      "predicted 81 s, 70 s left")
    assert cell.prediction is not None, cell.prediction_note
    assert cell.prediction.predicted and cell.prediction.measured_cell is False
    assert (cell.prediction.arm, cell.prediction.load_value) == ("draft-k2", 2.0)
    assert [d.slice.load_value for d in summary.decisions] == [1.0]  # the left-out cell decides nothing
    assert summary.mix and {v.headline.split(":")[0] for v in summary.mix} == {"PARTIAL (covers 50.0% of the mix)"}
    stored = SweepReport.model_validate(json.loads(summary.model_dump_json()))
    assert stored.not_measured == summary.not_measured
    markdown = summary_markdown(summary)
    section = markdown.split("## Not measured (1 cell): the budget did not start them; --continue measures them; "
                             "never in a decision\n", 1)[1]
    assert "- draft-k2 / code / c2 / greedy / r0: budget: predicted 81 s, 70 s left; PREDICTED, not measured: " \
           "qualified tokens/s" in section
    assert ", 1 not measured (budget)" in markdown
    print_sweep_summary(summary, "sqlite:///mlflow.db")
    printed = capsys.readouterr().out
    assert "Not measured (1 cell): the budget did not start them" in printed and "draft-k2 / code / c2" in printed


def test_without_a_calibration_the_prediction_is_null_with_the_reason(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    skipped = [NotMeasured(identity=ident, key=key, detail="predicted 81 s, 70 s left")
               for key, ident in plan.cells.items()]
    summary = aggregate(plan, [ArmReport(arm="baseline", phase="main", cells=[], error=None, timing=None,
                                         not_measured=skipped)])
    assert summary.failed_cells == [] and summary.cells_complete == 0 and summary.decisions == []
    assert {(c.prediction, c.prediction_note) for c in summary.not_measured} == {
        (None, f"{plan.sweep_id}: no usable cell with per-request records to calibrate on")}
    assert "; no prediction: " in summary_markdown(summary)


def test_an_arm_left_out_entirely_is_predicted_from_the_newest_earlier_sweep_of_its_config(tmp_path: Path) -> None:
    earlier = _plan(tmp_path)
    for key, ident in earlier.cells.items():
        store_cell(earlier.store, earlier.config, ident, key, records(gap_ms=5 if ident.k is None else 4))
    earlier.store.write_json("summary.json", aggregate(earlier, []))  # a finished sweep
    plan = _plan(tmp_path)
    assert plan.sweep_id != earlier.sweep_id
    skipped = []
    for key, ident in plan.cells.items():
        if ident.arm == "draft-k2":
            skipped.append(NotMeasured(identity=ident, key=key, detail="predicted 81 s, 70 s left"))
        else:
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    summary = aggregate(plan, [ArmReport(arm="draft-k2", phase="main", cells=[], error=None, timing=None,
                                         not_measured=skipped)])
    assert len(summary.not_measured) == len(skipped) > 0
    for cell in summary.not_measured:  # the sweep itself has no draft cell to fit the arm's step time on
        assert cell.prediction is not None, cell.prediction_note
        assert cell.prediction.calibrated_on == earlier.sweep_id and cell.prediction.predicted


def test_a_calibrated_budget_counts_each_cell_at_its_slow_end_and_blocks_cells_without_a_baseline(
        tmp_path: Path) -> None:
    """Issue 32: each cell at the step law's upper bound (never below its point prediction), and no
    speculative cell may start before its configuration's opening baseline was measured."""
    earlier = _plan(tmp_path)
    for key, ident in earlier.cells.items():
        store_cell(earlier.store, earlier.config, ident, key, records(gap_ms=5 if ident.k is None else 4))
    earlier.store.write_json("summary.json", aggregate(earlier, []))
    plan = _plan(tmp_path)
    timing = plan_timing(plan)
    assert isinstance(timing, CalibratedTiming)
    scale = timing.cell_high_scale()
    assert scale >= 1.0
    point = estimate_sweep(timing, plan.config, scored_items(plan)).cell_seconds()
    budget = cell_budget(plan, 3600, 1000.0)
    pending = {key: ident for work in plan.work for ident, key in work.cells}
    for key, ident in pending.items():
        assert budget.cell_s[key] == pytest.approx(point[ident] * scale)
    assert set(budget.blocked) == {key for key, ident in pending.items() if ident.method != "baseline"}
    for key, ident in pending.items():
        if ident.arm == "baseline" and ident.phase == "main" and ident.load_value == 1:
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    blocked = cell_budget(plan, 3600, 1000.0).blocked
    assert {pending[key].load_value for key in blocked} == {2.0}  # c1's baseline is measured now
