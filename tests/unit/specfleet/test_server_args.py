"""The server command line for each arm."""

import json
from pathlib import Path

from specfleet.contract import arm_plans, parse_sweep_config
from specfleet.server_args import server_args, server_env

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
