"""The nightly path end to end, on the session's real Prefect server (SQLite in a temporary
PREFECT_HOME, loopback, no scheduler): `prefect work-pool create` and `prefect deploy --all` from
infra/prefect/prefect.yaml, a real process worker (`prefect worker start`) polling the pool with
the checkout's Python and code, then the `specfleet.contract.fingerprint.changed` event that
flows/revalidate.py emits. The nightly-sweep trigger creates a flow run, and the worker runs it:
a tiny real sweep (the baseline, ngram k=3 and the closing baseline, local Ray) to COMPLETED within
a budget the ngram arm no longer fits: the
closing baseline runs, the ngram cell is listed as not measured, its server never starts, and
the next night's `specfleet sweep --continue` measures that cell alone; cells in the results dir,
runs in MLflow (SQLite). Everything the run needs on the worker comes from prefect.yaml (its pull
step, the trigger's parameters) and the variables its header documents, set in the worker's
environment. Another config's event, sent first, creates no run. Last, the canary's
`specfleet.rollback.recommended` event runs the rollback deployment on the same worker.

Its arms run on the stand-in engine (``tasks/engine/standin.py``): the deployment, the events, the
budget and the continuation are Prefect's and the sweep's, and a vLLM server would add only its
start. The budget is planned on start-ups the test records (``record_timing``), so whether a cell
fits depends on those and on ``OPENING_SLACK_S``, never on how fast this machine starts a server."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mlflow import MlflowClient

from specfleet.contract import SweepConfig, arm_plans
from specfleet.planning.budget import cell_cost_s
from specfleet.production.canary import VERDICT_EVENT
from specfleet.report.sweep_report import SweepReport
from specfleet.results import CellResult
from specfleet_flows.revalidate import EVENT
from specfleet_tasks.engine.server import log_tail
from specfleet_tasks.engine.startups import record_startup, recorded_startups, startup_key
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.plan.budget import cell_budget
from specfleet_tasks.plan.sweep_plan import plan_sweep
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.results import MIRROR_ENV
from tests.integration.processes import marked_processes
from tests.integration.services import PrefectServer, service
from tests.integration.sweep_configs import BASELINE_ARM, NGRAM_ARM, standin_env, tiny_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "infra" / "prefect" / "prefect.yaml"
DEPLOYMENT = "specfleet-sweep/nightly-sweep"
EXPERIMENT = "it-nightly"
BASELINE_START_S = 5.0
NGRAM_START_S = 3600.0
OPENING_SLACK_S = 300.0
"""The budget's room past the predicted opening baseline: the opening cell starts when the flow
reaches its check within this time of its start (about 10-16 s on 2-core machines: MLflow's
database, local Ray, the stand-in's start). The ngram arm, predicted to start in
``NGRAM_START_S``, never fits, whatever the machine's speed."""
NGRAM_ENV = {"SPECFLEET_IT_ARM": "ngram"}
NGRAM = "ngram-k3 / code / c1 / greedy / r0"
BRACKET = {"baseline / code / c1 / greedy / r0", "baseline / code / c1 / greedy / r0-end"}
RUN_TIMEOUT_S = 600.0
MARKER, MARKER_VALUE = "SPECFLEET_IT_WORKER", "worker-4b2d"
CONTINUED, CONTINUED_VALUE = "SPECFLEET_IT_CONTINUE", "continue-7c1e"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def sweep_request(root: Path, cache: Path) -> dict[str, Any]:
    """What the fingerprint event asks the nightly run to sweep. The trigger maps these payload
    keys onto the run's parameters (infra/prefect/prefect.yaml); this is the one place a test
    run's parameters are set: the deployment's continue_sweep (no earlier sweep of this config:
    the run starts the first) and a budget set from the planner's own predictions
    (``specfleet_tasks.plan.budget.cell_budget``) on start-ups this test records in the run's cache
    (``record_timing``): the opening baseline with its closing twin, the closing baseline's
    reserve and ``OPENING_SLACK_S``."""
    config = tiny_sweep_config(root / "nightly.yaml", EXPERIMENT, [BASELINE_ARM, NGRAM_ARM | {"env": NGRAM_ENV}],
                               requests=3, max_tokens=8)
    record_timing(load_sweep_config(config), cache)
    plan = plan_sweep(config, None, root / "plan-only", "1d")
    predicted = cell_budget(plan, 86_400, 0.0)
    [opening] = [w for w in plan.work if w.arm.is_baseline and w.phase == "main"]
    cells_s = [cell_cost_s(predicted, key) for _, key in opening.cells]
    opening_s = predicted.server_start_s[opening.arm.arm] + sum(s for s in cells_s if s is not None)
    budget_s = math.ceil(predicted.reserve_s + opening_s + OPENING_SLACK_S)
    assert predicted.server_start_s["ngram-k3"] > budget_s, (predicted.server_start_s, budget_s)
    return {"config_path": str(config), "results_dir": str(root / "results"), "budget": f"{budget_s}s"}


def record_timing(config: SweepConfig, cache: Path) -> None:
    """The timing source the budget is planned on, not this machine's speed: the run's cache
    (``SPECFLEET_CACHE_DIR``) holds recorded start-ups of ``BASELINE_START_S`` for the baseline's
    server and ``NGRAM_START_S`` for the ngram arm's (its own start-up key: the arm's environment
    differs). Read once per process, before the run's servers record their own."""
    baseline, ngram = arm_plans(config)
    for _ in range(3):
        record_startup(startup_key(config, baseline), BASELINE_START_S, cache)
        record_startup(startup_key(config, ngram), NGRAM_START_S, cache)
    recorded_startups.cache_clear()


def _nightly() -> dict[str, Any]:
    spec = yaml.safe_load(PREFECT_FILE.read_text())
    found: dict[str, Any] = next(d for d in spec["deployments"] if d["name"] == "nightly-sweep")
    return found


def _prefect(server: PrefectServer, *args: str) -> str:
    """The prefect CLI as an operator runs it, from the repository root."""
    result = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *args], cwd=ROOT,
                            env=server.env | {"SPECFLEET_REPO": str(ROOT)}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _worker_env(server: PrefectServer, tracking_uri: str) -> dict[str, str]:
    """The worker machine's environment, as prefect.yaml's header documents it: the checkout
    (SPECFLEET_REPO, first on PYTHONPATH), the tracking URI, local Ray. The worker polls every
    2 s (Prefect's default is 10 s; each poll logs a harmless `database is locked` from the
    SQLite server's mark_deployments_ready, PrefectHQ/prefect#23051); the marker finds every
    process the run starts."""
    env = {k: v for k, v in server.env.items() if not k.startswith(("MLFLOW_", "RAY_", "AWS_")) and k != MIRROR_ENV}
    path = env.get("PYTHONPATH")
    return env | {"SPECFLEET_REPO": str(ROOT), "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
                  "MLFLOW_TRACKING_URI": tracking_uri, "PREFECT_WORKER_QUERY_SECONDS": "2", MARKER: MARKER_VALUE}


