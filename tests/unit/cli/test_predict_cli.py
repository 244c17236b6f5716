"""`specfleet predict` on a small stored sweep (tests/support/sweep_data.py): the JSON keys, the
PREDICTED table, what it extrapolates, and bad input as one line with exit 2."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet_cli.main import app
from tests.support.sweep_data import stored_sweep

runner = CliRunner()
KEYS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "qualified_tokens_per_s",
        "mean_acceptance_length", "speedup", "interval", "calibrated_on", "extrapolates", "predicted")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stored_sweep(tmp_path_factory.mktemp("predict")).store.dir


def _predict(sweep: Path | str, *extra: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["predict", str(sweep), *extra])
    return result.exit_code, result.stdout, result.stderr


def test_json_has_the_keys_and_says_it_is_predicted(sweep_dir: Path) -> None:
    code, out, _ = _predict(sweep_dir, "--arm", "draft", "--prompt-class", "code", "--concurrency", "1", "--json")
    assert code == 0
    got = json.loads(out)
    assert all(key in got for key in KEYS)
    assert got["predicted"] is True and got["measured_cell"] is True and got["extrapolates"] == []
    assert got["calibrated_on"] == sweep_dir.name and got["arm"] == "draft-k2" and got["k"] == 2
    assert set(got["ttft_ms"]) == {"p50", "p95", "p99"}
    assert got["mean_acceptance_length"] == pytest.approx(1 + 15 / 10)
    assert got["speedup"] is not None and set(got["interval"]["speedup"]) == {"low", "high"}
    assert got["interval"]["output_tokens_per_s"]["low"] <= got["output_tokens_per_s"]


def test_the_baseline_has_no_acceptance_and_no_speedup(sweep_dir: Path) -> None:
    code, out, _ = _predict(sweep_dir, "--arm", "baseline", "--prompt-class", "code", "--concurrency", "1", "--json")
    got = json.loads(out)
    assert code == 0 and got["mean_acceptance_length"] is None and got["speedup"] is None and got["k"] is None


def test_an_unmeasured_concurrency_and_k_are_predicted_and_marked(sweep_dir: Path) -> None:
    code, out, _ = _predict(sweep_dir, "--arm", "draft", "--k", "3", "--prompt-class", "code", "--concurrency", "4",
                            "--json")
    got = json.loads(out)
    assert code == 0 and got["measured_cell"] is False
    assert "concurrency 4 > largest measured 1" in got["extrapolates"]
    assert any(line.startswith("k 3 > largest measured 2") for line in got["extrapolates"])
    assert any("draft_model:draft_pass" in line for line in got["extrapolates"])  # one k measured: not identified
    assert any("could not identify" in note for note in got["notes"])


def test_a_rate_is_predicted_and_marked(sweep_dir: Path) -> None:
    code, out, _ = _predict(sweep_dir, "--arm", "draft", "--prompt-class", "code", "--rate", "2", "--json")
    got = json.loads(out)
    assert code == 0 and got["load_mode"] == "rate"
    assert any("measured no open-loop load" in line for line in got["extrapolates"])


def test_the_table_is_titled_predicted(sweep_dir: Path) -> None:
    code, out, _ = _predict(sweep_dir, "--arm", "draft", "--prompt-class", "code", "--concurrency", "2")
    assert code == 0 and "PREDICTED" in out and "extrapolates: concurrency 2 > largest measured 1" in out


@pytest.mark.parametrize(("extra", "message"), [
    (("--arm", "eagle", "--prompt-class", "code", "--concurrency", "1"), "--arm eagle: not an arm"),
    (("--arm", "draft", "--prompt-class", "chat", "--concurrency", "1"), "--prompt-class chat"),
    (("--arm", "draft", "--prompt-class", "code", "--sampling", "hot", "--concurrency", "1"), "--sampling hot"),
    (("--arm", "baseline", "--k", "2", "--prompt-class", "code", "--concurrency", "1"), "does not speculate"),
    (("--arm", "draft", "--prompt-class", "code"), "exactly one of --concurrency or --rate"),
    (("--arm", "draft", "--prompt-class", "code", "--concurrency", "1", "--rate", "2"), "exactly one of"),
    (("--arm", "draft", "--prompt-class", "code", "--rate", "0"), "--rate must be positive"),
])
def test_bad_input_is_one_line_and_exit_2(sweep_dir: Path, extra: tuple[str, ...], message: str) -> None:
    code, _, err = _predict(sweep_dir, *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_an_unknown_sweep_is_one_line_and_exit_2(sweep_dir: Path) -> None:
    code, _, err = _predict("no-such-sweep", "--arm", "draft", "--prompt-class", "code", "--concurrency", "1",
                            "--results-dir", str(sweep_dir.parent))
    assert code == 2 and "no-such-sweep" in err and len(err.strip().splitlines()) == 1


def test_a_sweep_without_usable_cells_is_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = stored_sweep(tmp_path, failed=True).store.dir
    code, _, err = _predict(folder, "--arm", "draft", "--prompt-class", "code", "--concurrency", "1")
    assert code == 2 and "no usable cell" in err and len(err.strip().splitlines()) == 1
