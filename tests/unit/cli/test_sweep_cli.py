"""`specfleet sweep` and `revalidate`: bad input exits 2 with one line, before Prefect or Ray start."""

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.sweep import revalidate, sweep
from tests.unit.tasks.sweep_data import write_config

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
