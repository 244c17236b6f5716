"""MLflow down: the sweep's tracker gives up in seconds and says how to catch up; `specfleet
sync` then logs the stored sweep to a real MLflow store (SQLite), idempotently."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from specfleet_cli.main import app
from specfleet_flows.tracker import SweepTracker
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.store.results import atomic_write_text
from tests.support.sweep_data import records, store_cell, write_config

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def stored_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SweepPlan:
    """A finished sweep in the results dir that MLflow never saw."""
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path)
    plan = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results")
    for key, ident in plan.cells.items():
        store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    summary = aggregate(plan, [])
    plan.store.write_json("summary.json", summary)
    atomic_write_text(plan.store.dir / "summary.md", summary_markdown(summary))
    return plan


def _specfleet(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env["PREFECT_HOME"] = str(cwd / "prefect-home")
    return subprocess.run([sys.executable, "-c", "from specfleet_cli.main import entry; entry()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_down_server_turns_logging_off_at_its_health_probe(stored_sweep: SweepPlan) -> None:
    """The /health probe, not MLflow's retrying client, finds the server down; later calls are skipped."""
    plan = stored_sweep
    tracker = SweepTracker(f"http://user:pw@127.0.0.1:{free_port()}", plan.sweep_id)
    tracker.open(plan.config, plan.fingerprint)
    reason = tracker.offline
    tracker.log_cells(list(plan.store.cells()), plan.store, plan.fingerprint.digest)
    tracker.close("FINISHED")
    assert tracker.parent_id is None and reason is not None and tracker.offline == reason
    assert "ConnectError on http://127.0.0.1:" in reason and "/health" in reason
    assert f"specfleet sync {plan.sweep_id}" in reason and "pw" not in reason


@pytest.mark.integration  # each `specfleet sync` starts Prefect's embedded server: not the unit tier
def test_sync_logs_a_stored_sweep_once(stored_sweep: SweepPlan, tmp_path: Path) -> None:
    plan = stored_sweep
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = _specfleet(tmp_path, "sync", plan.sweep_id, "--tracking-uri", uri, "--results-dir", "results")
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"sweep {plan.sweep_id}: 3 cell runs created, 0 already logged" in first.stdout
    second = _specfleet(tmp_path, "sync", plan.sweep_id, "--tracking-uri", uri, "--results-dir", "results")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 cell runs created, 3 already logged" in second.stdout

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(plan.config.name)
    assert experiment is not None
    parents = client.search_runs([experiment.experiment_id], "tags.run_kind = 'sweep'")
    cells = client.search_runs([experiment.experiment_id], "tags.run_kind = 'cell'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags["cell_key"] for c in cells) == sorted(plan.cells)
    assert "cost_table.json" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}


def test_sync_to_a_down_server_exits_2_in_one_line(stored_sweep: SweepPlan) -> None:
    """In this process: the refusal comes before the sync flow, so no Prefect server starts."""
    done = CliRunner().invoke(app, ["sync", stored_sweep.sweep_id, "--tracking-uri",
                                    f"http://127.0.0.1:{free_port()}", "--results-dir", "results"])
    assert done.exit_code == 2
    assert done.stderr.startswith("error: --tracking-uri http://127.0.0.1:") and "not reachable" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_sync_of_a_format_1_sweep_whose_config_is_gone_exits_2_in_one_line(stored_sweep: SweepPlan,
                                                                          tmp_path: Path) -> None:
    """A sweep.json written before it held the config (format 1, ce4142f) names only the config's path."""
    record = stored_sweep.store.dir / "sweep.json"
    stored = json.loads(record.read_text())
    record.write_text(json.dumps({"name": stored["name"], "config": str(tmp_path / "sweep.yaml"),
                                  "fingerprint": stored["fingerprint"]}))
    (tmp_path / "sweep.yaml").rename(tmp_path / "moved.yaml")
    done = CliRunner().invoke(app, ["sync", stored_sweep.sweep_id, "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}",
                                    "--results-dir", "results"])
    assert done.exit_code == 2 and done.stderr.strip() == (
        f"error: {stored_sweep.sweep_id}: written before sweep.json held its config (format 1), and its config "
        f"{tmp_path / 'sweep.yaml'} is not readable here")
    assert not (tmp_path / "m.db").exists()
