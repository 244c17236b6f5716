"""infra/prefect/prefect.yaml: entrypoints load, parameters fit the flows, schedules and the
trigger parse with Prefect's own models, the trigger listens for what revalidate emits and its
run sweeps what the event names, else the deployment's parameters; the working directory comes
from the worker's SPECFLEET_REPO."""

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger
from prefect.flows import load_flow_from_entrypoint
from prefect.server.events.actions import RunDeployment
from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

from specfleet.production.canary import VERDICT_EVENT
from specfleet_flows.revalidate import EVENT
from specfleet_tasks.store.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[3]
SPEC = yaml.safe_load((ROOT / "infra" / "prefect" / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_deployment_loads_and_parameters_fit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    deployment: dict[str, Any] = DEPLOYMENTS[name]
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    if "parameters" in deployment:
        flow.validate_parameters(deployment["parameters"])
    if "config_path" in deployment.get("parameters", {}):
        load_sweep_config(ROOT / deployment["parameters"]["config_path"])
    for schedule in deployment.get("schedules", []):
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


@pytest.mark.parametrize("payload", [{}, {"config_path": "configs/demo-cpu.yaml", "results_dir": "/data/results",
                                          "budget": "30m"}],
                         ids=["bare event", "revalidate's payload"])
def test_the_triggered_run_sweeps_what_the_event_names_else_the_defaults(payload: dict[str, str]) -> None:
    """Rendered as Prefect's RunDeployment action renders a trigger's parameters."""
    nightly = DEPLOYMENTS["nightly-sweep"]
    parameters = copy.deepcopy(nightly["triggers"][0]["parameters"])
    RunDeployment._upgrade_v1_templates(parameters)  # what render_parameters does first
    context = {"event": {"payload": {"changed": ["engine"], **payload}}}
    rendered = hydrate(parameters, HydrationContext(raise_on_error=True, render_jinja=True, jinja_context=context))
    wanted = nightly["parameters"] | payload
    assert rendered == {key: wanted[key] for key in parameters}


def test_the_nightly_run_is_budgeted_and_continues() -> None:
    """Issue 18: the nightly deployment runs the nightly profile with --budget 7h --continue."""
    parameters = DEPLOYMENTS["nightly-sweep"]["parameters"]
    assert parameters["budget"] == "7h" and parameters["continue_sweep"] is True
    assert parameters["config_path"] == "configs/llama70b-h200-nightly.yaml"


def test_runs_start_in_the_workers_checkout() -> None:
    assert SPEC["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $SPECFLEET_REPO }}"}}]


def test_a_canarys_rollback_event_runs_the_rollback_flow_with_its_payload() -> None:
    """The rollback trigger hands the event's payload to the flow as a mapping (rendered as
    Prefect's RunDeployment action renders it), and the flow accepts it."""
    rollback = DEPLOYMENTS["rollback-recommended"]
    trigger = DeploymentEventTrigger.model_validate(rollback["triggers"][0])
    assert trigger.expect == {VERDICT_EVENT}
    parameters = copy.deepcopy(rollback["triggers"][0]["parameters"])
    RunDeployment._upgrade_v1_templates(parameters)
    payload = {"canary_id": "canary-1", "reason": "code: slower", "sweep_id": None, "arm": "ngram-k3",
               "rollback_server_args": ["--model", "m"], "results_dir": "/data/results"}
    rendered = hydrate(parameters, HydrationContext(raise_on_error=True, render_jinja=True,
                                                    jinja_context={"event": {"payload": payload}}))
    assert rendered == {"recommendation": payload, "results_dir": "/data/results"}
    load_flow_from_entrypoint(rollback["entrypoint"]).validate_parameters(rendered)
