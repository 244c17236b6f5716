"""MLflow on SQLite in tmp_path: one parent per sweep (reused on resume), one child per cell
(logged once, replaced when re-measured), tables on the parent, the last finished sweep."""

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.tracking.runs import (
    close_sweep_run,
    last_validated,
    log_cell_runs,
    log_sweep_summary,
    open_sweep_run,
)
from tests.support.sweep_data import records, store_cell, write_config


def test_parent_children_tables_and_last_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns
    monkeypatch.setenv("SECRET_KEY_VAR", "sk-unit-secret")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_config(tmp_path, secret_env="SECRET_KEY_VAR")
    plan = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results")
    cells = [store_cell(plan.store, plan.config, ident, key, records(gap_ms=5)) for key, ident in plan.cells.items()]

    parent = open_sweep_run(uri, plan.config, plan.sweep_id, plan.fingerprint)
    assert open_sweep_run(uri, plan.config, plan.sweep_id, plan.fingerprint) == parent  # resume: same parent
    assert last_validated(uri, "unit-sweep") is None
    assert log_cell_runs(uri, parent, cells, plan.store, plan.fingerprint.digest) == 3
    assert log_cell_runs(uri, parent, cells, plan.store, plan.fingerprint.digest) == 0
    again = store_cell(plan.store, plan.config, cells[0].identity, cells[0].key, records(gap_ms=6))
    assert log_cell_runs(uri, parent, [again.model_copy(update={"started_at": "later"})], plan.store,
                            plan.fingerprint.digest) == 1
    summary = aggregate(plan, [])
    log_sweep_summary(uri, parent, summary, summary_markdown(summary))
    log_sweep_summary(uri, parent, summary, summary_markdown(summary))  # a resume replaces, not appends
    close_sweep_run(uri, parent, "FINISHED")

    client = MlflowClient(uri)
    run = client.get_run(parent)
    assert run.data.tags["sweep_id"] == plan.sweep_id and run.data.tags["fingerprint"] == plan.fingerprint.digest
    assert run.data.params["arms.draft.k"] == "[2]" and run.data.metrics["cells_complete"] == 3
    artifacts = {a.path for a in client.list_artifacts(parent)}
    assert artifacts >= {"cost_table.json", "summary.json", "summary.md"}  # each figure once: no copies beside them
    assert not artifacts & {"negative_cells.json", "decisions.json", "k_policy.json"}
    children = client.search_runs([run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(c.data.tags["cell_key"] for c in children) == sorted(plan.cells)
    assert all(c.data.metrics.keys() >= {"ttft_ms_p95", "itl_ms_p95", "qualified_tokens_per_s"} for c in children)
    assert all([a.path for a in client.list_artifacts(c.info.run_id, "records")] for c in children)
    table = json.loads(Path(client.download_artifacts(parent, "cost_table.json", str(tmp_path))).read_text())
    assert len(table["data"]) == len(summary.cost_table) == 1
    assert last_validated(uri, "unit-sweep") == (plan.sweep_id, plan.fingerprint)
    assert "sk-unit-secret" not in (tmp_path / "mlflow.db").read_bytes().decode("latin-1")
