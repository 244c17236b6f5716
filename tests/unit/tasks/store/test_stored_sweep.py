"""``specfleet_tasks.store.sweep.StoredSweep``: the one reader of a stored sweep. With a ``summary.json``
nothing re-derives what it holds (no gate, no analysis), for every command that reads an earlier
sweep; ``sweep.json`` holds the config, so a sweep reads the same after its config file moved;
a sweep written by ce4142f's ``make demo`` (format 1, stored under ``data/``) is read too."""

import html
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import specfleet.gates.equivalence
import specfleet.gates.quality
import specfleet.stats.equivalence
import specfleet.stats.quality
import specfleet.verdicts.analysis
from specfleet.errors import InputError
from specfleet.planning.timing import PriorTiming
from specfleet_cli.main import app
from specfleet_tasks.canary.context import CanaryLoad, sweep_context
from specfleet_tasks.plan.estimate import calibrated_timing, prior_timing
from specfleet_tasks.report.content import build_content
from specfleet_tasks.report.markdown import render_markdown
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.sweep import SWEEP_FORMAT, StoredSweep
from tests.support.adopted_sweep import AdoptedSweep, adopted_sweep

runner = CliRunner()
ROOT = Path(__file__).parents[4]
DEMO_CE4142F = Path(__file__).parent / "data" / "demo-ce4142f"
"""``make demo``'s sweep folder as ce4142f wrote it (its logs and report left out), with that commit's config."""
DERIVERS: tuple[Callable[..., object], ...] = (
    specfleet.verdicts.analysis.analyse_sweep, specfleet.verdicts.analysis.decide_sweep,
    specfleet.verdicts.analysis.sweep_quality,
    specfleet.gates.equivalence.arm_equivalence, specfleet.gates.quality.quality_checks,
    specfleet.stats.equivalence.greedy_equivalence, specfleet.stats.equivalence.stochastic_equivalence,
    specfleet.stats.quality.quality_gate)
"""What makes a gate or a decision: none of it may run while a finished sweep is read."""


def demo_prior() -> PriorTiming:
    """The plan's prior for the demo config (the synthetic sweep's fake models have no architecture);
    what a calibration on the stored sweep is laid over."""
    return prior_timing(load_sweep_config(ROOT / "configs" / "demo-cpu.yaml"), ROOT / "configs")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> AdoptedSweep:
    return adopted_sweep(tmp_path_factory.mktemp("stored"))


@contextmanager
def nothing_derived() -> Iterator[list[str]]:
    """Every reference to a deriving function, in every loaded project module, made to record its call."""
    called: list[str] = []
    patched: list[tuple[object, str, object]] = []
    for module in [m for name, m in sys.modules.items() if name.split(".")[0].startswith("specfleet")]:
        for attr, value in list(vars(module).items()):
            if any(value is f for f in DERIVERS):
                def record(*_: object, _name: str = attr, **__: object) -> object:
                    called.append(_name)
                    raise AssertionError(f"{_name} ran while a stored sweep was read")
                patched.append((module, attr, value))
                setattr(module, attr, record)
    try:
        yield called
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)


def test_reading_a_finished_sweep_runs_no_gate_and_no_analysis(sweep: AdoptedSweep) -> None:
    results, sweep_id = str(sweep.results), sweep.sweep_id
    with nothing_derived() as called:
        data = StoredSweep.find(sweep_id, sweep.results)
        markdown = render_markdown(build_content(data, 0.05), "report.html")  # the report
        planned = calibrated_timing(StoredSweep.find(sweep_id, sweep.results), demo_prior())  # plan --from
        predicted = runner.invoke(app, ["predict", sweep_id, "--results-dir", results, "--arm", "draft-k2",
                                        "--prompt-class", "code", "--concurrency", "2", "--json"])
        rules = runner.invoke(app, ["monitor", "rules", sweep_id, "--results-dir", results])
        canary = sweep_context(sweep_id, sweep.results, CanaryLoad(1, None, 4, 0, 8, 0.0), None)
    assert called == []
    assert predicted.exit_code == 0 and rules.exit_code == 0, (predicted.output, rules.output)
    assert planned.calibration.sweep_id == sweep_id
    assert data.report.decisions == sweep.summary.decisions and data.report.gates == sweep.summary.gates
    assert data.report.decided_by == "the sweep's summary.json"
    assert "draft-k2: greedy_exact_match passed" in markdown and "ngram-k3: greedy_exact_match FAILED" in markdown
    assert canary.arm == "draft-k2"


