"""MLflow: one parent run per sweep (the contract as params, the fingerprint as tags), one
child run per cell, the sweep's tables on the parent. Logged from the flow process only,
through an explicit ``MlflowClient``: no active-run globals, so an ``MLFLOW_RUN_ID`` in the
environment cannot capture the runs (mlflow#15713) and Ray workers need no tracking setup
(mlflow#7206)."""

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking.context.registry import resolve_tags
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_PARAMS_TAGS_PER_BATCH

from specfleet.contract import SweepConfig
from specfleet.contract.fingerprint import Fingerprint
from specfleet.errors import InputError
from specfleet.production.canary import CanaryResult
from specfleet.report.sweep_report import REPORT_FILE, SweepReport
from specfleet.results import CellResult
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.table import DecisionRow
from specfleet_tasks.arm.lifecycle import api_key
from specfleet_tasks.plan.versions import stack_versions
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.store.sweep import SUMMARY_MARKDOWN
from specfleet_tasks.tracking.names import (
    acceptance_metrics,
    canary_metrics,
    cell_metrics,
    cell_params,
    cell_tags,
    contract_params,
    fingerprint_from_tags,
    fingerprint_tags,
    mix_metrics,
    noise_metrics,
    quality_metrics,
    quality_tags,
)

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
SWEEP_RUNS = "tags.run_kind = 'sweep'"
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""An unreachable tracking server should cost seconds, not MLflow's default minutes of retries."""
HEALTH_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)
T = TypeVar("T")


def experiment_page(ui_base: str, experiment_id: str) -> str:
    """The experiment's page on its runs table. MLflow 3.17's UI picks GenAI or machine-learning
    pages from a global switch (its ``workflowType`` query parameter, else the browser's last
    choice, GenAI by default) before the experiment's ``mlflow.experimentKind`` tag, so the link
    names the kind too."""
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


def experiment_id(uri: str, name: str) -> str | None:
    """The id of experiment ``name``, or None when it does not exist or the store does not answer
    (a server that fails its health check, a SQLite file that is not there, is not asked)."""
    sqlite_file = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    if unreachable(uri) is not None or (sqlite_file is not None and not Path(sqlite_file).is_file()):
        return None
    try:
        found = MlflowClient(uri).get_experiment_by_name(name)
    except Exception:  # noqa: BLE001  # only a link in a message depends on it
        return None
    return None if found is None else str(found.experiment_id)


def tracking_uri(explicit: str | None = None) -> str:
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def shown_uri(uri: str) -> str:
    """The URI without user and password, for messages."""
    parts = urlsplit(uri)
    if parts.password is None and parts.username is None:
        return uri
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))


def unreachable(uri: str) -> str | None:
    """Why an HTTP tracking server cannot be used right now (its /health), or None."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        status = httpx.get(f"{uri.rstrip('/')}/health", timeout=HEALTH_TIMEOUT_S).status_code
    except httpx.HTTPError as err:
        return f"{type(err).__name__} on {shown_uri(uri)}/health"
    return None if status == 200 else f"{shown_uri(uri)}/health answered {status}"


def require_reachable(uri: str) -> None:
    reason = unreachable(uri)
    if reason is not None:
        raise InputError(f"--tracking-uri {shown_uri(uri)}: MLflow not reachable ({reason})")


def use_short_http_retries() -> None:
    for name, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)


def _experiment_id(client: MlflowClient, name: str) -> str:
    """The config's experiment, tagged so the MLflow 3 UI opens on its runs table (the figures
    nights are compared by) rather than on the GenAI overview, which has nothing to show here."""
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, tags=EXPERIMENT_TAGS)
    for tag, value in EXPERIMENT_TAGS.items():
        if found.tags.get(tag) != value:
            client.set_experiment_tag(found.experiment_id, tag, value)
    return str(found.experiment_id)


def _log_batch(client: MlflowClient, run_id: str, metrics: Mapping[str, float] | None = None,
               params: Mapping[str, str] | None = None) -> None:
    """Metrics in one call (at most 1000 a batch), params in batches of MLflow's limit of 100."""
    now_ms = int(time.time() * 1000)
    if metrics:
        client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in metrics.items()])
    items = [Param(k, v) for k, v in (params or {}).items()]
    for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[start:start + MAX_PARAMS_TAGS_PER_BATCH])


