"""``specfleet sync``: log a sweep that MLflow missed (the server was down, or went down
mid-sweep) from its results dir. Idempotent: the parent run is found by its sweep id, cells
already logged are skipped, the tables are replaced, so a second sync creates nothing."""

from pathlib import Path

from prefect import flow
from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.report.sweep_report import run_status
from specfleet_flows.sweep import DEFAULT_RESULTS_DIR
from specfleet_tasks.plan.sweep_plan import open_sweep
from specfleet_tasks.report.publish import REPORT_HTML, REPORT_MARKDOWN, log_to_sweep_run
from specfleet_tasks.store.sweep import SUMMARY_MARKDOWN, StoredSweep
from specfleet_tasks.tracking.runs import (
    close_sweep_run,
    log_cell_runs,
    log_sweep_summary,
    open_sweep_run,
    require_reachable,
    tracking_uri,
    use_short_http_retries,
)

REPORT_DIR = "report"


class SyncResult(RecordModel):
    sweep_id: str
    parent_run_id: str
    cells_stored: int
    runs_created: int = Field(description="Child runs created now (0 when everything was logged before).")
    summary_logged: bool = Field(description="False when the sweep has no summary yet (it never finished).")
    report: str = Field(description="Where the report files went, or why they did not.")
    status: str


@flow(name="specfleet-sync")
def sync_flow(sweep_id: str, tracking: str | None = None, results_dir: str = DEFAULT_RESULTS_DIR) -> SyncResult:
    store, stored = open_sweep(Path(results_dir), sweep_id)
    uri = tracking_uri(tracking)
    use_short_http_retries()
    require_reachable(uri)
    sweep = StoredSweep(store.dir, stored)
    config, fingerprint = sweep.config, stored.fingerprint
    parent = open_sweep_run(uri, config, sweep_id, fingerprint)
    cells = list(store.cells())
    created = log_cell_runs(uri, parent, cells, store, fingerprint.digest)
    summary = sweep.summary
    if summary is not None:
        log_sweep_summary(uri, parent, summary, (store.dir / SUMMARY_MARKDOWN).read_text(encoding="utf-8"))
    status = run_status(summary)
    report_files = [store.dir / REPORT_DIR / name for name in (REPORT_HTML, REPORT_MARKDOWN)]
    report = (log_to_sweep_run(uri, config.name, sweep_id, report_files) if all(p.exists() for p in report_files)
              else f"no report under {store.dir / REPORT_DIR} (`specfleet report {sweep_id}` writes and logs one)")
    close_sweep_run(uri, parent, status)
    return SyncResult(sweep_id=sweep_id, parent_run_id=parent, cells_stored=len(cells), runs_created=created,
                      summary_logged=summary is not None, report=report, status=status)