# Runs in a child process, so this test's Prefect settings never mix with another test's harness.
# Emits the events in order, then waits up to WAIT_S for a new run of the deployment; prints it.
EMIT_AND_WAIT = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.events import emit_event
from prefect.events.worker import EventsWorker

event, events, deployment_name, wait_s = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])

async def main():
    async with get_client() as client:
        deployment = await client.read_deployment_by_name(deployment_name)
        ids = DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
        before = len(await client.read_flow_runs(deployment_filter=ids))
        for resource_id, payload in events:
            emit_event(event, resource={"prefect.resource.id": resource_id}, payload=payload)
        EventsWorker.drain_all()
        run = None
        for _ in range(int(wait_s * 4)):
            seen = await client.read_flow_runs(deployment_filter=ids, sort="EXPECTED_START_TIME_DESC")
            if len(seen) > before:
                found = seen[0]
                run = {"id": str(found.id), "deployment_id": str(found.deployment_id),
                       "created_by": found.created_by.type if found.created_by else None,
                       "trigger": found.created_by.display_value if found.created_by else None,
                       "parameters": found.parameters}
                break
            await asyncio.sleep(0.25)
        print(json.dumps({"deployment_id": str(deployment.id), "before": before, "run": run}))

asyncio.run(main())
"""


def _emit_and_wait(server: PrefectServer, events: list[tuple[str, dict[str, Any]]], wait_s: float,
                   event: str = EVENT, deployment: str = DEPLOYMENT) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", EMIT_AND_WAIT, event, json.dumps(events), deployment, str(wait_s)],
        cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=wait_s + 90, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


@dataclass
class Worker:
    process: "subprocess.Popen[bytes]"
    log: Path

    def tail(self, lines: int = 60) -> str:
        return f"the worker's log ({self.log}, the flow run's output included) ends:\n{log_tail(self.log, lines)}"


@pytest.fixture
def run_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What this process, the worker and the continuation share: the stand-in engine (this test
    checks the deployment, its events, the budget and the continuation, not what vLLM measures)
    and the cache holding the start-ups the budget is planned on (``record_timing``)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for shared in ("fixtures", "engine-features"):  # the fixture models, what the engine was read to accept
        (default_cache_root() / shared).mkdir(parents=True, exist_ok=True)
        (cache / shared).symlink_to(default_cache_root() / shared, target_is_directory=True)
    env = standin_env(step_ms=20) | {"SPECFLEET_CACHE_DIR": str(cache)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def worker(prefect_api: PrefectServer, run_env: dict[str, str], tmp_path: Path) -> Iterator[Worker]:
    """`prefect work-pool create`, then a process worker on that pool, stopped at the end (with
    the flow run it may still run); its log's tail is printed then (pytest shows it when the test
    fails), and no process the run started may outlive it."""
    pool = _nightly()["work_pool"]["name"]
    _prefect(prefect_api, "work-pool", "create", pool, "--type", "process")
    env = _worker_env(prefect_api, f"sqlite:///{tmp_path / 'mlflow.db'}") | run_env
    home = tmp_path / "worker"  # not the checkout: the pull step has to get the run there
    home.mkdir()
    argv = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--name", "it-worker"]
    with service(argv, home / "worker.log", env=env, cwd=home) as process:
        started = Worker(process, home / "worker.log")
        yield started
    print(started.tail(200))
    left = marked_processes(MARKER, MARKER_VALUE, grace_s=30)
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert not left, f"processes left by the worker's run: {left}"


def _wait_for_end(server: PrefectServer, run_id: str, worker: Worker) -> dict[str, Any]:
    """Poll the run's state until it ends; fail with the worker's log if the worker dies or the run overruns."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run: dict[str, Any] = httpx.get(f"{server.api_url}/flow_runs/{run_id}", timeout=10).json()
        if run["state_type"] in TERMINAL:
            return run
        assert worker.process.poll() is None, f"the worker exited ({worker.process.returncode}); {worker.tail()}"
        assert time.monotonic() < deadline, f"run still {run['state_name']} after {RUN_TIMEOUT_S:g} s; {worker.tail()}"
        time.sleep(1)


