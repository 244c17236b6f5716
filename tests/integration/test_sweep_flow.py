"""The sweep end to end, on the reference sweep (``tests/integration/reference.py``): the Prefect
flow on a real Prefect server, local Ray, a real MLflow tracking server and real vLLM CPU
servers on the fixture models; then resume and revalidate."""

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from mlflow import MlflowClient
from prefect import get_client
from prefect.artifacts import Artifact
from prefect.events.filters import EventFilter, EventNameFilter
from typer.testing import CliRunner, Result

from specfleet.gates.quality import QualityProbe
from specfleet.report.sweep_report import SweepReport
from specfleet_cli.sweep import revalidate
from specfleet_flows.revalidate import EVENT, revalidate_flow
from specfleet_tasks.report.headline import INCONCLUSIVE_TITLE, MIX_TITLE
from specfleet_tasks.report.sections import TITLES
from tests.integration.reference import (
    ARTIFACTS_BUCKET,
    CELLS,
    EXPERIMENT,
    KEY_VALUE,
    QUALITY_TOLERANCE,
    RESULTS_BUCKET,
    ReferenceSweep,
)

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]

REQUIRED = {"ttft_ms_p95", "itl_ms_p95", "qualified_tokens_per_s", "output_tokens_per_s", "e2e_ms_p95"}
ACCEPTANCE = {"acceptance_rate", "mean_acceptance_length"}


def _revalidate(reference: ReferenceSweep, *args: str) -> Result:
    """``specfleet revalidate`` in this process (its flow reports to the session's Prefect server)."""
    app = typer.Typer()
    app.command()(revalidate)
    return CliRunner().invoke(app, [*args, "--tracking-uri", reference.tracking.uri,
                                    "--results-dir", str(reference.results)])


def test_one_parent_run_and_one_child_run_per_cell(reference: ReferenceSweep) -> None:
    parents, cells = reference.runs("sweep"), reference.runs("cell")
    assert len(parents) == 1 and parents[0].data.tags["sweep_id"] == reference.sweep_id
    assert parents[0].info.status == "FINISHED"
    assert len(cells) == CELLS
    assert {c.data.tags["mlflow.parentRunId"] for c in cells} == {parents[0].info.run_id}
    assert sorted(c.data.tags["arm"] for c in cells) == ["baseline", "baseline", "draft-k2", "ngram-k3"]
    for cell in cells:
        names = set(cell.data.metrics)
        assert names >= REQUIRED, cell.info.run_name
        speculative = cell.data.tags["method"] != "baseline"
        assert (names >= ACCEPTANCE) == speculative and (not ACCEPTANCE & names) == (not speculative)
        assert "client_mean_acceptance_length" in names  # tokens per step, 1 without speculation
        assert ("request_mean_acceptance_length" in names) == speculative  # vLLM sends it to speculative arms
        assert MlflowClient(reference.tracking.uri).list_artifacts(cell.info.run_id, "records")


def test_a_log_gets_a_line_per_stage_and_per_finished_cell_with_elapsed_and_predicted_remaining_time(
    reference: ReferenceSweep,
) -> None:
    """The reference sweep's stdout is a pipe, as in ``make demo > log``: no progress bar, lines."""
    times = r"\((?:\d+m)?\d+s elapsed, (?:predicted (?:\d+m)?\d+s left|overrunning its prediction|done)\)"
    finished = re.findall(rf"^cell (\d+)/(\d+) finished: (.+) {times}$", reference.output, re.MULTILINE)
    stored = {cell.identity.label for cell in reference.store.cells()}
    assert [int(n) for n, _, _ in finished] == list(range(1, len(stored) + 1))
    assert {int(total) for _, total, _ in finished} == {len(stored)}
    assert {label for _, _, label in finished} == stored
    assert re.search(rf"^cell {len(stored)}/{len(stored)} finished: .+ \(\S+ elapsed, done\)$", reference.output,
                     re.MULTILINE)
    stages = re.findall(rf"^stage started: (.+) {times}$", reference.output, re.MULTILINE)
    assert stages == ["baseline", "speculative arms", "baseline (end)"]
    assert "\x1b[" not in reference.output  # no terminal control codes in a log


def test_tables_on_the_parent_run_and_in_the_results_dir(reference: ReferenceSweep) -> None:
    parent = reference.runs("sweep")[0]
    artifacts = {a.path for a in MlflowClient(reference.tracking.uri).list_artifacts(parent.info.run_id)}
    assert {"cost_table.json", "summary.json", "summary.md"} <= artifacts
    assert parent.data.params["arms.draft.k"] == "[2]"
    assert parent.data.tags["fingerprint.drafts"].count(str(reference.root / "draft")) == 1
    out = reference.store.dir
    assert (out / "summary.json").is_file() and "## Negative-result cells" in (out / "summary.md").read_text()
    assert "cost per million SLO-qualified tokens on whole replicas" in reference.output


