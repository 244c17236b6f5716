"""The sweep end to end: the Prefect flow, local Ray, MLflow on SQLite and real vLLM CPU
servers on the fixture models. One small sweep (baseline, draft_model k=2, ngram k=3, one
prompt class, concurrency 1) is shared by every assertion; then resume and revalidate."""

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
import typer
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run
from prefect import get_client
from prefect.artifacts import Artifact
from prefect.events.filters import EventFilter, EventNameFilter
from prefect.testing.utilities import prefect_test_harness
from typer.testing import CliRunner, Result

from cli.sweep import revalidate, sweep
from flows.revalidate import EVENT, revalidate_flow
from tests.integration.conftest import BASELINE_ARM, NGRAM_ARM, marked_processes, tiny_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV, KEY_VALUE = "SPECFLEET_IT_API_KEY", "sk-it-do-not-log-7f3a"
REQUIRED = {"ttft_ms_p95", "itl_ms_p95", "qualified_tokens_per_s", "output_tokens_per_s", "e2e_ms_p95"}
ACCEPTANCE = {"acceptance_rate", "mean_acceptance_length"}


def _app() -> typer.Typer:
    app = typer.Typer()
    for command in (sweep, revalidate):
        app.command()(command)
    return app


@dataclass
class Sweep:
    root: Path
    config: Path
    uri: str
    first: Result | None = None

    @property
    def sweep_id(self) -> str:
        assert self.first is not None
        return self.first.stdout.split("sweep id: ", 1)[1].split()[0]

    def cli(self, *args: str) -> Result:
        tail = ["--tracking-uri", self.uri, "--results-dir", str(self.root / "results")]
        return CliRunner().invoke(_app(), [*args, *tail])

    def runs(self, kind: str) -> list[Run]:
        client = MlflowClient(self.uri)
        experiment = client.get_experiment_by_name("it-sweep")
        assert experiment is not None
        return list(client.search_runs([experiment.experiment_id], f"tags.run_kind = '{kind}'"))


def _left_running() -> list[str]:
    """Processes this sweep started (Ray's raylet, GCS and workers, vLLM servers) still alive.
    They carry the test's API key variable in their environment; other sessions' never do."""
    return marked_processes(KEY_ENV, KEY_VALUE)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    with prefect_test_harness():
        yield


def _config(root: Path, draft: Path) -> Path:
    path = tiny_sweep_config(root / "it-sweep.yaml", "it-sweep",
                             [BASELINE_ARM, {"name": "draft", "method": "draft_model", "k": [2]}, NGRAM_ARM],
                             requests=6, warmup=1, max_tokens=32,
                             equivalence={"prompt_class": "code", "prompts": 3, "greedy_max_tokens": 16})
    data = yaml.safe_load(path.read_text())
    data["models"]["draft"]["path"] = str(draft)
    data["engine"]["api_key_env"] = KEY_ENV
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, prefect_api: None, fixture_models: dict[str, str]
           ) -> Iterator[Sweep]:
    root = tmp_path_factory.mktemp("sweep")
    draft = root / "draft"
    shutil.copytree(fixture_models["fixture:draft"], draft)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)  # MLflow's artifact root (./mlruns) lands in tmp, not the repo
        patch.setenv(KEY_ENV, KEY_VALUE)
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        run = Sweep(root, _config(root, draft), f"sqlite:///{root / 'mlflow.db'}")
        run.first = run.cli("sweep", str(run.config))
        assert run.first.exit_code == 0, run.first.output
        assert not ray.is_initialized() and _left_running() == []  # Ray shut down, every server stopped
        yield run


def test_one_parent_run_and_one_child_run_per_cell(swept: Sweep) -> None:
    parents, cells = swept.runs("sweep"), swept.runs("cell")
    assert len(parents) == 1 and parents[0].data.tags["sweep_id"] == swept.sweep_id
    assert parents[0].info.status == "FINISHED"
    assert len(cells) == 4  # baseline, draft-k2, ngram-k3, baseline again at the end
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parents[0].info.run_id}
    assert sorted(c.data.tags["arm"] for c in cells) == ["baseline", "baseline", "draft-k2", "ngram-k3"]
    for cell in cells:
        names = set(cell.data.metrics)
        assert names >= REQUIRED, cell.info.run_name
        speculative = cell.data.tags["method"] != "baseline"
        assert (names >= ACCEPTANCE) == speculative and (not ACCEPTANCE & names) == (not speculative)
        assert MlflowClient(swept.uri).list_artifacts(cell.info.run_id, "records")