def open_sweep_run(uri: str, config: SweepConfig, sweep_id: str, fingerprint: Fingerprint) -> str:
    """The sweep's parent run: found by its sweep id on resume or sync, else created with the contract."""
    client = MlflowClient(uri)
    experiment = _experiment_id(client, config.name)
    found = client.search_runs([experiment], f"{SWEEP_RUNS} and tags.sweep_id = '{sweep_id}'", max_results=1)
    if found:
        run_id: str = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    tags = {"run_kind": "sweep", "sweep_id": sweep_id, "config_name": config.name,
            **fingerprint_tags(fingerprint),
            **{f"version.{name}": v or "not installed" for name, v in stack_versions().items()}}
    run = client.create_run(experiment, run_name=sweep_id, tags=resolve_tags(tags))
    _log_batch(client, run.info.run_id, params=contract_params(config, [api_key(config) or ""]))
    return str(run.info.run_id)


def _child_runs(client: MlflowClient, experiment: str, parent_id: str) -> list[Run]:
    """The child runs under the parent."""
    out: list[Run] = []
    token = None
    while True:
        page = client.search_runs([experiment], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}'",
                                  max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _logged_cells(client: MlflowClient, experiment: str, parent_id: str) -> dict[str, tuple[str, str]]:
    """cell key -> (run id, started_at) of the child runs already under the parent."""
    return {run.data.tags.get("cell_key", ""): (run.info.run_id, run.data.tags.get("started_at", ""))
            for run in _child_runs(client, experiment, parent_id)}


def _tag_cell_verdicts(client: MlflowClient, parent_id: str, decisions: Sequence[Decision]) -> None:
    """Each speculative cell run tagged with its cell's verdict and reason code (adopt, reject or
    inconclusive): every run of the arm at that configuration."""
    by_cell = {(d.slice.arm, d.slice.prompt_class, d.slice.sampling, f"{d.slice.load_value:g}"): d for d in decisions}
    experiment = client.get_run(parent_id).info.experiment_id
    for run in _child_runs(client, experiment, parent_id):
        tags = run.data.tags
        load = tags.get("concurrency") or tags.get("rate_per_s") or ""
        found = by_cell.get((tags.get("arm", ""), tags.get("prompt_class", ""), tags.get("sampling", ""),
                             f"{float(load):g}" if load else ""))
        if found is not None:
            client.set_tag(run.info.run_id, "verdict", found.verdict)
            client.set_tag(run.info.run_id, "reason_code", found.reason_code)


def log_cell_runs(uri: str, parent_id: str, cells: Sequence[CellResult], store: ResultsStore,
                  fingerprint_digest: str) -> int:
    """A child run per cell with its metrics and raw per-request Parquet. A cell already
    logged is skipped; a re-measured one replaces its stale run. Returns runs created."""
    client = MlflowClient(uri)
    experiment = client.get_run(parent_id).info.experiment_id
    logged = _logged_cells(client, experiment, parent_id)
    created = 0
    for cell in cells:
        previous = logged.get(cell.key)
        if previous is not None and previous[1] == (cell.started_at or ""):
            continue
        if previous is not None:
            client.delete_run(previous[0])
        tags = {MLFLOW_PARENT_RUN_ID: parent_id, **cell_tags(cell, fingerprint_digest)}
        run_id = client.create_run(experiment, run_name=cell.identity.label, tags=tags).info.run_id
        _log_batch(client, run_id, metrics=cell_metrics(cell), params=cell_params(cell.identity))
        records = store.records_path(cell.key)
        if records.exists():
            client.log_artifact(run_id, str(records), "records")
        client.set_terminated(run_id, "FAILED" if cell.status == "failed" else "FINISHED")
        created += 1
    return created


COST_TABLE = "cost_table.json"


def _table(rows: Sequence[DecisionRow]) -> pd.DataFrame:
    return pd.DataFrame([row.model_dump(mode="json") for row in rows], columns=list(DecisionRow.model_fields))


