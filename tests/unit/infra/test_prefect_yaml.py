"""infra/prefect/prefect.yaml: entrypoints load, parameters fit the flows, schedules and the
trigger parse with Prefect's own models, and the trigger listens for what revalidate emits."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger
from prefect.flows import load_flow_from_entrypoint

from flows.revalidate import EVENT
from tasks.plan.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[3]
SPEC = yaml.safe_load((ROOT / "infra" / "prefect" / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_deployment_loads_and_parameters_fit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    deployment: dict[str, Any] = DEPLOYMENTS[name]
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    flow.validate_parameters(deployment["parameters"])
    load_sweep_config(ROOT / deployment["parameters"]["config_path"])
    for schedule in deployment["schedules"]:
        if "cron" in schedule:
            assert CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])
        else:
            assert IntervalSchedule(interval=timedelta(seconds=schedule["interval"]), timezone=schedule["timezone"])


def test_nightly_sweep_triggers_on_fingerprint_change() -> None:
    nightly = DEPLOYMENTS["nightly-sweep"]
    config = load_sweep_config(ROOT / nightly["parameters"]["config_path"])
    trigger = DeploymentEventTrigger.model_validate(nightly["triggers"][0])
    assert trigger.expect == {EVENT}
    assert trigger.match.model_dump()["prefect.resource.id"] == f"specfleet.config.{config.name}"
    assert DEPLOYMENTS["revalidate-watch"]["parameters"]["run_sweep"] is False  # the trigger runs the sweep