def test_tables_on_the_parent_run_and_in_the_results_dir(swept: Sweep) -> None:
    parent = swept.runs("sweep")[0]
    artifacts = {a.path for a in MlflowClient(swept.uri).list_artifacts(parent.info.run_id)}
    assert {"cost_table.json", "negative_cells.json", "k_policy.json", "summary.md"} <= artifacts
    assert parent.data.params["arms.draft.k"] == "[2]"
    assert parent.data.tags["fingerprint.drafts"].count(str(swept.root / "draft")) == 1
    out = swept.root / "results" / swept.sweep_id
    assert (out / "summary.json").is_file() and "## Negative-result cells" in (out / "summary.md").read_text()
    assert swept.first is not None
    assert "Cost per million SLO-qualified tokens" in swept.first.stdout and "mlflow ui" in swept.first.stdout
    table, markdown = Artifact.get("it-sweep-cost-table"), Artifact.get("it-sweep-sweep-summary")
    assert table is not None and table.type == "table" and markdown is not None and markdown.type == "markdown"
    assert markdown.data is not None and swept.sweep_id in str(markdown.data)


def test_the_api_key_is_never_logged(swept: Sweep) -> None:
    """Every file the sweep wrote (results, per-request Parquet, server logs, MLflow's store and
    artifacts) and everything it printed, searched for the planted key."""
    written = [path for path in swept.root.rglob("*") if path.is_file()]
    assert any(path.suffix == ".log" for path in written) and any(path.suffix == ".parquet" for path in written)
    assert [path for path in written if KEY_VALUE.encode() in path.read_bytes()] == []
    assert swept.first is not None and KEY_VALUE not in swept.first.output


def test_resume_of_a_finished_sweep_starts_no_server(swept: Sweep) -> None:
    logs = swept.root / "results" / swept.sweep_id / "logs"
    before = {p.name: p.stat().st_mtime_ns for p in logs.iterdir()}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(swept.root)
        again = swept.cli("sweep", str(swept.config), "--resume", swept.sweep_id)
    assert again.exit_code == 0, again.output
    assert "0 servers started" in again.stdout and f"sweep id: {swept.sweep_id}" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in logs.iterdir()} == before
    assert len(swept.runs("cell")) == 4 and len(swept.runs("sweep")) == 1


def test_revalidate_check_sees_a_changed_draft(swept: Sweep) -> None:
    unchanged = swept.cli("revalidate", str(swept.config), "--check")
    assert unchanged.exit_code == 0, unchanged.output
    assert unchanged.stdout.strip().splitlines()[-1] == "unchanged"
    config = swept.root / "draft" / "config.json"
    config.write_text(config.read_text() + "\n")
    changed = swept.cli("revalidate", str(swept.config), "--check")
    assert changed.exit_code == 0, changed.output
    assert changed.stdout.strip().splitlines()[-1] == "changed: draft"


def test_revalidate_emits_the_trigger_event(swept: Sweep) -> None:
    """Runs after the draft changed (above); the watcher's run_sweep=False leaves the sweep to the trigger."""
    result = revalidate_flow(str(swept.config), run_sweep=False, tracking=swept.uri,
                             results_dir=str(swept.root / "results"))
    assert result.changed == ["draft"] and result.event_emitted and result.sweep is None
    wanted = EventFilter(event=EventNameFilter(name=[EVENT]))
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while not (events := client.read_events(wanted, limit=10).events) and time.monotonic() < deadline:
            time.sleep(1)
    assert events and events[0].payload["changed"] == ["draft"]
    assert events[0].resource.id == "specfleet.config.it-sweep"