def log_sweep_summary(uri: str, parent_id: str, summary: SweepReport, markdown: str) -> None:
    """The sweep's summary, each figure once, on its parent run: ``summary.json`` (every decision, k
    policy, gate and verdict), the cost table as an MLflow table (one row per decision, the negative
    ones included, to filter and compare in the UI), ``summary.md``, and the figures nights are
    compared by as metrics (the verdicts at the traffic mix, quality gates, acceptance, noise)."""
    client = MlflowClient(uri)
    artifacts = get_artifact_repository(client.get_run(parent_id).info.artifact_uri, tracking_uri=uri)
    artifacts.delete_artifacts(COST_TABLE)  # type: ignore[no-untyped-call]  # a resumed sweep replaces its table: log_table would append
    client.log_table(parent_id, _table(summary.cost_table), COST_TABLE)
    client.log_dict(parent_id, summary.model_dump(mode="json"), REPORT_FILE)
    client.log_text(parent_id, markdown, SUMMARY_MARKDOWN)
    counts = {verdict: sum(row.verdict == verdict for row in summary.cost_table)
              for verdict in ("adopt", "reject", "inconclusive")}
    _log_batch(client, parent_id, metrics={
        "cells_planned": summary.cells_planned, "cells_complete": summary.cells_complete,
        "cells_ok": summary.cells_ok, "cells_invalid": summary.cells_invalid,
        "cells_failed": len(summary.failed_cells), "cells_not_measured": len(summary.not_measured),
        "decisions_adopted": counts["adopt"], "decisions_rejected": counts["reject"],
        "decisions_inconclusive": counts["inconclusive"],
        **{f"mix_{verdict}": sum(v.verdict == verdict for v in summary.mix)
           for verdict in ("adopt", "reject", "inconclusive")}, **quality_metrics(summary.quality),
        **mix_metrics(summary.mix), **acceptance_metrics(summary.acceptance), **noise_metrics(summary.noise),
    })
    for name, why in quality_tags(summary.quality).items():
        client.set_tag(parent_id, name, why)
    _tag_cell_verdicts(client, parent_id, summary.decisions)


def close_sweep_run(uri: str, parent_id: str, status: str) -> None:
    """End the parent run with ``status`` (``specfleet.report.sweep_report.run_status`` says which)."""
    MlflowClient(uri).set_terminated(parent_id, status)


def last_validated(uri: str, experiment_name: str) -> tuple[str, Fingerprint] | None:
    """(sweep id, fingerprint) of the experiment's newest finished sweep, if any."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    runs = client.search_runs([experiment.experiment_id], f"{SWEEP_RUNS} and attributes.status = 'FINISHED'",
                              order_by=["attributes.end_time DESC"], max_results=1)
    if not runs:
        return None
    fingerprint = fingerprint_from_tags(runs[0].data.tags)
    return (runs[0].data.tags.get("sweep_id", runs[0].info.run_id), fingerprint) if fingerprint else None


def log_canary_run(uri: str, experiment_name: str, canary_id: str, result: CanaryResult,
                   params: Mapping[str, str]) -> str:
    """The canary as one finished run in ``experiment_name`` (the sweep's with ``--from``): its
    verdict and reason as tags, per-class figures as metrics, canary.json as an artifact."""
    client = MlflowClient(uri)
    experiment = _experiment_id(client, experiment_name)
    tags = {"run_kind": "canary", "canary_id": canary_id, "verdict": result.verdict,
            **({"hold": result.hold} if result.hold else {}), "covered": str(result.age.covered).lower(),
            **({"twin": "true"} if result.age.twin else {}),
            "reason": result.reason[:5000], **({"sweep_id": result.sweep_id} if result.sweep_id else {})}
    run = client.create_run(experiment, run_name=canary_id, tags=resolve_tags(tags))
    run_id = str(run.info.run_id)
    _log_batch(client, run_id, metrics=canary_metrics(result), params=params)
    client.log_dict(run_id, result.model_dump(mode="json"), "canary.json")
    client.set_terminated(run_id, "FINISHED")
    return run_id
