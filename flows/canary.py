"""The canary as Prefect flows (seed, "Production gates, drift monitoring and rollback").

``canary_probe_flow``: the scheduled probe (``canary-probe`` in infra/prefect/prefect.yaml): a
small canary per prompt class against the production replicas, so the per-class acceptance that
the servers' own counters cannot show (they are per server) is logged to MLflow every hour. A
``rollback`` verdict emits ``specfleet.rollback.recommended``.

``rollback_flow``: what that event's automation runs (``rollback-recommended``): it records the
recommendation and the speculation-off server arguments to deploy (the rollback flag), as a
Prefect artifact and a JSON file in the results dir. Swapping the replicas is the fleet's own
deploy step; this names exactly what to deploy.
"""

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.events import emit_event

from specfleet.contract.durations import duration_flag, format_duration
from specfleet.contract.matrix import load_label
from specfleet.errors import InputError
from specfleet.production.canary import VERDICT_EVENT, CanaryResult
from specfleet.production.replica_age import DEFAULT_MAX_AGE_GAP_S, age_coverage
from specfleet_flows.sweep import DEFAULT_RESULTS_DIR
from specfleet_tasks.canary.ages import read_ages
from specfleet_tasks.canary.context import CanaryLoad, canary_setup, publish
from specfleet_tasks.canary.run import run_canary
from specfleet_tasks.store.results import atomic_write_text

BASELINE_URL_ENV, CANDIDATE_URL_ENV = "SPECFLEET_CANARY_BASELINE_URL", "SPECFLEET_CANARY_CANDIDATE_URL"


def emit_rollback(result: CanaryResult, canary_dir: Path) -> list[str]:
    """On a ``rollback`` verdict, ``VERDICT_EVENT`` with what a rollback needs (the sweep, the arm,
    the speculation-off arguments) to the Prefect API, when one is configured; notes otherwise."""
    if result.verdict != "rollback":
        return []
    if not os.environ.get("PREFECT_API_URL"):
        return [f"no PREFECT_API_URL: event {VERDICT_EVENT} not emitted"]
    canary_id = canary_dir.name
    resource = {"prefect.resource.id": f"specfleet.production.canary.{canary_id}", "prefect.resource.name": canary_id}
    emit_event(VERDICT_EVENT, resource=resource, payload={
        "canary_id": canary_id, "reason": result.reason, "sweep_id": result.sweep_id, "arm": result.arm,
        "rollback_server_args": result.rollback_server_args, "results_dir": str(canary_dir.parent)})
    return []


@dataclass(frozen=True)
class CanaryRun:
    result: CanaryResult
    canary_dir: Path
    notes: list[str]
    """The setup's, MLflow's and the rollback event's, in that order: for stderr or the flow's log."""


def run_and_publish(baseline: str, candidate: str, prompts: Sequence[str], load: CanaryLoad, results_dir: Path, *,
                    model: str | None = None, api_key: str | None = None, from_sweep: str | None = None,
                    arm: str | None = None, slo_ttft_ms: float | None = None, slo_itl_ms: float | None = None,
                    ca_bundle: Path | None = None, insecure: bool = False,
                    tracking: str | None = None, baseline_twin: str | None = None,
                    max_age_gap_s: float = DEFAULT_MAX_AGE_GAP_S) -> CanaryRun:
    """The canary, written once for ``specfleet canary`` and ``canary_probe_flow``: check the
    replicas and the sweep (bad input: ``InputError`` before anything is sent), read the replicas'
    ages, measure them per class, store the verdict, log it to MLflow and, on ``rollback``, emit
    the event. The MLflow params name the replicas by their URLs without credentials."""
    replicas, context = canary_setup(baseline, candidate, model, api_key, prompts, load, from_sweep, arm,
                                     results_dir, slo_ttft_ms, slo_itl_ms, ca_bundle, insecure, baseline_twin)
    notes = [*context.notes, *(["TLS certificates were not verified (--insecure)"] if insecure else [])]
    age = age_coverage(read_ages(replicas), max_age_gap_s)
    result, canary_dir = run_canary(replicas, prompts, load, context, results_dir, age)
    mode, value = ("concurrency", load.concurrency) if load.concurrency is not None else ("rate", load.rate)
    params = {"baseline": replicas["baseline"].base_url, "candidate": replicas["candidate"].base_url,
              "prompts": ",".join(prompts), "requests": str(load.requests), "load": load_label(mode, float(value or 0)),
              **({"baseline_twin": replicas["twin"].base_url} if "twin" in replicas else {})}
    tls = next((r.tls_verification for r in replicas.values() if r.tls_verification), None)
    if tls is not None:
        params["tls_verification"] = tls
    notes += [*publish(result, canary_dir, context.experiment, tracking, params), *emit_rollback(result, canary_dir)]
    return CanaryRun(result, canary_dir, notes)


