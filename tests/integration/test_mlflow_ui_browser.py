"""The MLflow UI shows a sweep's cell runs with acceptance and latency columns, in a real
browser: the session's real ``mlflow server`` on loopback over SQLite (artifacts in its S3),
runs logged by the sweep's own tracking tasks, headless Chromium reading the rendered DOM;
and ``specfleet report`` attaches its files to the sweep's parent run through that server.

The runs table nests child runs under a collapsed parent and shows no metric columns by
default. A shared view (experiment tag ``mlflow.sharedViewState.<key>``, opened with
``?viewStateShareKey=<key>``) selects the columns; sorting by run name turns nesting off.
"""

import json
import shutil
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
from mlflow import MlflowClient
from typer.testing import CliRunner

from specfleet.contract import CellIdentity
from specfleet.results.records import RequestRecord
from specfleet_cli.report import report
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.tracking.runs import experiment_page, log_cell_runs, log_sweep_summary, open_sweep_run
from tests.integration.reference import Tracking
from tests.support.sweep_data import records, store_cell, write_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium")
COLUMNS = ("acceptance_rate", "ttft_ms_p95", "itl_ms_p95")
VIEW_KEY = "specfleet-cells"
PARENT_VIEW_KEY = "specfleet-sweeps"
NAME = "attributes.`Run Name`"
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class GridCells(HTMLParser):
    """Text of each runs-table cell, keyed by the grid's (row-index, col-id) attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str | None, str | None]] = []
        self.cells: dict[str, dict[str, str]] = defaultdict(lambda: defaultdict(str))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            return
        found = dict(attrs)
        row, col = self.stack[-1] if self.stack else (None, None)
        self.stack.append((found.get("row-index") or row, found.get("col-id") or col))

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID_TAGS and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and None not in self.stack[-1]:
            row, col = self.stack[-1]
            self.cells[str(row)][str(col)] += data.strip()


def _chromium(profile: Path, url: str, *mode: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--window-size=1600,1000",
         "--virtual-time-budget=15000", *mode, url],
        capture_output=True, text=True, timeout=90, check=True)


def _records(ident: CellIdentity) -> list[RequestRecord]:
    """In the same window the draft completes four requests, the opening baseline three and the
    closing one four: the verdict at the mix has a saving and a noise floor other than 0."""
    if ident.k is not None:
        return records(gap_ms=5, tokens_per_chunk=2)
    return records(gap_ms=5, n=4 if ident.phase == "baseline_end" else 3)


def _grid(profile: Path, page: str, shot: Path) -> GridCells:
    grid = GridCells()
    grid.feed(_chromium(profile, page, "--dump-dom", f"--screenshot={shot}").stdout)
    return grid


def _parent_run_shows_the_verdict_at_the_mix(client: MlflowClient, plan: SweepPlan, parent: str, uri: str,
                                             tmp_path: Path) -> None:
    """The experiment opens on its runs table (``mlflow.experimentKind``), and the parent run
    carries the verdict at the traffic mix as columns to compare nights by."""
    summary = aggregate(plan, [])
    log_sweep_summary(uri, parent, summary, summary_markdown(summary))
    experiment = client.get_run(parent).info.experiment_id
    landing = _grid(tmp_path / "chromium-landing", experiment_page(uri, experiment),
                    ARTIFACTS / "mlflow_experiment_landing.png")
    assert any(row.get(NAME, "").endswith(plan.sweep_id) for row in landing.cells.values())  # the runs table

    [verdict] = [v for v in summary.mix if v.name == "draft-k2"]
    prefix = f"mix.{verdict.name}.{verdict.sampling}"
    columns = [f"{prefix}.saving", f"{prefix}.noise_floor", f"{prefix}.coverage", f"{prefix}.entry_gate"]
    view = {"searchFilter": "tags.run_kind = 'sweep'", "orderByKey": "attributes.run_name", "orderByAsc": True,
            "selectedColumns": [f"metrics.`{name}`" for name in columns] + ["tags.`fingerprint.engine_version`"]}
    client.set_experiment_tag(experiment, f"mlflow.sharedViewState.{PARENT_VIEW_KEY}", json.dumps(view))
    grid = _grid(tmp_path / "chromium-parent", f"{uri}/#/experiments/{experiment}/runs?viewStateShareKey="
                 f"{PARENT_VIEW_KEY}", ARTIFACTS / "mlflow_parent_runs.png")
    [row] = [row for row in grid.cells.values() if row.get(NAME, "").endswith(plan.sweep_id)]
    fleet = verdict.fleet
    assert fleet.saving_fraction and fleet.noise_floor  # figures other than 0, to be read off the page
    assert float(row[f"metrics.`{prefix}.saving`"]) == pytest.approx(fleet.saving_fraction, abs=1e-3)
    assert float(row[f"metrics.`{prefix}.noise_floor`"]) == pytest.approx(fleet.noise_floor, abs=1e-3)
    assert float(row[f"metrics.`{prefix}.coverage`"]) == pytest.approx(verdict.coverage)
    assert float(row[f"metrics.`{prefix}.entry_gate`"]) == float(verdict.passed)
    assert row["tags.`fingerprint.engine_version`"] == plan.fingerprint.engine_version


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_cell_runs_listed_with_acceptance_and_latency_columns(
        tracking: Tracking, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    write_config(tmp_path)
    plan = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results")
    cells = [store_cell(plan.store, plan.config, ident, key, _records(ident)) for key, ident in plan.cells.items()]
    uri = tracking.uri
    parent = open_sweep_run(uri, plan.config, plan.sweep_id, plan.fingerprint)
    assert log_cell_runs(uri, parent, cells, plan.store, plan.fingerprint.digest) == len(cells)
    client = MlflowClient(uri)
    experiment = client.get_run(parent).info.experiment_id
    view = {"searchFilter": "tags.run_kind = 'cell'", "orderByKey": "attributes.run_name", "orderByAsc": True,
            "selectedColumns": [f"metrics.`{name}`" for name in COLUMNS]}
    client.set_experiment_tag(experiment, f"mlflow.sharedViewState.{VIEW_KEY}", json.dumps(view))
    page = f"{uri}/#/experiments/{experiment}/runs?viewStateShareKey={VIEW_KEY}"

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "mlflow_runs_table.png"
    grid = GridCells()
    grid.feed(_chromium(tmp_path / "chromium", page, "--dump-dom", f"--screenshot={shot}").stdout)
    assert shot.stat().st_size > 10_000
    names = {index: row[NAME] for index, row in grid.cells.items() if NAME in row}
    assert len(names) == len(cells)
    for cell in cells:  # the name cell's text starts with the run's colour swatch, e.g. '#04867d'
        index = next(i for i, name in names.items() if name.endswith(cell.identity.label))
        shown = grid.cells[index]
        assert float(shown["metrics.`ttft_ms_p95`"]) == pytest.approx(cell.ttft_ms.p95.value if cell.ttft_ms.p95 else 0)
        assert float(shown["metrics.`itl_ms_p95`"]) == pytest.approx(
            cell.itl_per_chunk_ms.p95.value if cell.itl_per_chunk_ms.p95 else 0)
        spec = cell.spec_decode
        assert shown["metrics.`acceptance_rate`"] == (f"{spec.acceptance_rate:g}" if spec else "-")

    _parent_run_shows_the_verdict_at_the_mix(client, plan, parent, uri, tmp_path)

    app = typer.Typer()
    app.command()(report)
    result = CliRunner().invoke(app, [str(plan.store.dir), "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    assert f"to run {parent}" in result.output
    assert {a.path for a in client.list_artifacts(parent, "report")} == {"report/report.html", "report/report.md"}
