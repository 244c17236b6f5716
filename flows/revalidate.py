"""Revalidation (seed: "Production gates": revalidate after a model, tokenizer, engine or
speculator change). Compare the current fingerprint with the newest finished sweep's in
MLflow; when it changed, emit ``specfleet.contract.fingerprint.changed`` (the nightly deployment's
trigger, infra/prefect/prefect.yaml) and, unless told not to, run the sweep here.
"""

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event
from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.fingerprint import Fingerprint, changed_parts
from specfleet.report.sweep_report import SweepReport
from specfleet_flows.sweep import DEFAULT_RESULTS_DIR, sweep_flow
from specfleet_tasks.plan.fingerprint import compute_fingerprint
from specfleet_tasks.plan.models import resolve_models
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.tracking.runs import last_validated, tracking_uri

EVENT = "specfleet.contract.fingerprint.changed"
NEVER_VALIDATED = "no validated sweep"


class Revalidation(RecordModel):
    config_name: str
    fingerprint: str
    validated_sweep: str | None = Field(description="Newest finished sweep of the experiment, if any.")
    validated_fingerprint: str | None
    changed: list[str] = Field(description="Changed parts (specfleet.contract.fingerprint.changed_parts); "
                               "[] unchanged.")
    event_emitted: bool = False
    sweep: SweepReport | None = None

    @property
    def verdict(self) -> str:
        return f"changed: {', '.join(self.changed)}" if self.changed else "unchanged"


@task(cache_policy=NO_CACHE)
def current_fingerprint(config_path: Path) -> tuple[str, Fingerprint]:
    """(config name, fingerprint) from the files and the engine installed here and now."""
    config = load_sweep_config(config_path)
    return config.name, compute_fingerprint(config, resolve_models(config))


@flow(name="specfleet-revalidate")
def revalidate_flow(config_path: str, check: bool = False, run_sweep: bool = True, tracking: str | None = None,
                    results_dir: str = DEFAULT_RESULTS_DIR) -> Revalidation:
    """``check``: compare only. Otherwise a change emits the event and, with ``run_sweep``, sweeps.
    The scheduled watcher sets ``run_sweep=False``: the event's trigger starts the sweep deployment."""
    name, current = current_fingerprint(Path(config_path))
    last = last_validated(tracking_uri(tracking), name)
    result = Revalidation(
        config_name=name, fingerprint=current.digest, validated_sweep=last[0] if last else None,
        validated_fingerprint=last[1].digest if last else None,
        changed=changed_parts(last[1], current) if last else [NEVER_VALIDATED],
    )
    get_run_logger().info("%s: %s", name, result.verdict)
    if check or not result.changed:
        return result
    resource = {"prefect.resource.id": f"specfleet.config.{name}", "prefect.resource.name": name}
    event = emit_event(EVENT, resource=resource, payload={
        "config_path": config_path, "results_dir": results_dir,  # the trigger's run sweeps these
        "changed": result.changed, "fingerprint": current.digest,
        "validated_sweep": result.validated_sweep, "validated_fingerprint": result.validated_fingerprint,
    })
    sweep = sweep_flow(config_path, tracking=tracking, results_dir=results_dir) if run_sweep else None
    return result.model_copy(update={"event_emitted": event is not None, "sweep": sweep})
