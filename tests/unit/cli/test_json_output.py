"""``--json`` of ``sweep``, ``revalidate``, ``sync`` and ``report``: one JSON object on stdout.
``report`` runs here on a stored synthetic sweep (``tests/unit/tasks/adopted_sweep.py``). ``sweep``
and ``revalidate`` need real vLLM servers and ``sync`` a Prefect flow run, so their objects are
checked through the functions that build them (``sweep_json``, ``revalidate_json``,
``sync_json``), and their bad input through the CLI."""

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from specfleet.report.sweep_report import SweepReport
from specfleet_cli.main import app
from specfleet_cli.output import stdout_to_stderr
from specfleet_cli.sweep import revalidate_json, sweep_json, sync_json
from specfleet_flows.revalidate import Revalidation
from specfleet_flows.sync import SyncResult
from tests.support.adopted_sweep import AdoptedSweep, adopted_sweep
from tests.support.sweep_data import write_config

runner = CliRunner()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> AdoptedSweep:
    return adopted_sweep(tmp_path_factory.mktemp("json"))


def test_sweep_json_says_where_the_sweep_went_and_holds_its_summary(sweep: AdoptedSweep) -> None:
    summary = sweep.summary.model_copy(update={"failed_cells": ["draft-k2 / code / c1: server died"]})
    printed = json.loads(json.dumps(sweep_json(summary)))
    folder = sweep.results / sweep.sweep_id
    assert (printed["sweep_id"], printed["sweep_dir"]) == (sweep.sweep_id, str(folder))
    assert (printed["summary_json"], printed["summary_md"]) == (str(folder / "summary.json"),
                                                                str(folder / "summary.md"))
    assert printed["failed_cells"] == 1  # what makes the sweep exit 3
    assert SweepReport.model_validate(printed["summary"]) == summary  # summary.json's own shape


def test_revalidate_json_has_the_verdict_and_the_sweep_it_ran(sweep: AdoptedSweep) -> None:
    checked = Revalidation(config_name="unit", fingerprint="new", validated_sweep="old-sweep",
                           validated_fingerprint="old", changed=["draft", "engine"])
    printed = json.loads(json.dumps(revalidate_json(checked)))
    assert (printed["verdict"], printed["changed"], printed["event_emitted"], printed["sweep"]) == (
        "changed: draft, engine", ["draft", "engine"], False, None)
    assert (printed["validated_sweep"], printed["fingerprint"]) == ("old-sweep", "new")
    ran = checked.model_copy(update={"event_emitted": True, "sweep": sweep.summary})
    printed = json.loads(json.dumps(revalidate_json(ran)))
    assert printed["event_emitted"] is True and printed["sweep"] == json.loads(json.dumps(sweep_json(sweep.summary)))
    unchanged = json.loads(json.dumps(revalidate_json(checked.model_copy(update={"changed": []}))))
    assert unchanged["verdict"] == "unchanged"


def test_sync_json_counts_what_was_logged_and_hides_the_credentials() -> None:
    result = SyncResult(sweep_id="s1", parent_run_id="r1", cells_stored=5, runs_created=2, summary_logged=True,
                        report="not written", status="FINISHED")
    printed = json.loads(json.dumps(sync_json(result, "https://ops:secret@mlflow.internal:5000")))
    assert (printed["runs_created"], printed["already_logged"], printed["cells_stored"]) == (2, 3, 5)
    assert printed["tracking_uri"] == "https://mlflow.internal:5000" and "secret" not in json.dumps(printed)
    assert (printed["parent_run_id"], printed["summary_logged"], printed["status"]) == ("r1", True, "FINISHED")


@pytest.mark.parametrize("command", ["sweep", "revalidate"])
def test_bad_input_with_json_is_one_line_on_stderr_and_nothing_on_stdout(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(write_config(tmp_path).read_text().replace("concurrency: [1]", "concurrency: [0]"))
    result = runner.invoke(app, [command, str(bad), "--json", "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2 and result.stdout == ""
    assert "load.concurrency[0]" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_under_json_what_steps_print_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr(True):
        print("progress")
        Console().print("sweep id: x")  # as flows/sweep.py prints it
    with stdout_to_stderr(False):
        print("table")
    captured = capsys.readouterr()
    assert (captured.out, captured.err.split()) == ("table\n", ["progress", "sweep", "id:", "x"])


def test_report_json_names_the_files_and_why_mlflow_has_them_not(sweep: AdoptedSweep, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    result = runner.invoke(app, ["report", sweep.sweep_id, "--results-dir", str(sweep.results), "--out",
                                 str(tmp_path / "out"), "--tracking-uri", uri, "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert (printed["sweep_id"], printed["against"]) == (sweep.sweep_id, None)
    assert (printed["html"], printed["markdown"]) == (str(tmp_path / "out" / "report.html"),
                                                      str(tmp_path / "out" / "report.md"))
    assert Path(printed["html"]).is_file() and Path(printed["markdown"]).is_file()
    assert printed["mlflow"] == f"MLflow: not logged: no tracking store at {uri}"
    summary = sweep.summary
    assert [(d["arm"], d["prompt_class"], d["sampling"], d["verdict"], d["reason"]) for d in printed["decisions"]] == [
        (d.slice.arm, d.slice.prompt_class, d.slice.sampling, d.verdict, d.reason_code) for d in summary.decisions]
    assert printed["decisions"] and {d["verdict"] for d in printed["decisions"]} <= {"adopt", "reject", "inconclusive"}
    assert [(m["arm"], m["sampling"], m["verdict"]) for m in printed["mix"]] == [
        (m.name, m.sampling, m.verdict) for m in summary.mix]
    assert printed["mix"] and all({"partial", "saving_fraction", "saving_low", "saving_high"} <= set(m)
                                  for m in printed["mix"])


@pytest.mark.parametrize("command", [["sweep"], ["revalidate"], ["sync"], ["report"], ["monitor", "rules"]])
def test_each_command_lists_json(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "--json" in result.stdout, command
