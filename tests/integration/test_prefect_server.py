"""The session's real Prefect server (SQLite in a temporary PREFECT_HOME, loopback, a free port,
no scheduler): the deployments of infra/prefect/prefect.yaml are created with `prefect deploy`, and the
`specfleet.fingerprint.changed` event that flows/revalidate.py emits makes the nightly-sweep
trigger create a flow run. No worker runs, so the sweep itself never executes."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.revalidate import EVENT
from tests.integration.services import BIN, PrefectServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "infra" / "prefect" / "prefect.yaml"


def _prefect(server: PrefectServer, *args: str) -> str:
    env = server.env | {"SPECFLEET_REPO": str(ROOT)}
    result = subprocess.run([str(BIN / "prefect"), "--no-prompt", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# Runs in a child process, so this test's Prefect settings never mix with another test's harness.
# Emits one event, then waits up to WAIT_S for a new run of the deployment; prints what it saw.
EMIT_AND_WAIT = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.events import emit_event
from prefect.events.worker import EventsWorker

event, resource_id, deployment_name, wait_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

async def main():
    async with get_client() as client:
        deployment = await client.read_deployment_by_name(deployment_name)
        ids = DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
        before = len(await client.read_flow_runs(deployment_filter=ids))
        emit_event(event, resource={"prefect.resource.id": resource_id},
                   payload={"changed": ["engine"], "config_path": "configs/llama70b-h200.yaml"})
        EventsWorker.drain_all()
        seen, run = [], None
        for _ in range(int(wait_s * 2)):
            seen = await client.read_flow_runs(deployment_filter=ids, sort="EXPECTED_START_TIME_DESC")
            if len(seen) > before:
                found = seen[0]
                run = {"deployment_id": str(found.deployment_id), "state": found.state_type.value,
                       "created_by": found.created_by.type if found.created_by else None,
                       "trigger": found.created_by.display_value if found.created_by else None,
                       "parameters": found.parameters}
                break
            await asyncio.sleep(0.5)
        print(json.dumps({"deployment_id": str(deployment.id), "before": before, "after": len(seen), "run": run}))

asyncio.run(main())
"""


def _emit_and_wait(server: PrefectServer, resource_id: str, wait_s: float) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", EMIT_AND_WAIT, EVENT, resource_id, "specfleet-sweep/nightly-sweep", str(wait_s)],
        cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=wait_s + 90, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def _nightly() -> dict[str, Any]:
    spec = yaml.safe_load(PREFECT_FILE.read_text())
    found: dict[str, Any] = next(d for d in spec["deployments"] if d["name"] == "nightly-sweep")
    return found


def test_deploy_then_the_fingerprint_event_creates_a_sweep_run(prefect_api: PrefectServer) -> None:
    nightly = _nightly()
    pool = nightly["work_pool"]["name"]
    _prefect(prefect_api, "work-pool", "create", pool, "--type", "process")
    out = _prefect(prefect_api, "deploy", "--prefect-file", str(PREFECT_FILE.relative_to(ROOT)), "--all")
    assert "specfleet-sweep/nightly-sweep" in out and "specfleet-revalidate/revalidate-watch" in out

    (trigger,) = nightly["triggers"]
    assert trigger["expect"] == [EVENT]
    seen = _emit_and_wait(prefect_api, trigger["match"]["prefect.resource.id"], wait_s=60)
    run = seen["run"]
    assert seen["before"] == 0 and run is not None, "no flow run of the sweep deployment within 60 s of the event"
    assert run["deployment_id"] == seen["deployment_id"] and seen["after"] == 1
    assert run["created_by"] == "AUTOMATION" and run["trigger"] == trigger["name"]
    assert run["parameters"] == nightly["parameters"]
    assert run["state"] == "SCHEDULED"  # created, never executed: no worker polls the pool


def test_another_configs_event_creates_no_run(prefect_api: PrefectServer) -> None:
    """Runs after the deploy above (module order): the trigger matches its config only."""
    seen = _emit_and_wait(prefect_api, "specfleet.config.some-other-config", wait_s=10)
    assert seen["run"] is None and seen["after"] == seen["before"] == 1
