"""A sweep that is killed, interrupted and cut off from MLflow, as a night can go wrong:

1. the orchestrator is SIGKILLed after its first cell (no handler runs): what finished is
   intact, nothing is half-written, and no Ray or vLLM process outlives it;
2. ``--resume`` measures only what is missing and is interrupted with Ctrl-C (SIGINT):
   exit 130, servers stopped, partial results kept;
3. ``--resume`` finishes the rest without re-measuring anything, all the while with the
   MLflow server down: the results dir holds everything, and the summary says how to sync;
4. ``specfleet sync`` logs the sweep to MLflow once it is back (here: a SQLite store).

The night's commands report to the session's Prefect server, as a scheduled sweep does; the
sweep whose servers never start uses Prefect's embedded server, as ``make demo`` does. Every
process a sweep starts carries a marker variable, so the test finds exactly its own.

What is checked here is the orchestrator's (signals, resume, the results store, sync), so the arms
run on the stand-in engine (``tasks/engine/standin.py``), which starts in about a second; its
100 ms steps keep each of the three cells over a second long, so a signal sent within the test's
0.3 s poll of a stored cell lands before the next cell is stored. What a vLLM server does when
killed mid-cell is checked on a real one (``test_measurement_vllm.py``)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from specfleet_tasks.engine.ports import free_port
from tests.integration.processes import marked_processes
from tests.integration.services import PrefectServer
from tests.integration.sweep_configs import BASELINE_ARM, NGRAM_ARM, standin_env, tiny_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
MARKER, MARKER_VALUE = "SPECFLEET_IT_FAULTS", "faults-7c1e"
CELLS = 3  # the baseline at the start, ngram k=3, the baseline again at the end


def _config(root: Path) -> Path:
    return tiny_sweep_config(root / "faults.yaml", "it-faults", [BASELINE_ARM, NGRAM_ARM])


def left_running() -> list[str]:
    return marked_processes(MARKER, MARKER_VALUE, grace_s=60.0)


@dataclass
class Night:
    root: Path
    config: Path
    down_uri: str
    prefect: PrefectServer | None
    sweep_id: str = ""

    @property
    def cells_dir(self) -> Path:
        return self.root / "results" / self.sweep_id / "cells"

    def start(self, *args: str, tracking: str | None = None) -> "Command":
        """The CLI in its own process, its output in a file (a pipe nobody reads would block it)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_", "RAY_"))}
        env |= {MARKER: MARKER_VALUE, "PREFECT_HOME": str(self.root / "prefect-home"), **standin_env()}
        if self.prefect is not None:
            env["PREFECT_API_URL"] = self.prefect.api_url
        command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", *args,
                   "--tracking-uri", tracking or self.down_uri, "--results-dir", str(self.root / "results")]
        log = self.root / f"command-{time.monotonic_ns()}.log"
        with log.open("w") as out:
            process = subprocess.Popen(command, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT)
        return Command(process, log)

    def stored(self) -> dict[str, str]:
        """cell key -> started_at of every stored cell."""
        return {p.stem: json.loads(p.read_text())["started_at"] for p in self.cells_dir.glob("*.json")}


@dataclass
class Command:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, condition: Callable[[], bool], timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.process.poll() is None, f"the sweep ended early:\n{self.output[-4000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for the sweep:\n{self.output[-4000:]}"
            time.sleep(0.3)

    def finish(self, timeout_s: float = 600.0) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"overran:\n{self.output[-4000:]}") from None
        return code, self.output


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory, fixture_models: dict[str, str], prefect_api: PrefectServer
          ) -> Night:
    root = tmp_path_factory.mktemp("night")
    return Night(root, _config(root), f"http://127.0.0.1:{free_port()}", prefect_api)


@pytest.fixture(scope="module")
def killed(night: Night) -> dict[str, str]:
    """Step 1: SIGKILL the orchestrator once its first cell is stored."""
    command = night.start("sweep", str(night.config))
    command.wait_for(lambda: "sweep id: " in command.output)
    night.sweep_id = command.output.split("sweep id: ", 1)[1].split()[0]
    command.wait_for(lambda: any(night.cells_dir.glob("*.json")))
    command.process.send_signal(signal.SIGKILL)
    assert command.finish()[0] == -signal.SIGKILL
    return night.stored()