def test_the_verdict_at_the_mix_comes_first_and_is_on_the_parent_run(reference: ReferenceSweep) -> None:
    summary = SweepReport.model_validate_json((reference.store.dir / "summary.json").read_text())
    assert summary.mix, summary.notes
    printed = reference.output
    assert printed.index(MIX_TITLE) < printed.index(TITLES["decisions"]) < printed.index(TITLES["gates"])
    assert all(v.headline in printed for v in summary.mix)
    assert (reference.store.dir / "summary.md").read_text().index(MIX_TITLE) < \
        (reference.store.dir / "summary.md").read_text().index(f"## {TITLES['decisions']}")
    client = MlflowClient(reference.tracking.uri)
    parent = reference.runs("sweep")[0]
    assert client.get_experiment(parent.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    logged = parent.data.metrics
    for verdict in summary.mix:
        prefix = f"mix.{verdict.name}.{verdict.sampling}"
        assert logged[f"{prefix}.coverage"] == pytest.approx(verdict.coverage)
        assert logged[f"{prefix}.entry_gate"] == float(verdict.passed)
        assert logged.get(f"{prefix}.saving") == (None if verdict.fleet.saving_fraction is None
                                                  else pytest.approx(verdict.fleet.saving_fraction))
    # three verdicts: counted on the parent, tagged on every speculative cell run, inconclusive ones listed apart
    three = ("adopt", "reject", "inconclusive")
    assert {d.verdict for d in summary.decisions} <= set(three) and {v.verdict for v in summary.mix} <= set(three)
    assert [logged[f"decisions_{name}"] for name in ("adopted", "rejected", "inconclusive")] == [
        float(sum(d.verdict == v for d in summary.decisions)) for v in three]
    assert all(row.verdict == "reject" for row in summary.negative_cells)
    verdict_of = {(d.slice.arm, d.slice.prompt_class, d.slice.sampling, f"{d.slice.load_value:g}"): d.verdict
                  for d in summary.decisions}
    tagged = [r.data.tags for r in reference.runs("cell") if r.data.tags.get("method") != "baseline"]
    assert tagged and all(t.get("verdict") == verdict_of.get(
        (t["arm"], t["prompt_class"], t["sampling"], f"{float(t.get('concurrency') or t['rate_per_s']):g}"))
        for t in tagged)
    assert INCONCLUSIVE_TITLE in printed
    assert f"## {INCONCLUSIVE_TITLE}" in (reference.store.dir / "summary.md").read_text()
    assert f"MLflow UI: open {reference.tracking.uri}" in reference.output
    table, markdown = Artifact.get(f"{EXPERIMENT}-cost-table"), Artifact.get(f"{EXPERIMENT}-sweep-summary")
    assert table is not None and table.type == "table" and markdown is not None and markdown.type == "markdown"
    assert markdown.data is not None and reference.sweep_id in str(markdown.data)


def test_acceptance_per_request_per_class_in_the_summary_and_on_the_parent_run(reference: ReferenceSweep) -> None:
    """Per speculative arm and class, vLLM's per-request figures pool to the counters (both count
    drafting steps only); ngram's tokens per step over all steps read below them; the cost table
    carries both; summary.md and the parent run show them."""
    summary = SweepReport.model_validate(reference.summary())
    rows = {row.arm: row for row in summary.acceptance}
    assert set(rows) == {"draft-k2", "ngram-k3"}
    logged = reference.runs("sweep")[0].data.metrics
    for arm, row in rows.items():
        counters = row.counter_mean_acceptance_length
        assert counters is not None and row.cells == 1
        assert row.request_mean_acceptance_length.token_weighted_mean == pytest.approx(counters, rel=1e-9)
        assert row.client_mean_acceptance_length.token_weighted_mean is not None
        assert logged[f"acceptance.{arm}.code.greedy.counter_mean_acceptance_length"] == pytest.approx(counters)
        assert f"acceptance.{arm}.code.greedy.client_mean_acceptance_length_p50" in logged
    ngram = rows["ngram-k3"]
    assert ngram.client_mean_acceptance_length.token_weighted_mean < (ngram.counter_mean_acceptance_length or 0)
    assert all(row.tokens_per_step is not None for row in summary.cost_table if row.method != "baseline")
    assert "## Acceptance length per request" in (reference.store.dir / "summary.md").read_text()


def test_the_quality_gate_ran_for_every_speculative_arm(reference: ReferenceSweep) -> None:
    """Every arm answered the code class's bundled scored set on the real engine; each speculative
    arm's gate compared its scores with the baseline's, and the sweep shows it everywhere."""
    summary = SweepReport.model_validate(reference.summary())
    assert [(q.arm, q.prompt_class, q.sampling) for q in summary.quality] == [
        ("draft-k2", "code", "greedy"), ("ngram-k3", "code", "greedy")]
    parent = reference.runs("sweep")[0]
    for check in summary.quality:
        result = check.result
        assert result is not None, check.not_run
        assert result.items > 0 and result.tolerance == QUALITY_TOLERANCE
        assert result.difference is not None and result.difference.low is not None
        assert f"quality.{check.arm}.code.greedy.score" in parent.data.metrics
        printed = [line for line in reference.output.splitlines() if ": quality " in line]
        assert any(check.arm in line.split(": quality ")[0] for line in printed)  # beside the other gates
        for decision in (d for d in summary.decisions if d.slice.arm == check.arm):
            assert decision.gates[-1] == check.gate()
    for arm in ("baseline", "draft-k2", "ngram-k3"):
        probe = QualityProbe.model_validate_json((reference.store.dir / "quality" / f"{arm}.json").read_text())
        answers = probe.classes["code"]
        assert answers is not None
        scores = [a.score for a in answers.answers["greedy"].values()]
        assert None not in scores, (arm, scores)
        assert any(s != 0 for s in scores) and any(s != 1 for s in scores), (arm, scores)  # neither all 0 nor all 1


def test_the_api_key_is_never_logged(reference: ReferenceSweep) -> None:
    """Every file the sweep wrote (results, per-request Parquet, server logs), MLflow's store,
    every object in the S3 buckets (artifacts and the results mirror) and everything it
    printed, searched for the planted key."""
    written = [path for root in (reference.root, reference.tracking.root) for path in root.rglob("*")
               if path.is_file()]
    assert any(path.suffix == ".log" for path in written) and any(path.suffix == ".parquet" for path in written)
    assert [path for path in written if KEY_VALUE.encode() in path.read_bytes()] == []
    bucket = reference.tracking.bucket()
    stored = [(name, key) for name in (ARTIFACTS_BUCKET, RESULTS_BUCKET) for key in reference.tracking.objects(name)]
    assert any(key.endswith(".parquet") for _, key in stored)
    assert [key for name, key in stored
            if KEY_VALUE.encode() in bucket.get_object(Bucket=name, Key=key)["Body"].read()] == []
    assert KEY_VALUE not in reference.output


def test_resume_of_a_finished_sweep_starts_no_server(reference: ReferenceSweep) -> None:
    logs = reference.store.dir / "logs"
    before = {p.name: p.stat().st_mtime_ns for p in logs.iterdir()}
    code, output = reference.cli("sweep", str(reference.config), "--resume", reference.sweep_id)
    assert code == 0, output[-4000:]
    assert "0 servers started" in output and f"sweep id: {reference.sweep_id}" in output
    assert {p.name: p.stat().st_mtime_ns for p in logs.iterdir()} == before
    assert len(reference.runs("cell")) == CELLS and len(reference.runs("sweep")) == 1


@pytest.fixture
def changed_draft(reference: ReferenceSweep) -> Iterator[Path]:
    """The reference sweep's draft with one byte more in its config; put back afterwards, so the
    tests after this one see the sweep's own fingerprint."""
    config = reference.root / "draft" / "config.json"
    original = config.read_bytes()
    config.write_bytes(original + b"\n")
    yield config
    config.write_bytes(original)


def test_revalidate_check_says_unchanged(reference: ReferenceSweep) -> None:
    unchanged = _revalidate(reference, str(reference.config), "--check")
    assert unchanged.exit_code == 0, unchanged.output
    assert unchanged.stdout.strip().splitlines()[-1] == "unchanged"


def test_revalidate_check_sees_a_changed_draft(reference: ReferenceSweep, changed_draft: Path) -> None:
    changed = _revalidate(reference, str(reference.config), "--check")
    assert changed.exit_code == 0, changed.output
    assert changed.stdout.strip().splitlines()[-1] == "changed: draft"


def test_revalidate_emits_the_trigger_event(reference: ReferenceSweep, changed_draft: Path) -> None:
    """The watcher's run_sweep=False leaves the sweep to the trigger."""
    result = revalidate_flow(str(reference.config), run_sweep=False, tracking=reference.tracking.uri,
                             results_dir=str(reference.results))
    assert result.changed == ["draft"] and result.event_emitted and result.sweep is None
    wanted = EventFilter(event=EventNameFilter(name=[EVENT]))
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while not (events := [e for e in client.read_events(wanted, limit=50).events
                              if e.resource.id == f"specfleet.config.{EXPERIMENT}"]) and time.monotonic() < deadline:
            time.sleep(1)
    assert events and events[0].payload["changed"] == ["draft"]
    # what the nightly-sweep trigger's run sweeps (infra/prefect/prefect.yaml)
    assert events[0].payload["config_path"] == str(reference.config)
    assert events[0].payload["results_dir"] == str(reference.results)
