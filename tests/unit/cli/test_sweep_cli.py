"""`specfleet sweep` and `revalidate`: bad input exits 2 with one line, before Prefect or Ray start."""

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specfleet_cli.sweep import revalidate, sweep
from tests.support.sweep_data import write_config

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(sweep)
    app.command()(revalidate)
    return app


@pytest.mark.parametrize("command", ["sweep", "revalidate"])
def test_bad_config_exits_2_in_one_line(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(write_config(tmp_path).read_text().replace("concurrency: [1]", "concurrency: [0]"))
    result = runner.invoke(_app(), [command, str(bad), "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2
    assert "load.concurrency[0]" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_unknown_resume_id_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = runner.invoke(_app(), ["sweep", str(config), "--resume", "no-such-sweep",
                                    "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: --resume no-such-sweep: no sweep with this id under {tmp_path / 'results'}"


def _bad_input(tmp_path: Path, command: str = "sweep") -> tuple[int, str]:
    result = runner.invoke(_app(), [command, str(tmp_path / "sweep.yaml"), "--results-dir", str(tmp_path / "results")])
    assert "Traceback" not in result.output and not (tmp_path / "results").exists()
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.exit_code, result.stderr


def test_a_model_path_that_does_not_exist_names_the_field(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace(str(tmp_path / "draft"), str(tmp_path / "no-such-draft")))
    code, message = _bad_input(tmp_path)
    assert code == 2 and "models.draft.path" in message and "no-such-draft" in message


def test_a_broken_prompt_line_names_the_file_and_line(tmp_path: Path) -> None:
    write_config(tmp_path)
    with (tmp_path / "code.jsonl").open("a") as prompts:
        prompts.write('{"id": "p9", "prompt": \n')
    code, message = _bad_input(tmp_path, "revalidate")
    assert code == 2 and "code.jsonl:5" in message


def test_yaml_tags_are_never_evaluated(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    planted = tmp_path / "evaluated"
    config.write_text(config.read_text().replace(
        "name: unit-sweep", f"name: !!python/object/apply:os.system ['touch {planted}']"))
    code, message = _bad_input(tmp_path)
    assert code == 2 and "sweep.yaml" in message and not planted.exists()


def _sweep(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(_app(), ["sweep", str(tmp_path / "sweep.yaml"), *args,
                                    "--results-dir", str(tmp_path / "results")])
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1, result.output
    return result.exit_code, result.stderr.strip()


def test_a_bad_budget_block_names_the_file_line_and_field(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text() + "budget: {duration: 7x}\n")
    code, message = _sweep(tmp_path)
    line = len(config.read_text().splitlines())
    assert code == 2 and message.startswith(f"error: {config}:{line}: budget.duration: '7x' is not a duration")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("flag", ["7", "1.5h", "soon"])
def test_a_bad_budget_flag_names_the_flag(tmp_path: Path, flag: str) -> None:
    write_config(tmp_path)
    assert _sweep(tmp_path, "--budget", flag) == (
        2, f"error: --budget: {flag!r} is not a duration like 30s, 90m, 7h or 1d")
    assert not (tmp_path / "results").exists()


def test_continue_without_an_earlier_sweep_exits_2(tmp_path: Path) -> None:
    write_config(tmp_path)
    assert _sweep(tmp_path, "--budget", "7h", "--continue") == (
        2, f"error: --continue: no earlier sweep of config 'unit-sweep' under {tmp_path / 'results'}")


def test_continue_and_resume_together_exit_2(tmp_path: Path) -> None:
    write_config(tmp_path)
    assert _sweep(tmp_path, "--continue", "--resume", "some-sweep") == (
        2, "error: --continue and --resume: give one (--continue finds the sweep itself)")
