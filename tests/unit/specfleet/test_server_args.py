"""The server command line for each arm."""

import json
from pathlib import Path

from specfleet.contract import arm_plans, parse_sweep_config
from specfleet.server_args import deployment_args, server_args, server_env

ROOT = Path(__file__).resolve().parents[3]


def test_arms_get_their_speculative_config_with_resolved_draft() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo")
    resolved = {"fixture:target": "/models/t", "fixture:draft": "/models/d"}
    baseline, draft_k2, _, ngram = arm_plans(config)
    base_args = server_args(config.engine, config.models.target, baseline, resolved, 8000, "m")
    assert base_args[base_args.index("--model") + 1] == "/models/t"
    assert "--speculative-config" not in base_args
    args = server_args(config.engine, config.models.target, draft_k2, resolved, 8000, "m")
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "/models/d", "num_speculative_tokens": 2}
    ngram_args = server_args(config.engine, config.models.target, ngram, resolved, 8000, "m")
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
    resolved = {"fixture:target": "/models/t", "fixture:draft": "/models/d"}
    stored = deployment_args(config, resolved, "m")
    plans = arm_plans(config)
    assert stored.speculation_off_arm == "baseline" and list(stored.speculative) == [p.arm for p in plans[1:]]
    for plan, args in [(plans[0], stored.speculation_off), *((p, stored.speculative[p.arm]) for p in plans[1:])]:
        full = server_args(config.engine, config.models.target, plan, resolved, 8000, "m")
        host, port = full.index("--host"), full.index("--port")
        assert args == [a for i, a in enumerate(full) if i not in (host, host + 1, port, port + 1)]
    assert stored.command() == ("python -m vllm.entrypoints.openai.api_server --model /models/t --served-model-name m "
                                "--dtype float32 --seed 0 --max-model-len 1024 --max-num-seqs 16")
    assert "'{\"method\": \"ngram\"" in stored.command("ngram-k3")  # the JSON quoted for a shell
