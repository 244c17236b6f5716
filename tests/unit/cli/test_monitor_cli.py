"""``specfleet monitor rules`` over a stored synthetic sweep that adopted draft-k2
(``tests/support/adopted_sweep.py``), and the speculation-off arguments every sweep stores."""

import json
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.report.sweep_report import SweepReport
from specfleet_cli.main import app
from specfleet_tasks.report.summary_md import summary_markdown
from tests.support.adopted_sweep import GAP_MS, AdoptedSweep, adopted_sweep

runner = CliRunner()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> AdoptedSweep:
    return adopted_sweep(tmp_path_factory.mktemp("monitor"))


def _rules(sweep: AdoptedSweep, *args: str) -> tuple[dict[str, object], str]:
    result = runner.invoke(app, ["monitor", "rules", sweep.sweep_id, "--results-dir", str(sweep.results), *args])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout), result.stdout


def _alerts(rules: dict[str, object]) -> list[dict[str, object]]:
    [group] = rules["groups"]  # type: ignore[index]
    return [r for r in group["rules"] if "alert" in r]


def _one_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_the_adopted_arm_gets_the_break_even_and_drift_floor_it_measured(sweep: AdoptedSweep) -> None:
    rules, text = _rules(sweep)
    alerts = _alerts(rules)
    assert {a["annotations"]["arm"] for a in alerts} == {"draft-k2"}  # type: ignore[index]
    [noise] = [n.relative_sd for n in sweep.summary.noise if n.metric == "qualified_tokens_per_s"]
    assert noise is not None and 0 < noise < 0.05  # the closing windows are within a percent or two
    for level in (1, 4):
        break_even = GAP_MS[("draft-k2", level)] / GAP_MS[("baseline", level)]
        below, drift = [a for a in alerts if a["labels"]["concurrency_bucket"] == str(level)]  # type: ignore[index]
        assert below["alert"] == "SpeculationBelowBreakEven" and drift["alert"] == "SpeculationAcceptanceDrift"
        assert f" < {break_even:.4g} and on" in str(below["expr"])
        assert below["annotations"]["break_even_tokens_per_step"] == f"{break_even:.2f}"  # type: ignore[index]
        # the arm streams two tokens a chunk: its tokens per step, less the sweep's noise floor
        assert f" < {2 * (1 - noise):.4g} and on" in str(drift["expr"])
        assert below["for"] == drift["for"] == "10m"
    assert text.startswith(f"# specfleet monitor rules: sweep {sweep.sweep_id}, arm draft-k2 (adopted at the "
                           f"traffic mix)")
    # the one note: the sweep's k policy was composed, not measured (the rules watch the measured arm)
    assert [line for line in text.splitlines() if "note:" in line] == [
        "# note: draft's k policy (greedy) is composed, not measured: these rules watch a measured arm; measure the "
        "policy (policy.measure, --policy-from) to watch it"]


def test_annotations_name_the_speculation_off_server_stored_with_the_sweep(sweep: AdoptedSweep) -> None:
    stored = sweep.summary.server_args
    assert stored is not None and stored.speculation_off_arm == "baseline"
    off, adopted = stored.speculation_off, stored.speculative["draft-k2"]
    flag = adopted.index("--speculative-config")
    assert off == adopted[:flag] + adopted[flag + 2:]  # the same server, speculation off
    assert "--host" not in off and "--port" not in off
    assert json.loads(adopted[flag + 1])["num_speculative_tokens"] == 2
    rules, _ = _rules(sweep)
    command = shlex.split(str(_alerts(rules)[0]["annotations"]["rollback"]))  # type: ignore[index]
    assert command == ["python", "-m", "vllm.entrypoints.openai.api_server", *off]
    saved = SweepReport.model_validate_json((sweep.results / sweep.sweep_id / "summary.json").read_text())
    assert saved.server_args == stored
    markdown = summary_markdown(saved)
    [adopted_mix] = [v for v in saved.mix if v.name == "draft-k2"]
    assert (f"adopted at the traffic mix (corrected for {adopted_mix.comparisons} comparisons), draft-k2: "
            f"`{stored.command('draft-k2')}`") in markdown
    assert f"`{stored.command()}`" in markdown and "ngram-k3: `" not in markdown


