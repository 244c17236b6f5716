"""The server command line for each arm."""

import json
from pathlib import Path

from specfleet.contract import ArmPlan, arm_plans, parse_sweep_config
from specfleet.contract.models import EngineSpec
from specfleet.contract.server_args import (
    PER_REQUEST_SPEC_METRICS,
    accepts_per_request_spec_metrics,
    deployment_args,
    flag_choices,
    server_args,
    server_env,
)
from tests.support.server_help import HELP_032

ROOT = Path(__file__).resolve().parents[4]


def test_arms_get_their_speculative_config_with_resolved_draft() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo")
    resolved = {"fixture:target-wide": "/models/t", "fixture:draft": "/models/d"}
    baseline, draft_k2, _, ngram = arm_plans(config)
    base_args = server_args(config.engine, config.models.target, baseline, resolved, 8000, "m", tensor_parallel_size=1)
    assert base_args[base_args.index("--model") + 1] == "/models/t"
    assert "--speculative-config" not in base_args
    args = server_args(config.engine, config.models.target, draft_k2, resolved, 8000, "m", tensor_parallel_size=1)
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "/models/d", "num_speculative_tokens": 2}
    ngram_args = server_args(config.engine, config.models.target, ngram, resolved, 8000, "m", tensor_parallel_size=1)
    assert json.loads(ngram_args[ngram_args.index("--speculative-config") + 1])["prompt_lookup_min"] == 2
    assert args[args.index("--host") + 1] == "127.0.0.1"


def test_env_sizes_cpu_kv_cache_and_never_carries_the_key() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo")
    env = server_env(config.engine, arm_plans(config)[0])
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert not any("KEY" in name for name in env)


def test_dev_endpoints_stay_off_on_a_public_bind() -> None:
    text = (ROOT / "configs" / "demo-cpu.yaml").read_text().replace("engine:\n", "engine:\n  host: 0.0.0.0\n")
    config = parse_sweep_config(text, "demo")
    assert "VLLM_SERVER_DEV_MODE" not in server_env(config.engine, arm_plans(config)[0])


def test_stored_arguments_are_each_arms_without_the_deployments_host_and_port() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo")
    resolved = {"fixture:target-wide": "/models/t", "fixture:draft": "/models/d"}
    stored = deployment_args(config, resolved, "m")
    plans = arm_plans(config)
    assert stored.speculation_off_arm == "baseline" and list(stored.speculative) == [p.arm for p in plans[1:]]
    for plan, args in [(plans[0], stored.speculation_off), *((p, stored.speculative[p.arm]) for p in plans[1:])]:
        full = server_args(config.engine, config.models.target, plan, resolved, 8000, "m", tensor_parallel_size=1)
        host, port = full.index("--host"), full.index("--port")
        assert args == [a for i, a in enumerate(full) if i not in (host, host + 1, port, port + 1)]
    assert stored.command() == ("python -m vllm.entrypoints.openai.api_server --model /models/t --served-model-name m "
                                "--dtype float32 --seed 0 --tensor-parallel-size 1 --max-model-len 1024 "
                                "--max-num-seqs 16")
    assert "'{\"method\": \"ngram\"" in stored.command("ngram-k3")  # the JSON quoted for a shell


def test_the_flag_is_read_off_the_servers_own_help() -> None:
    assert flag_choices(HELP_032, PER_REQUEST_SPEC_METRICS) == {"detailed", "none", "summary"}
    assert accepts_per_request_spec_metrics(HELP_032)
    older = HELP_032.replace("[--per-request-spec-decode-metrics {detailed,none,summary}]\n", "")
    assert flag_choices(older, PER_REQUEST_SPEC_METRICS) is None and not accepts_per_request_spec_metrics(older)
    longer_name = HELP_032.replace(PER_REQUEST_SPEC_METRICS, PER_REQUEST_SPEC_METRICS + "-level")
    assert not accepts_per_request_spec_metrics(longer_name)
    assert not accepts_per_request_spec_metrics(HELP_032.replace("detailed,none,summary", "none,detailed"))
    assert flag_choices(HELP_032, "--kv-cache-metrics") == set()


def test_speculative_arms_ask_for_per_request_metrics_where_the_engine_has_them() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo")
    baseline, draft_k2, *_ = arm_plans(config)
    resolved = {"fixture:target-wide": "/models/t", "fixture:draft": "/models/d"}

    def args(arm: ArmPlan, accepted: bool, engine: EngineSpec = config.engine) -> list[str]:
        return server_args(engine, config.models.target, arm, resolved, 8000, "m", tensor_parallel_size=1,
                           per_request_spec_metrics=accepted)

    flag = [PER_REQUEST_SPEC_METRICS, "summary"]
    spec_args = args(draft_k2, True)
    assert spec_args[spec_args.index(PER_REQUEST_SPEC_METRICS):][:2] == flag
    assert PER_REQUEST_SPEC_METRICS not in args(draft_k2, False)  # an engine without the flag
    assert PER_REQUEST_SPEC_METRICS not in args(baseline, True)  # vLLM refuses it without speculation
    chosen = config.engine.model_copy(update={"extra_args": [f"{PER_REQUEST_SPEC_METRICS}=detailed"]})
    assert [a for a in args(draft_k2, True, chosen) if a.startswith(PER_REQUEST_SPEC_METRICS)] == [
        f"{PER_REQUEST_SPEC_METRICS}=detailed"]  # the config's own choice, once
