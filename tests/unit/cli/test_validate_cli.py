"""`specfleet validate` and `specfleet version`: exit codes and one-line errors."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


@pytest.mark.parametrize("name", ["demo-cpu.yaml", "llama70b-h200.yaml"])
def test_shipped_configs_exit_0(name: str) -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "configs" / name), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cells"] > 0


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("requests_per_cell", "requests_per_cel", "load.requests_per_cel"),
        ("concurrency: [1, 4]", "concurrency: [-1, 4]", "load.concurrency[0]"),
        ("k: [2, 4]", 'k: [2, "x"]', "arms[1].k[1]"),
    ],
)
def test_bad_config_exits_2_naming_the_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs" / "demo-cpu.yaml").read_text().replace(old, new))
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert field in result.stderr and str(bad) in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_config_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "not found" in result.stderr


def test_version_names_the_stack() -> None:
    result = runner.invoke(app, ["version", "--json"])
    assert result.exit_code == 0
    versions = json.loads(result.stdout)
    assert {"specfleet", "prefect", "ray", "mlflow"} <= set(versions)
    assert versions["prefect"] and versions["ray"] and versions["mlflow"]


@pytest.mark.parametrize("argv", [["calc", "speedup", "--alpha", "abc", "-k", "4", "-c", "0.05"], ["nosuch"]])
def test_console_entry_turns_usage_errors_into_one_line(argv: list[str]) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from cli.main import entry; entry()", *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
