"""The sweep plan: stages in order, stable keys, resume skips complete cells and refuses a
changed fingerprint; aggregation reads gates from stored probes and samples from Parquet."""

from pathlib import Path

import pytest

from specfleet.decision_table import DecisionRow
from specfleet.errors import InputError
from specfleet.summary import run_status
from tasks.analysis.aggregate import aggregate
from tasks.plan.sweep_plan import SweepPlan, plan_sweep
from tasks.report.markdown import summary_markdown
from tasks.report.tables import COST_COLUMNS, markdown_table
from tests.unit.tasks.sweep_data import records, store_cell, write_config


def _plan(tmp_path: Path, resume: str | None = None) -> SweepPlan:
    return plan_sweep(tmp_path / "sweep.yaml", resume, tmp_path / "results")


def _measure(plan: SweepPlan, arms: set[str], phase: str = "main", gap_ms: int = 5) -> None:
    for key, ident in plan.cells.items():
        if ident.arm in arms and ident.phase == phase:
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=gap_ms))


def _probe(plan: SweepPlan, arm: str, tokens: list[int], repeat: bool = False) -> None:
    greedy = {"p0": tokens, "p1": [7, 8]}
    payload: dict[str, object] = {"arm": arm, "greedy": greedy} | ({"greedy_repeat": greedy} if repeat else {})
    plan.store.write_json(f"equivalence/{arm}.json", payload)


def test_new_sweep_plans_baseline_speculative_then_baseline_end(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    assert plan.sweep_id.startswith("unit-sweep-") and not plan.resumed
    assert (plan.store.dir / "sweep.json").is_file()
    stages = plan.stages()
    assert [label for label, _ in stages] == ["baseline", "speculative arms", "baseline (end)"]
    assert [w.arm.arm for _, work in stages for w in work] == ["baseline", "draft-k2", "baseline"]
    assert [w.probe for _, work in stages for w in work] == [True, True, False]
    assert len(plan.cells) == plan.pending_cells == 3
    assert _plan(tmp_path).cells.keys() == plan.cells.keys()  # keys are stable across sweeps


def test_resume_measures_only_missing_cells_and_reuses_probes(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    _measure(plan, {"baseline", "draft-k2"})
    _probe(plan, "baseline", [1, 2], repeat=True)
    resumed = _plan(tmp_path, plan.sweep_id)
    assert resumed.resumed and resumed.sweep_id == plan.sweep_id
    assert [(w.arm.arm, w.phase, w.probe) for w in resumed.work] == [("baseline", "baseline_end", False)]
    _measure(plan, {"baseline"}, phase="baseline_end")
    assert _plan(tmp_path, plan.sweep_id).work == []  # a finished sweep measures nothing


def test_resume_refuses_unknown_id_and_changed_draft(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    with pytest.raises(InputError, match="no sweep with this id"):
        _plan(tmp_path, "nope")
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(InputError, match="draft changed"):
        _plan(tmp_path, plan.sweep_id)


def test_aggregate_gates_decisions_and_failures(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    _measure(plan, {"baseline"}, gap_ms=5)
    _measure(plan, {"baseline"}, phase="baseline_end", gap_ms=5)
    _probe(plan, "baseline", [1, 2], repeat=True)
    _probe(plan, "draft-k2", [1, 3])  # diverges at position 1: the greedy gate fails
    summary = aggregate(plan, [])
    assert summary.cells_complete == 2 and summary.servers_started == 0
    assert summary.failed_cells == ["draft-k2 / code / c1 / greedy / r0: not measured"]
    assert run_status(summary) == "FAILED"
    assert not summary.gates["draft-k2"][0].passed
    assert summary.cost_table == []  # an unmeasured arm has no decision: it is listed as failed
    _measure(plan, {"draft-k2"}, gap_ms=4)
    summary = aggregate(plan, [])
    assert not summary.failed_cells and run_status(summary) == "FINISHED"
    row = summary.cost_table[0]
    assert row.reason_code == "gate_failed" and row.acceptance_rate == 0.75
    markdown = summary_markdown(summary)
    assert "| draft_model | 2 | code | c1 | 0.75 |" in markdown
    assert "greedy_exact_match FAILED" in markdown and "speculation adopted at no level" in markdown


def test_unmeasured_figures_print_as_na() -> None:
    unmeasured = dict.fromkeys(DecisionRow.model_fields)
    row = DecisionRow.model_validate(unmeasured | {
        "method": "ngram", "k": 3, "prompt_class": "chat", "concurrency": 4, "load_mode": "concurrency",
        "load_value": 4.0, "verdict": "reject", "reason_code": "baseline_not_usable", "reason": "no baseline",
        "engine": "vllm", "hardware": "cpu", "sampling": "greedy"})
    table = markdown_table([row], COST_COLUMNS)
    assert "| ngram | 3 | chat | c4 | n/a | n/a | n/a |" in table and "baseline_not_usable" in table
