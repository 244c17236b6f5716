"""The benchmark contract: what validates, what is rejected and how the error reads."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract import CellIdentity, arm_plans, cell_identities, parse_sweep_config
from specfleet.contract.fingerprint import Fingerprint
from specfleet.contract.models import STANDIN_ENGINE_ENV
from specfleet.errors import InputError

ROOT = Path(__file__).resolve().parents[4]
DEMO = (ROOT / "configs" / "demo-cpu.yaml").read_text()


def _error(text: str) -> str:
    with pytest.raises(InputError) as caught:
        parse_sweep_config(text, "sweep.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["demo-cpu.yaml", "llama70b-h200.yaml"])
def test_shipped_configs_validate(name: str) -> None:
    config = parse_sweep_config((ROOT / "configs" / name).read_text(), name)
    assert config.baseline.method == "baseline"


def test_gpu_pilot_covers_the_seed_matrix() -> None:
    config = parse_sweep_config((ROOT / "configs" / "llama70b-h200.yaml").read_text(), "x")
    assert config.load.concurrency == [1, 4, 16, 64]
    assert {p.name for p in config.prompt_classes} == {"code", "extraction", "longform", "chat", "rag"}
    assert {a.method for a in config.arms} >= {"baseline", "eagle3", "ngram"}


def test_typo_in_a_key_names_the_field_and_line() -> None:
    message = _error(DEMO.replace("requests_per_cell", "requests_per_cel"))
    assert "load.requests_per_cel" in message and "unknown key" in message
    assert message.startswith("sweep.yaml:")


def test_negative_concurrency_names_the_field() -> None:
    message = _error(DEMO.replace("concurrency: [1, 4, 8]", "concurrency: [1, -4, 8]"))
    assert "load.concurrency[1]" in message and "-4" in message


@pytest.mark.parametrize("bad", ['[2, "four"]', '[2, "4"]', "[2, 4.5]"])
def test_k_list_must_hold_integers(bad: str) -> None:
    message = _error(DEMO.replace("k: [2, 4]", f"k: {bad}"))
    assert "arms[1].k[1]" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("{name: baseline, method: baseline}", "{name: baseline, method: baseline, k: [2]}", "no k list"),
        ("percentile: 95", "percentile: 101", "slo.percentile"),
        ("concurrency: [1, 4, 8]", "concurrency: []", "at least one concurrency"),
        ("concurrency: [1, 4, 8]", "concurrency: [0]", "load.concurrency[0]"),
        ("{name: ngram, method: ngram, k: [3]", "{name: ngram, method: ngram, k: []", "non-empty k"),
        ("{name: baseline, method: baseline}", "{name: base2, method: draft_model, k: [1]}", "exactly one"),
        ("method: draft_model", "method: medusa2", "arms[1].method"),
    ],
)
def test_contradictions_are_rejected(old: str, new: str, expected: str) -> None:
    assert old in DEMO
    assert expected in _error(DEMO.replace(old, new, 1))


def test_a_prompt_class_may_name_a_scored_set() -> None:
    extraction = "{name: extraction, max_output_tokens: 48}"
    with_set = DEMO.replace(extraction, "{name: extraction, max_output_tokens: 48, scored_set: sets/x.jsonl}")
    classes = parse_sweep_config(with_set, "demo").prompt_classes
    assert [c.scored_set for c in classes] == [None, "sets/x.jsonl", None]
    message = _error(DEMO.replace(extraction, "{name: extraction, scored_set: ''}"))
    assert "prompt_classes[1].scored_set" in message


def test_malformed_yaml_names_the_line() -> None:
    message = _error(DEMO.replace("load:\n", "load:\n  : [\n"))
    assert message.startswith("sweep.yaml:") and "malformed YAML" in message


def test_matrix_expands_baseline_first_and_one_arm_per_k() -> None:
    config = parse_sweep_config(DEMO, "demo")
    arms = arm_plans(config)
    assert [a.arm for a in arms] == ["baseline", "draft-k2", "draft-k4", "ngram-k3"]
    assert arms[0].speculative_config is None
    assert arms[1].speculative_config == {
        "method": "draft_model", "num_speculative_tokens": 2, "model": "fixture:draft",
    }
    assert arms[3].speculative_config is not None
    assert arms[3].speculative_config["prompt_lookup_max"] == 5
    cells = cell_identities(config, arms[1])
    assert len(cells) == 3 * 3 * 1
    assert len({c.key("fp") for c in cells}) == len(cells)


@given(st.text(min_size=1, max_size=12))
def test_cell_key_depends_on_the_fingerprint(fingerprint: str) -> None:
    config = parse_sweep_config(DEMO, "demo")
    cell = cell_identities(config, arm_plans(config)[0])[0]
    assert cell.key(fingerprint) == cell.key(fingerprint)
    assert cell.key(fingerprint) != cell.key(fingerprint + "x")


SYNTHETIC_ARM = "  - {name: draft, method: draft_model, k: [2, 4]}\n"


def _synthetic(setting: str) -> str:
    assert SYNTHETIC_ARM in DEMO
    return DEMO.replace(SYNTHETIC_ARM, SYNTHETIC_ARM + f"  - {{name: syn, method: draft_model, k: [2, 4], "
                                                      f"synthetic_acceptance: {setting}}}\n")


def test_a_synthetic_acceptance_arm_passes_vllms_keys_and_is_labelled() -> None:
    config = parse_sweep_config(_synthetic("{acceptance_rates: [0.9, 0.7, 0.5, 0.3]}"), "demo")
    syn = [a for a in arm_plans(config) if a.spec_name == "syn"]
    assert [a.synthetic for a in syn] == [True, True]
    assert syn[0].speculative_config is not None
    assert syn[0].speculative_config["rejection_sample_method"] == "synthetic"
    assert syn[0].speculative_config["synthetic_acceptance_rates"] == [0.9, 0.7]  # the first k at k 2
    cell = cell_identities(config, syn[0])[0]
    assert cell.synthetic and "SYNTHETIC" in cell.label
    by_length = parse_sweep_config(_synthetic("{acceptance_length: 2.5}"), "demo")
    plan = next(a for a in arm_plans(by_length) if a.arm == "syn-k2")
    assert plan.speculative_config is not None and plan.speculative_config["synthetic_acceptance_length"] == 2.5


def test_a_real_cell_keeps_its_key_and_label() -> None:
    """The synthetic flag is left out of a real cell's key, so earlier sweeps' keys hold: every cell
    stored by ce4142f (before the flag existed) still has the key its identity gives."""
    config = parse_sweep_config(DEMO, "demo")
    cell = cell_identities(config, arm_plans(config)[1])[0]
    assert not cell.synthetic and "SYNTHETIC" not in cell.label
    assert cell.key("fp") != cell.model_copy(update={"synthetic": True}).key("fp")
    stored = ROOT / "tests" / "unit" / "tasks" / "store" / "data" / "demo-ce4142f"
    digest = Fingerprint.model_validate(json.loads((stored / "sweep.json").read_text())["fingerprint"]).digest
    cells = [json.loads(path.read_text()) for path in sorted((stored / "cells").glob("*.json"))]
    assert cells and all(CellIdentity.model_validate(c["identity"]).key(digest) == c["key"] for c in cells)


@pytest.mark.parametrize(("setting", "expected"), [
    ("{}", "exactly one of acceptance_length or acceptance_rates"),
    ("{acceptance_length: 2.0, acceptance_rates: [0.5, 0.4, 0.3, 0.2]}", "exactly one"),
    ("{acceptance_rates: [0.9, 0.95, 0.5, 0.3]}", "non-increasing"),
    ("{acceptance_rates: [1.2, 0.9, 0.5, 0.3]}", "in [0, 1]"),
    ("{acceptance_rates: [0.9, 0.5]}", "needs 4 positions"),
    ("{acceptance_length: 3.5}", "exceeds k + 1 = 3"),
    ("{acceptance_length: 0.5}", "arms[2].synthetic_acceptance.acceptance_length"),
    ("{acceptance_lenght: 2.0}", "unknown key"),
])
def test_a_bad_synthetic_setting_is_one_line_naming_it(setting: str, expected: str) -> None:
    assert expected in _error(_synthetic(setting))


@pytest.mark.parametrize(("extra", "key"), [
    ("{rejection_sample_method: synthetic, synthetic_acceptance_rates: [0.99, 0.99]}", "rejection_sample_method"),
    ("{synthetic_acceptance_rates: [0.9, 0.8]}", "synthetic_acceptance_rates"),
    ("{synthetic_acceptance_length: 2.0}", "synthetic_acceptance_length"),
])
def test_synthetic_acceptance_under_vllms_own_keys_is_refused_naming_the_key(extra: str, key: str) -> None:
    """Only ``synthetic_acceptance`` turns it on, so every arm at synthetic acceptance is labelled."""
    message = _error(DEMO.replace(SYNTHETIC_ARM, SYNTHETIC_ARM + "  - {name: x, method: draft_model, k: [2], "
                                  f"speculative_extra: {extra}}}\n"))
    assert f"arms[2]: arm 'x': speculative_extra.{key} turns on the engine's synthetic acceptance" in message
    assert message.endswith("set it with synthetic_acceptance")


def test_the_lossless_rejection_method_is_a_real_arm_and_a_synthetic_arm_sets_none() -> None:
    standard = "speculative_extra: {rejection_sample_method: standard}"
    config = parse_sweep_config(DEMO.replace(SYNTHETIC_ARM, SYNTHETIC_ARM + f"  - {{name: x, method: draft_model, "
                                             f"k: [2], {standard}}}\n"), "demo")
    assert not any(plan.synthetic for plan in arm_plans(config))
    assert "set synthetic acceptance with synthetic_acceptance" in _error(
        _synthetic(f"{{acceptance_length: 2.0}}, {standard}"))


@pytest.mark.parametrize("arg", ["--speculative-config", "-sc", "--speculative_config={}",
                                 "--speculative-config.method"])
def test_speculation_in_the_engines_arguments_is_refused(arg: str) -> None:
    """It would override every arm's speculative_config, the baseline's too, synthetic or not."""
    message = _error(DEMO.replace("engine:\n", f"engine:\n  extra_args: [{json.dumps(arg)}, '{{}}']\n", 1))
    assert f"engine.extra_args: {arg.split('=')[0]} would override every arm's speculation" in message


def test_the_baseline_takes_no_synthetic_acceptance() -> None:
    text = DEMO.replace("{name: baseline, method: baseline}",
                        "{name: baseline, method: baseline, synthetic_acceptance: {acceptance_length: 2.0}}")
    assert "no speculative settings" in _error(text)


GPU = (ROOT / "configs" / "llama70b-h200.yaml").read_text()


@pytest.mark.parametrize(("replace", "field", "expected"), [
    ({"tensor_parallel_size: 2": "tensor_parallel_size: 3",
      "accelerators_per_replica: 2": "accelerators_per_replica: 3"},
     "hardware.accelerators_per_node", "not a multiple of tensor_parallel_size 3"),
    ({"accelerators_per_node: 8": "accelerators_per_node: 1"}, "hardware.accelerators_per_node",
     "fewer than tensor_parallel_size 2: an arm's server runs on one node"),
    ({"tensor_parallel_size: 2": "tensor_parallel_size: 1"}, "hardware.tensor_parallel_size",
     "differs from accelerators_per_replica 2"),
    ({"tensor_parallel_size: 2": "tensor_parallel_size: 4"}, "hardware.tensor_parallel_size",
     "exceeds accelerators_per_replica 2"),
])
def test_a_tensor_parallel_group_that_does_not_fit_the_node_names_the_field(
        replace: dict[str, str], field: str, expected: str) -> None:
    text = GPU
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    message = _error(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.strip().startswith(field.split(".")[1] + ":"))
    assert message.startswith(f"sweep.yaml:{line}: {field}: {expected}"), message


@pytest.mark.parametrize("where", ["engine", "arm"])
def test_no_config_selects_the_stand_in_engine(where: str) -> None:
    data = yaml.safe_load((ROOT / "configs" / "demo-cpu.yaml").read_text())
    section = data["engine"] if where == "engine" else data["arms"][0]
    section["env"] = {STANDIN_ENGINE_ENV: "1"}
    with pytest.raises(InputError, match=f"env.*{STANDIN_ENGINE_ENV} selects the test-only stand-in engine"):
        parse_sweep_config(yaml.safe_dump(data), "sweep.yaml")