def test_a_named_arm_the_sweep_did_not_adopt_is_said_to_be_so(sweep: AdoptedSweep) -> None:
    rules, text = _rules(sweep, "--arm", "ngram-k3", "--window", "45s", "--model", "prod-llama")
    assert "arm ngram-k3 (named with --arm; the sweep did not adopt it)" in text
    alerts = _alerts(rules)
    assert {a["for"] for a in alerts} == {"45s"}
    ratio = GAP_MS[("ngram-k3", 4)] / GAP_MS[("baseline", 4)]
    assert any(f" < {ratio:.4g} and on" in str(a["expr"]) for a in alerts)
    [group] = rules["groups"]  # type: ignore[index]
    assert all('model_name="prod-llama"' in r["expr"] for r in group["rules"] if "record" in r)


@pytest.mark.parametrize(("args", "message"), [
    (["--arm", "baseline"],
     "error: --arm baseline: not a speculative arm of sweep {id} (its arms: draft-k2, ngram-k3)"),
    (["--window", "ten"], "error: --window: 'ten' is not a duration like 30s, 90m, 7h or 1d"),
])
def test_bad_input_is_one_line_and_exit_2(sweep: AdoptedSweep, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["monitor", "rules", sweep.sweep_id, "--results-dir", str(sweep.results), *args])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == message.format(id=sweep.sweep_id)


def test_a_sweep_that_adopted_nothing_says_why_and_exits_2(tmp_path: Path) -> None:
    rejected = adopted_sweep(tmp_path, adopt=False)
    result = runner.invoke(app, ["monitor", "rules", rejected.sweep_id, "--results-dir", str(rejected.results)])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == (f"error: {rejected.sweep_id}: no speculative arm was adopted at the traffic "
                                        f"mix (no verdict is adoptable); name one with --arm to watch it anyway")


def test_an_older_summary_without_server_args_still_names_a_rollback(sweep: AdoptedSweep, tmp_path: Path) -> None:
    import shutil

    results = tmp_path / "results"
    shutil.copytree(sweep.results / sweep.sweep_id, results / sweep.sweep_id)
    path = results / sweep.sweep_id / "summary.json"
    stored = json.loads(path.read_text())
    del stored["server_args"]
    path.write_text(json.dumps(stored))
    result = runner.invoke(app, ["monitor", "rules", sweep.sweep_id, "--results-dir", str(results), "--out",
                                 str(tmp_path / "rules" / "specfleet.yml")])
    assert result.exit_code == 0, result.output
    assert "note: the sweep's summary stored no server arguments" in result.stderr
    assert result.stdout.startswith(f"rules: {tmp_path / 'rules' / 'specfleet.yml'} (4 alert expressions")
    rules = yaml.safe_load((tmp_path / "rules" / "specfleet.yml").read_text())
    assert "--speculative-config" not in str(_alerts(rules)[0]["annotations"]["rollback"])  # type: ignore[index]


@pytest.mark.parametrize("to_file", [False, True])
def test_json_is_the_rule_file_written_and_the_rules_the_yaml_holds(sweep: AdoptedSweep, tmp_path: Path,
                                                                   to_file: bool) -> None:
    yaml_rules, _ = _rules(sweep, "--window", "45s")
    out = tmp_path / "rules.yml"
    result = runner.invoke(app, ["monitor", "rules", sweep.sweep_id, "--results-dir", str(sweep.results),
                                 "--window", "45s", "--json", *(["--out", str(out)] if to_file else [])])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["rules_file"] == (str(out) if to_file else None) and out.is_file() == to_file
    assert printed["rules"] == yaml_rules  # the same object as the YAML, `for` spelled as Prometheus does
    assert printed["alert_expressions"] == len(_alerts(yaml_rules)) == 4
    assert (printed["sweep_id"], printed["arm"], printed["adopted"], printed["window_s"]) == (
        sweep.sweep_id, "draft-k2", True, 45)
    assert [b["concurrency"] for b in printed["basis"]["buckets"]] == [1, 4]