def test_a_sweep_without_a_summary_is_analysed_and_says_so(sweep: AdoptedSweep, tmp_path: Path) -> None:
    copy = tmp_path / sweep.sweep_id
    shutil.copytree(sweep.plan.store.dir, copy)
    (copy / "summary.json").unlink()
    with nothing_derived() as called, pytest.raises(AssertionError, match="analyse_sweep ran"):
        _ = StoredSweep(copy).report
    assert called == ["analyse_sweep"]
    data = StoredSweep(copy).report
    assert data.decided_by.startswith("recomputed from the stored cells (the sweep wrote no summary.json")
    assert data.cells_planned == len(list(sweep.plan.store.cells()))
    assert [v.verdict for v in data.class_verdicts] == [v.verdict for v in sweep.summary.class_verdicts]
    assert [(d.verdict, d.reason_code) for d in data.decisions] == [
        (d.verdict, d.reason_code) for d in sweep.summary.decisions]


def test_the_timing_a_budget_reads_comes_from_records_and_arm_timings(sweep: AdoptedSweep) -> None:
    stored = StoredSweep(sweep.plan.store.dir)
    prior = demo_prior()
    with nothing_derived() as called:
        timing = calibrated_timing(stored, prior, [sweep.summary])
    assert called == [] and timing.calibration.sweep_id == sweep.sweep_id


def test_sweep_json_holds_the_config_so_a_moved_config_changes_nothing(sweep: AdoptedSweep, tmp_path: Path) -> None:
    record = json.loads((sweep.plan.store.dir / "sweep.json").read_text())
    assert record["format"] == SWEEP_FORMAT and record["config_source"] == str((sweep.root / "sweep.yaml").resolve())
    copy = tmp_path / sweep.sweep_id
    shutil.copytree(sweep.plan.store.dir, copy)
    (copy / "sweep.json").write_text(json.dumps(record | {"config_source": str(tmp_path / "gone.yaml")}))
    stored = StoredSweep(copy)
    assert stored.config == sweep.plan.config
    assert stored.report.decisions == sweep.summary.decisions


def test_a_newer_format_is_refused_in_one_line(sweep: AdoptedSweep, tmp_path: Path) -> None:
    copy = tmp_path / "newer"
    copy.mkdir()
    record = json.loads((sweep.plan.store.dir / "sweep.json").read_text())
    (copy / "sweep.json").write_text(json.dumps(record | {"format": SWEEP_FORMAT + 1}))
    with pytest.raises(InputError, match=rf"newer/sweep.json: format: {SWEEP_FORMAT + 1} was written by a newer "
                                         rf"specfleet; this one reads formats 1 to {SWEEP_FORMAT}"):
        StoredSweep(copy)


def test_a_sweep_written_by_ce4142f_is_read(tmp_path: Path) -> None:
    """Format 1: ``sweep.json`` names the config's absolute path on the machine that ran it; the
    fixture keeps that config (ce4142f's ``configs/demo-cpu.yaml``) beside the results. Its summary
    predates the pooled noise, so its decisions are made again under today's rule, and it says so."""
    sweep_id = json.loads((DEMO_CE4142F / "summary.json").read_text())["sweep_id"]
    copy = tmp_path / sweep_id
    shutil.copytree(DEMO_CE4142F, copy)
    record = json.loads((copy / "sweep.json").read_text())
    assert set(record) == {"name", "config", "fingerprint"}
    (copy / "sweep.json").write_text(json.dumps(record | {"config": str(tmp_path / "elsewhere.yaml")}))
    with pytest.raises(InputError, match="written before sweep.json held its config .format 1., and its config "):
        _ = StoredSweep(copy).config
    (copy / "sweep.json").write_text(json.dumps(record | {"config": str(copy / "demo-cpu.yaml")}))
    stored = StoredSweep(copy)
    data = stored.report
    assert stored.record.format == 1 and stored.summary is not None and not stored.summary.noise
    assert stored.summary.format == 1 and data.decided_by.startswith(
        "recomputed from the stored cells (its summary.json was written before")
    assert len(stored.cells) == data.cells_planned and set(stored.records) == {c.key for c in stored.cells}
    assert [d.slice for d in data.decisions] == [d.slice for d in stored.summary.decisions]
    assert data.noise and data.mix and data.equivalence and data.class_verdicts
    markdown = render_markdown(build_content(stored, 0.05, with_predicted=False), "report.html")
    assert sweep_id in markdown.splitlines()[0]


