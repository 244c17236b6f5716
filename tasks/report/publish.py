"""Write the report files, then attach them to the sweep's MLflow parent run (tag ``sweep_id``)
when the tracking store can be reached; the files never depend on MLflow."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient

from specfleet_tasks.report.content import ReportContent
from specfleet_tasks.report.html import render_html
from specfleet_tasks.report.markdown import render_markdown
from specfleet_tasks.store.results import atomic_write_text
from specfleet_tasks.tracking.runs import SWEEP_RUNS

REPORT_HTML = "report.html"
REPORT_MARKDOWN = "report.md"
ARTIFACT_DIR = "report"
SQLITE_PREFIX = "sqlite:///"


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path


def write_report(content: ReportContent, out_dir: Path) -> ReportFiles:
    files = ReportFiles(out_dir / REPORT_HTML, out_dir / REPORT_MARKDOWN)
    atomic_write_text(files.html, render_html(content))
    atomic_write_text(files.markdown, render_markdown(content, REPORT_HTML))
    return files


def log_to_sweep_run(uri: str, experiment_name: str, sweep_id: str, paths: Sequence[Path]) -> str:
    """Log ``paths`` under ``report/`` on the sweep's parent run. Returns one line saying
    where they went or why they did not go (no store, no run, MLflow unreachable)."""
    if uri.startswith(SQLITE_PREFIX) and not Path(uri.removeprefix(SQLITE_PREFIX)).is_file():
        return f"MLflow: not logged: no tracking store at {uri}"
    try:
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(experiment_name)
        runs = [] if experiment is None else client.search_runs(
            [experiment.experiment_id], f"{SWEEP_RUNS} and tags.sweep_id = '{sweep_id}'", max_results=1)
        if not runs:
            return f"MLflow: not logged: no sweep run with sweep_id {sweep_id} in {experiment_name!r} at {uri}"
        run_id = runs[0].info.run_id
        for path in paths:
            client.log_artifact(run_id, str(path), ARTIFACT_DIR)
    except Exception as err:  # any failure to reach or use the store: the files are already written
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return f"MLflow: not logged: {uri} unreachable ({type(err).__name__}: {first})"
    return f"MLflow: logged {', '.join(p.name for p in paths)} to run {run_id} under {ARTIFACT_DIR}/ ({uri})"