def test_a_killed_orchestrator_leaves_whole_files_and_no_processes(night: Night, killed: dict[str, str]) -> None:
    assert left_running() == []
    sweep = night.root / "results" / night.sweep_id
    assert len(killed) >= 1 and not (sweep / "summary.json").exists()
    assert [p for p in sweep.rglob("*") if p.name.endswith(".tmp")] == []
    for path in night.cells_dir.glob("*.json"):
        assert json.loads(path.read_text())["status"] != "failed"


@pytest.fixture(scope="module")
def interrupted(night: Night, killed: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    """Step 2: resume, then Ctrl-C once a new cell is stored."""
    command = night.start("sweep", str(night.config), "--resume", night.sweep_id)
    command.wait_for(lambda: len(night.stored()) > len(killed))
    command.process.send_signal(signal.SIGINT)
    code, output = command.finish(timeout_s=180)
    return code, output, night.stored()


def test_ctrl_c_stops_the_servers_keeps_results_and_exits_130(
    night: Night, killed: dict[str, str], interrupted: tuple[int, str, dict[str, str]]
) -> None:
    code, output, stored = interrupted
    assert code == 130, output[-4000:]
    assert "interrupted" in output and "Traceback" not in output
    assert left_running() == []
    assert {key: stored[key] for key in killed} == killed  # nothing finished was measured again


@pytest.fixture(scope="module")
def finished(night: Night, interrupted: tuple[int, str, dict[str, str]]) -> tuple[int, str, dict[str, str]]:
    """Step 3: resume to the end with MLflow still down."""
    code, output = night.start("sweep", str(night.config), "--resume", night.sweep_id).finish()
    return code, output, night.stored()


def test_resume_finishes_only_what_is_missing_without_mlflow(
    night: Night, interrupted: tuple[int, str, dict[str, str]], finished: tuple[int, str, dict[str, str]]
) -> None:
    code, output, stored = finished
    assert code == 0, output[-4000:]
    before = interrupted[2]
    assert len(stored) == CELLS and {key: stored[key] for key in before} == before
    summary = json.loads((night.root / "results" / night.sweep_id / "summary.json").read_text())
    assert summary["cells_complete"] == CELLS
    assert all(json.loads(p.read_text())["engine_version"].endswith("+standin") for p in night.cells_dir.glob("*.json"))
    assert any(f"specfleet sync {night.sweep_id}" in note for note in summary["notes"])
    assert f"specfleet sync {night.sweep_id}" in output
    assert left_running() == []


def test_sync_logs_the_night_once_mlflow_is_back(night: Night, finished: tuple[int, str, dict[str, str]]) -> None:
    uri = f"sqlite:///{night.root / 'mlflow.db'}"
    for created in (CELLS, 0):
        code, output = night.start("sync", night.sweep_id, tracking=uri).finish(timeout_s=300)
        assert code == 0, output[-4000:]
        assert f"{created} cell runs created" in output
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("it-faults")
    assert experiment is not None
    parents = client.search_runs([experiment.experiment_id], "tags.run_kind = 'sweep'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(client.search_runs([experiment.experiment_id], "tags.run_kind = 'cell'")) == CELLS


def test_servers_that_never_start_fail_their_cells_and_the_sweep_exits_3(
    tmp_path: Path, fixture_models: dict[str, str]
) -> None:
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["engine"]["extra_args"] = ["--no-such-flag"]
    config.write_text(yaml.safe_dump(data))
    night = Night(tmp_path, tmp_path / "faults.yaml", f"sqlite:///{tmp_path / 'mlflow.db'}", prefect=None)
    code, output = night.start("sweep", str(night.config)).finish()
    assert code == 3, output[-4000:]
    night.sweep_id = output.split("sweep id: ", 1)[1].split()[0]
    summary = json.loads((tmp_path / "results" / night.sweep_id / "summary.json").read_text())
    assert summary["cells_complete"] == 0 and len(summary["failed_cells"]) == CELLS
    errors = [arm["error"] for arm in summary["arms"]]
    assert len(errors) == CELLS and all("exited with code" in e and "no-such-flag" in e for e in errors)
    assert left_running() == []
