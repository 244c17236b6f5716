"""``specfleet calc`` and ``specfleet stats``: the seed's numbers as JSON, and exit 2 on bad input."""

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from specfleet_cli import calc, stats

runner = CliRunner()


def _json(app: typer.Typer, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def _bad(app: typer.Typer, *args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    return lines[0]


def test_speedup_seed_numbers() -> None:
    out = _json(calc.app, "speedup", "--alpha", "0.7", "-k", "4", "-c", "0.05")
    assert round(float(out["speedup"]), 2) == 2.31
    assert out["tokens_per_step"] == pytest.approx(2.7731)
    assert round(float(_json(calc.app, "speedup", "--alpha", "0.6", "-k", "4", "-c", "0.05")["speedup"]), 2) == 1.92
    assert round(float(_json(calc.app, "speedup", "--alpha", "0.8", "-k", "4", "-c", "0.05")["speedup"]), 2) == 2.80


@pytest.mark.parametrize(("v", "seed_alpha"), [("0", 0.17), ("0.1", 0.38), ("0.25", 0.58), ("0.5", 0.78)])
def test_breakeven_seed_numbers(v: str, seed_alpha: float) -> None:
    out = _json(calc.app, "breakeven", "-k", "4", "-c", "0.05", "-v", v)
    assert out["alpha_two_decimals_up"] == seed_alpha
    assert abs(float(out["alpha"]) - seed_alpha) < 0.01


def test_breakeven_without_a_root_is_null() -> None:
    assert _json(calc.app, "breakeven", "-k", "4", "-c", "0.6", "-v", "0.5")["alpha"] is None


def test_best_k_seed_heavy_draft() -> None:
    out = _json(calc.app, "best-k", "--alpha", "0.5", "-c", "0.10")
    assert out["k"] == 2
    assert round(float(out["speedup"]), 2) == 1.46


def test_grid_rows() -> None:
    rows = _json(calc.app, "grid", "-c", "0.05", "--alphas", "0.5,0.6,0.7", "--ks", "1-7")["rows"]
    assert isinstance(rows, list)
    assert len(rows) == 21
    assert rows[10] == {"alpha": 0.6, "k": 4, "speedup": pytest.approx(1.9213, abs=1e-4)}


def test_fleet_seed_seven_replicas() -> None:
    out = _json(calc.app, "fleet", "--gpus-per-replica", "2", "--gpu-hour-usd", "4.00",
                "--qualified-tps", "3125", "--demand-tps", "20000")
    assert out["replicas"] == 7
    assert round(float(out["cost_per_million_usd"]), 2) == 0.78
    assert round(float(out["ideal_cost_per_million_usd"]), 3) == 0.711


def test_kv_seed_example() -> None:
    out = _json(calc.app, "kv", "--kv-memory-gb", "65", "--kib-per-token", "320",
                "--draft-weights-gb", "2.5", "--kib-per-token-with-draft", "352")
    assert round(int(out["tokens"]), -3) == 198_000
    assert round(int(out["tokens_with_draft"]), -3) == 173_000
    assert round(float(out["capacity_loss"]), 3) == 0.126


def test_text_output_is_short() -> None:
    result = runner.invoke(calc.app, ["fleet", "--gpus-per-replica", "2", "--gpu-hour-usd", "4",
                                      "--qualified-tps", "3125", "--demand-tps", "20000"])
    assert result.exit_code == 0
    assert "$0.78 per million" in result.stdout


@pytest.mark.parametrize(("args", "fragment"), [
    (("speedup", "--alpha", "1.5", "-k", "4", "-c", "0.05"), "alpha must be in [0, 1]"),
    (("speedup", "--alpha", "0.5", "-k", "0", "-c", "0.05"), "k must be"),
    (("breakeven", "-k", "4", "-c", "-0.05"), "c (draft step"),
    (("grid", "-c", "0.05", "--ks", "1-x"), "--ks"),
    (("grid", "-c", "0.05", "--alphas", "0.5,,0.6"), "--alphas"),
    (("fleet", "--gpus-per-replica", "2", "--gpu-hour-usd", "0", "--qualified-tps", "3125",
      "--demand-tps", "20000"), "GPU-hour price"),
    (("fleet", "--gpus-per-replica", "2", "--gpu-hour-usd", "4", "--qualified-tps", "3125",
      "--demand-tps", "20000", "--served-tps", "30000"), "exceeds demand"),
    (("kv", "--kv-memory-gb", "-1", "--kib-per-token", "320"), "KV memory"),
])
def test_calc_bad_input_exits_2_with_one_line(args: tuple[str, ...], fragment: str) -> None:
    assert fragment in _bad(calc.app, *args)


def _jsonl(path: Path, rows: list[str]) -> str:
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_stats_equivalence_json(tmp_path: Path) -> None:
    rows = [json.dumps({"prompt_id": f"p{i % 2}", "tokens": [i % 3, (i * 7) % 5]}) for i in range(60)]
    a, b = _jsonl(tmp_path / "a.jsonl", rows), _jsonl(tmp_path / "b.jsonl", rows[::-1])
    out = _json(stats.app, "equivalence", "--a", a, "--b", b, "--significance", "0.05", "--permutations", "199")
    assert out["n_a"] == 60
    assert out["n_b"] == 60
    assert out["reject"] is False
    assert 0 < float(out["p_value"]) <= 1
    assert "permutation" in str(out["test"])
    assert {"significance", "power", "min_detectable_tv", "n_required_per_arm_per_prompt"} <= set(out)


def test_stats_bad_jsonl_names_the_line(tmp_path: Path) -> None:
    good = json.dumps({"prompt_id": "p", "tokens": [1, 2]})
    a = _jsonl(tmp_path / "a.jsonl", [good, "{broken"])
    assert f"{a}:2: not valid JSON" in _bad(stats.app, "equivalence", "--a", a, "--b", a)
    c = _jsonl(tmp_path / "c.jsonl", [good, json.dumps({"prompt_id": "p", "tokens": ["x"]})])
    assert f"{c}:2:" in _bad(stats.app, "equivalence", "--a", c, "--b", c)
    assert "no such file" in _bad(stats.app, "equivalence", "--a", str(tmp_path / "missing.jsonl"), "--b", a)