def _stored(sweep_dir: Path) -> dict[str, str | None]:
    """label -> started_at of every stored cell."""
    return {(c := CellResult.model_validate_json(p.read_text())).identity.label: c.started_at
            for p in (sweep_dir / "cells").glob("*.json")}


def _continue(server: PrefectServer, request: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    """``specfleet sweep --continue`` as an operator runs it, reporting to the session's Prefect
    server and the worker's MLflow, with a budget the ngram arm's recorded start fits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_", "RAY_"))}
    env |= {CONTINUED: CONTINUED_VALUE, "PREFECT_API_URL": server.api_url}
    command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", "sweep", request["config_path"],
               "--budget", "2d", "--continue", "--results-dir", request["results_dir"],
               "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    return done.returncode, done.stdout + done.stderr


def _runs_of(server: PrefectServer, deployment_id: str) -> list[dict[str, Any]]:
    body = {"deployments": {"id": {"any_": [deployment_id]}}}
    found: list[dict[str, Any]] = httpx.post(f"{server.api_url}/flow_runs/filter", json=body, timeout=10).json()
    return found


def test_the_fingerprint_event_runs_the_nightly_sweep_on_a_worker(
        prefect_api: PrefectServer, worker: Worker, run_env: dict[str, str], fixture_models: dict[str, str],
        tmp_path: Path) -> None:
    nightly = _nightly()
    out = _prefect(prefect_api, "deploy", "--prefect-file", str(PREFECT_FILE.relative_to(ROOT)), "--all")
    assert DEPLOYMENT in out and "specfleet-revalidate/revalidate-watch" in out

    (trigger,) = nightly["triggers"]
    assert trigger["expect"] == [EVENT]
    request = sweep_request(tmp_path, Path(run_env["SPECFLEET_CACHE_DIR"]))
    # Another config's event first: at the end, the run of the second is the deployment's only one.
    seen = _emit_and_wait(prefect_api, [("specfleet.config.some-other-config", {"changed": ["engine"]}),
                                        (trigger["match"]["prefect.resource.id"], {"changed": ["engine"], **request})],
                          wait_s=60)
    run = seen["run"]
    assert seen["before"] == 0 and run is not None, "no flow run of the sweep deployment within 60 s of the event"
    assert run["deployment_id"] == seen["deployment_id"]
    assert run["created_by"] == "AUTOMATION" and run["trigger"] == trigger["name"]
    assert run["parameters"] == nightly["parameters"] | request

    ended = _wait_for_end(prefect_api, run["id"], worker)
    assert ended["state_type"] == "COMPLETED", f"run ended {ended['state_name']}; {worker.tail()}"
    assert ended["work_pool_name"] == nightly["work_pool"]["name"]
    assert [r["id"] for r in _runs_of(prefect_api, seen["deployment_id"])] == [run["id"]]

    # The budget stopped starting cells in time, the closing baseline ran, the run ended within it.
    (sweep_dir,) = Path(request["results_dir"]).iterdir()
    summary = SweepReport.model_validate_json((sweep_dir / "summary.json").read_text())
    assert set(_stored(sweep_dir)) == BRACKET, (request["budget"], summary.not_measured)
    assert not (sweep_dir / "logs" / "ngram-k3.log").exists()  # its server never started
    assert summary.failed_cells == [] and summary.servers_started == 2 and summary.decisions == []
    [skipped] = summary.not_measured
    assert (skipped.label, skipped.reason) == (NGRAM, "budget") and " s server start, " in skipped.detail
    assert "## Not measured (1 cell): the budget did not start them" in (sweep_dir / "summary.md").read_text()
    budget_s = float(request["budget"].removesuffix("s"))
    assert summary.wall_s is not None and summary.wall_s <= budget_s, (summary.wall_s, budget_s)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    (parent,) = client.search_runs([experiment.experiment_id], "tags.run_kind = 'sweep'")
    assert parent.data.tags["sweep_id"] == sweep_dir.name and parent.info.status == "FINISHED"

    # The next night continues it: the ngram cell alone, from the command line.
    before = _stored(sweep_dir)
    code, output = _continue(prefect_api, request, tmp_path)
    assert code == 0, output[-4000:]
    assert f"--continue: sweep {sweep_dir.name}, 1 of 3 cells left to measure" in output
    stored = _stored(sweep_dir)
    assert set(stored) == {*before, NGRAM} and {k: stored[k] for k in before} == before
    summary = SweepReport.model_validate_json((sweep_dir / "summary.json").read_text())
    assert summary.not_measured == [] and summary.servers_started == 1
    assert summary.cells_complete == summary.cells_planned == 3
    assert marked_processes(CONTINUED, CONTINUED_VALUE, grace_s=60.0) == []  # Ray and its server stopped
    cells = client.search_runs([experiment.experiment_id], "tags.run_kind = 'cell'")
    assert sorted(c.data.tags["arm"] for c in cells) == ["baseline", "baseline", "ngram-k3"]
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parent.info.run_id}
    _a_rollback_event_records_the_speculation_off_arguments(prefect_api, worker, tmp_path)


def _a_rollback_event_records_the_speculation_off_arguments(server: PrefectServer, worker: Worker,
                                                            tmp_path: Path) -> None:
    """The canary's rollback event (as ``specfleet canary`` emits it) runs the rollback deployment
    on the same worker, which records the recommendation and the arguments to deploy."""
    spec = yaml.safe_load(PREFECT_FILE.read_text())
    rollback = next(d for d in spec["deployments"] if d["name"] == "rollback-recommended")
    (trigger,) = rollback["triggers"]
    assert trigger["expect"] == [VERDICT_EVENT]
    payload = {"canary_id": "canary-it", "reason": "code: acceptance length 1.10 below the sweep's break-even 1.40",
               "sweep_id": "it-sweep", "arm": "ngram-k3", "results_dir": str(tmp_path / "canary-results"),
               "rollback_server_args": ["--model", "target", "--max-num-seqs", "8"]}
    seen = _emit_and_wait(server, [("specfleet.production.canary.canary-it", payload)], wait_s=60, event=VERDICT_EVENT,
                          deployment="specfleet-rollback/rollback-recommended")
    run = seen["run"]
    assert run is not None and run["created_by"] == "AUTOMATION" and run["trigger"] == trigger["name"]
    assert run["parameters"]["recommendation"] == payload  # the payload arrives as a mapping, not its text
    ended = _wait_for_end(server, run["id"], worker)
    assert ended["state_type"] == "COMPLETED", f"run ended {ended['state_name']}; {worker.tail()}"
    recorded = json.loads((tmp_path / "canary-results" / "rollbacks" / "canary-it.json").read_text())
    assert recorded == payload
