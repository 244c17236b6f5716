"""`specfleet plan` and the plan's headline at the end of `specfleet validate`: the JSON keys,
the prior and a calibrated basis, bad budgets and sweeps as one line with exit 2."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet_cli.main import app
from specfleet_tasks.store.config import load_sweep_config
from tests.support.sweep_data import stored_sweep

ROOT = Path(__file__).resolve().parents[3]
DEMO = str(ROOT / "configs" / "demo-cpu.yaml")
H200 = str(ROOT / "configs" / "llama70b-h200.yaml")
KEYS = ("wall_s", "accelerator_hours", "cost_usd", "cells", "servers", "requests", "stages", "basis", "fits_budget")
runner = CliRunner()


def _plan(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_the_demo_plan_on_the_prior_has_every_key_per_stage_and_in_total() -> None:
    plan = _plan(DEMO)
    assert all(key in plan for key in KEYS) and plan["predicted"] is True
    assert plan["basis"] == "prior, not calibrated" and plan["fits_budget"] is None
    stages = plan["stages"]
    assert isinstance(stages, list) and [s["name"] for s in stages] == [
        "opening baseline", "speculative arms", "closing baseline"]
    for key in ("wall_s", "accelerator_hours", "cost_usd", "cells", "servers", "requests"):
        assert all(key in s for s in stages)
    assert plan["cells"] == sum(s["cells"] for s in stages) == 45
    assert plan["wall_s"] > sum(s["wall_s"] for s in stages)  # plus the time outside the arms


def test_a_budget_says_whether_the_plan_fits() -> None:
    assert _plan(DEMO, "--budget", "1d")["fits_budget"] is True
    assert _plan(DEMO, "--budget", "1m")["fits_budget"] is False


def test_the_h200_matrix_is_days_of_a_node_and_its_baseline_stages_run_on_four_replicas() -> None:
    plan = _plan(H200, "--budget", "7h")
    assert plan["fits_budget"] is False and plan["wall_s"] > 2 * 86400
    stages = plan["stages"]
    assert isinstance(stages, list)
    for baseline in (stages[0], stages[2]):  # 120 cells over four TP-2 replicas, one check cell each
        assert baseline["servers"] == 4 and baseline["cells"] == 124
        assert baseline["idle_accelerator_hours"] < 0.1 * baseline["accelerator_hours"]


def test_a_plan_calibrated_on_a_stored_sweep_names_it(tmp_path: Path) -> None:
    sweep_dir = stored_sweep(tmp_path).store.dir
    plan = _plan(DEMO, "--from", str(sweep_dir))
    assert plan["basis"] == f"calibrated on {sweep_dir.name}"


@pytest.mark.parametrize(("args", "message"), [
    (["--budget", "7x"], "--budget: '7x' is not a duration"),
    (["--budget", "0h"], "--budget: '0h' is not a duration"),
    (["--from", "no-such-sweep"], "no-such-sweep"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["plan", DEMO, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_validate_ends_with_the_plans_headline() -> None:
    result = runner.invoke(app, ["validate", DEMO])
    assert result.exit_code == 0, result.output
    last = " ".join(result.stderr.split()).rsplit("cells;", 1)[-1]  # validate reports on stderr
    assert "plan (prior, not calibrated, predicted):" in last and "accelerator-hours" in last and "$" in last
    data = json.loads(runner.invoke(app, ["validate", DEMO, "--json"]).stdout)
    assert data["plan"]["cells"] == 45 and data["plan_error"] is None


def test_the_nightly_profile_fits_seven_hours_of_one_node() -> None:
    plan = _plan(str(ROOT / "configs" / "llama70b-h200-nightly.yaml"), "--budget", "7h")
    assert plan["fits_budget"] is True and plan["accelerators"] == 8
    assert plan["basis"] == "prior, not calibrated"


def test_a_quantization_the_prior_does_not_know_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "h200.yaml"
    bad.write_text(Path(H200).read_text().replace("quantization: fp8_per_tensor", "quantization: mxfp4"))
    (tmp_path / "prompts").symlink_to(ROOT / "configs" / "prompts")
    result = runner.invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2, result.output
    assert "quantization 'mxfp4'" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_plan_states_each_verdicts_minimum_detectable_saving_and_where_its_noise_comes_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECFLEET_CACHE_DIR", str(tmp_path))  # nothing recorded: the stated prior
    power = _plan(DEMO)["power"]
    assert isinstance(power, dict) and power["predicted"] is True and power["noise_prior"] is True
    kinds = [c["kind"] for c in power["claims"]]
    config = load_sweep_config(Path(DEMO))
    assert kinds.count("mix") == 3 and kinds.count("class") == 9
    assert kinds.count("cell") == 3 * len(config.prompt_classes) * len(config.load.concurrency)
    assert all(0 < c["adopt_saving"] < 1 and c["reject_saving"] < 0 for c in power["claims"])
    text = runner.invoke(app, ["plan", DEMO], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "minimum detectable saving" in text.output and "PRIOR" in text.output


def test_detect_proposes_a_design_with_its_time_and_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECFLEET_CACHE_DIR", str(tmp_path))
    proposal = _plan(DEMO, "--detect", "60%")["detect"]
    assert isinstance(proposal, dict) and proposal["found"] is True and proposal["mix_adopt_saving"] <= 0.6
    assert proposal["wall_s"] > 0 and proposal["cost_usd"] > 0
    hard = _plan(DEMO, "--detect", "5%")["detect"]
    assert isinstance(hard, dict) and hard["found"] is False and hard["mix_adopt_saving"] > 0.05
    assert any("no design searched" in note and "at most 4 lives per arm searched" in note for note in hard["notes"])
    assert all(1 <= found["arm_server_lives"] <= 4 for found in (proposal, hard))


@pytest.mark.parametrize("value", ["150%", "abc", "0"])
def test_a_bad_detect_is_one_line_and_exit_2(value: str) -> None:
    result = runner.invoke(app, ["plan", DEMO, "--detect", value])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "--detect" in result.output


def test_the_plan_reads_this_machines_recorded_noise_for_the_same_models(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specfleet.stats.variance import RunNoise
    from specfleet_tasks.engine.noise_records import record_noise
    from specfleet_tasks.store.config import load_sweep_config

    monkeypatch.setenv("SPECFLEET_CACHE_DIR", str(tmp_path))
    noise = RunNoise(metric="qualified_tokens_per_s", identified="both", server_var=0.0004, run_var=0.0021, runs=40,
                     groups=20, servers=10, relative_sd=0.05, relative_sd_low=None, relative_sd_high=None,
                     confidence=0.95, source="test")
    record_noise(load_sweep_config(Path(DEMO)), "earlier-demo", noise)
    power = _plan(DEMO)["power"]
    assert isinstance(power, dict) and power["noise_prior"] is False and "earlier-demo" in power["noise_source"]
    assert power["tau"] == pytest.approx(0.05)
    prior = _plan(H200)["power"]  # other models: nothing recorded for them
    assert isinstance(prior, dict) and prior["noise_prior"] is True