def test_the_terminal_summary_md_the_report_and_mlflow_render_the_one_summary(
        sweep: AdoptedSweep, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's ``SweepReport``, made once by the aggregate step and stored, is the object every
    output renders: its verdicts at the mix, its noise and its cost table are found, as the same
    figures, in the terminal, ``summary.md``, the report (HTML and markdown) and MLflow."""
    from mlflow import MlflowClient

    from specfleet.verdicts.table import DecisionRow
    from specfleet_cli.render import print_sweep_summary
    from specfleet_tasks.report.headline import mix_lines, noise_lines
    from specfleet_tasks.report.publish import write_report
    from specfleet_tasks.report.summary_md import summary_markdown
    from specfleet_tasks.report.tables import NEGATIVE_COLUMNS
    from specfleet_tasks.tracking.runs import log_sweep_summary, open_sweep_run

    summary = sweep.summary
    print_sweep_summary(summary, "mlflow ui")
    terminal = capsys.readouterr().out
    markdown = summary_markdown(summary)
    with nothing_derived() as called:
        files = write_report(build_content(StoredSweep(sweep.plan.store.dir), 0.05,
                                           with_predicted=False), tmp_path / "report")
    assert called == []
    report_html, report_md = html.unescape(files.html.read_text()), files.markdown.read_text()
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = open_sweep_run(uri, sweep.plan.config, sweep.sweep_id, sweep.plan.fingerprint)
    log_sweep_summary(uri, parent, summary, markdown)
    client = MlflowClient(uri)
    logged_md = Path(client.download_artifacts(parent, "summary.md", str(tmp_path))).read_text()

    figures = [line.strip() for line in [*mix_lines(summary.mix), *noise_lines(summary.noise)]
               if not line.startswith("traffic mix:")]  # the mix itself: a table in the files
    assert len(figures) > 10 and any("saving +46.2%" in f for f in figures)
    for text in (terminal, markdown, report_html, report_md, logged_md):
        assert [f for f in figures if f not in text] == []
    metrics = client.get_run(parent).data.metrics
    for v in summary.mix:
        if v.fleet.saving_fraction is not None:
            assert metrics[f"mix.{v.name}.{v.sampling}.saving".replace(" ", "_")] == pytest.approx(
                v.fleet.saving_fraction)
    table = client.load_table(client.get_run(parent).info.experiment_id, "cost_table.json", run_ids=[parent])
    logged = [DecisionRow.model_validate({k: (None if v != v else v) for k, v in row.items()})
              for row in table.to_dict("records")]
    assert len(logged) == len(summary.cost_table)
    for got, made in zip(logged, summary.cost_table, strict=True):  # MLflow's table keeps floats to 10 digits
        numbers = {k for k, v in made.model_dump().items() if isinstance(v, float)}
        assert got.model_dump(exclude=numbers) == made.model_dump(exclude=numbers)
        assert got.model_dump(include=numbers) == pytest.approx(made.model_dump(include=numbers), rel=1e-8)
    for row in summary.cost_table:
        cost = f"{row.candidate_cost_per_million_usd:.2f}"
        assert cost in markdown and cost in report_md and cost in report_html
    names = [name for name, _ in NEGATIVE_COLUMNS]  # negative cells: the same columns in every file
    assert summary.negative_cells and "| " + " | ".join(names) + " |" in markdown
    assert "| " + " | ".join(names) + " |" in report_md and "".join(f"<th>{n}</th>" for n in names) in report_html
    assert all(row.reason in report_html and row.reason in report_md for row in summary.negative_cells)


def test_sweep_json_reads_back_the_demo_config_it_stored(tmp_path: Path) -> None:
    """The demo's traffic block keys its shares by concurrency level: JSON stores those keys as
    strings, and the stored config still reads back equal to the one the sweep ran."""
    from specfleet.contract.fingerprint import Fingerprint
    from specfleet_tasks.store.sweep import SweepRecord

    config = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    assert config.traffic is not None and config.traffic.concurrency
    record = SweepRecord(name=config.name, config_source="configs/demo-cpu.yaml", config=config,
                         fingerprint=Fingerprint(target=None, tokenizer=None, engine="vllm", engine_version=None))
    (tmp_path / "sweep.json").write_text(record.model_dump_json(indent=2))
    assert StoredSweep(tmp_path).config == config


def test_a_failed_model_fit_leaves_the_summary_whole(sweep: AdoptedSweep, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fitted overhead kept for later plans is a convenience: when the fit fails the summary is
    still made, its decisions the same, the figure None and a note saying why."""
    import specfleet_tasks.analysis.summary as summary_module

    def failing(*_: object, **__: object) -> object:
        raise np.linalg.LinAlgError("singular matrix")

    assert sweep.summary.model_overhead_ms is not None
    monkeypatch.setattr(summary_module, "calibrate", failing)
    again = summary_module.aggregate(sweep.plan, [])
    assert again.model_overhead_ms is None and again.decisions == sweep.summary.decisions
    assert any(n.startswith("performance model: no fit to keep for later plans (LinAlgError: singular matrix)")
               for n in again.notes)


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", r"sweep.json: Invalid JSON"),
    ('{"name": "x", "config_source": "c.yaml", "fingerprint": {}}', r"sweep.json: fingerprint: target: Field required"),
    (b"\xff\xfe", r"sweep.json: cannot read \(UnicodeDecodeError\)"),
])
def test_a_damaged_sweep_json_is_one_line_naming_it(tmp_path: Path, text: str | bytes, message: str) -> None:
    path = tmp_path / "sweep.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError, match=message):
        StoredSweep(tmp_path)