@flow(name="specfleet-canary-probe")
def canary_probe_flow(prompts: list[str], baseline_url: str | None = None, candidate_url: str | None = None,
                      concurrency: int = 1, requests: int = 16, max_tokens: int = 64,
                      from_sweep: str | None = None, results_dir: str = DEFAULT_RESULTS_DIR,
                      baseline_twin_url: str | None = None,
                      max_age_gap: str = format_duration(DEFAULT_MAX_AGE_GAP_S)) -> CanaryResult:
    """A canary of ``requests`` per class; the replicas' URLs default to the worker's
    ``SPECFLEET_CANARY_BASELINE_URL`` and ``SPECFLEET_CANARY_CANDIDATE_URL``. Credentials in a URL
    become its Authorization header and stay out of MLflow, but Prefect stores a flow run's
    parameters: a URL with credentials belongs in those variables, not in ``baseline_url``.
    ``baseline_twin_url`` and ``max_age_gap`` are ``--baseline-twin`` and ``--max-age-gap``."""
    baseline = baseline_url or os.environ.get(BASELINE_URL_ENV)
    candidate = candidate_url or os.environ.get(CANDIDATE_URL_ENV)
    if not baseline or not candidate:
        raise InputError(f"canary probe: set baseline_url and candidate_url, or {BASELINE_URL_ENV} and "
                         f"{CANDIDATE_URL_ENV} on the worker")
    load = CanaryLoad(concurrency, None, requests, 2, max_tokens, 0.0)
    run = run_and_publish(baseline, candidate, prompts, load, Path(results_dir), from_sweep=from_sweep,
                          baseline_twin=baseline_twin_url, max_age_gap_s=duration_flag("max_age_gap", max_age_gap))
    result = run.result
    logger = get_run_logger()
    for c in result.classes:
        logger.info("%s: acceptance %s (%s), baseline %s", c.prompt_class, c.candidate_acceptance.value,
                    c.candidate_acceptance.source, c.baseline_acceptance.value)
    for note in run.notes:
        logger.warning(note)
    logger.info("verdict %s: %s", result.verdict, result.reason)
    return result


@flow(name="specfleet-rollback")
def rollback_flow(recommendation: dict[str, Any], results_dir: str = DEFAULT_RESULTS_DIR) -> str:
    """Record a recommended rollback (the ``specfleet.rollback.recommended`` payload: canary_id,
    reason, sweep_id, arm, rollback_server_args) and the speculation-off arguments; returns the
    file written."""
    canary_id = str(recommendation["canary_id"])
    reason, sweep_id, arm = recommendation.get("reason"), recommendation.get("sweep_id"), recommendation.get("arm")
    server_args = recommendation.get("rollback_server_args")
    body = (f"# Rollback recommended by {canary_id}\n\n{reason}\n\n"
            f"Sweep: {sweep_id or 'none'}; arm: {arm or 'unknown'}\n\n"
            + (f"Deploy the speculation-off server:\n\n```\n{' '.join(server_args)}\n```\n" if server_args else
               "The canary ran without a sweep (--from): deploy the target's baseline server arguments.\n"))
    create_markdown_artifact(body, key="rollback-recommended", description=f"rollback recommended by {canary_id}")
    path = Path(results_dir) / "rollbacks" / f"{canary_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(recommendation, indent=2))
    get_run_logger().warning("rollback recommended by %s: %s", canary_id, reason)
    return str(path)
