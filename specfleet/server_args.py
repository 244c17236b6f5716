"""The vLLM server command line and environment for one arm (pure: no process is started here)."""

import json
from collections.abc import Mapping

from specfleet.contract.matrix import ArmPlan
from specfleet.contract.models import EngineSpec, ModelRef

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def server_args(
    engine: EngineSpec,
    target: ModelRef,
    arm: ArmPlan,
    resolved: Mapping[str, str],
    port: int,
    served_model_name: str,
    seed: int = 0,
) -> list[str]:
    """Arguments after ``python -m vllm.entrypoints.openai.api_server``.

    ``resolved`` maps model names in the config (e.g. ``fixture:target``) to what the
    server loads; names not in it are passed as they are. The API key is not here: it
    travels in the environment (VLLM_API_KEY) so it never appears in a process listing
    or a log.
    """
    args = [
        "--model", resolved.get(target.path, target.path),
        "--served-model-name", served_model_name,
        "--host", engine.host,
        "--port", str(port),
        "--dtype", target.dtype,
        "--seed", str(seed),
    ]
    if target.tokenizer:
        args += ["--tokenizer", resolved.get(target.tokenizer, target.tokenizer)]
    if target.revision:
        args += ["--revision", target.revision]
    if target.quantization:
        args += ["--quantization", target.quantization]
    if engine.max_model_len:
        args += ["--max-model-len", str(engine.max_model_len)]
    if engine.max_num_seqs:
        args += ["--max-num-seqs", str(engine.max_num_seqs)]
    if engine.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
    if arm.speculative_config is not None:
        spec = dict(arm.speculative_config)
        if isinstance(spec.get("model"), str):
            spec["model"] = resolved.get(str(spec["model"]), str(spec["model"]))
        args += ["--speculative-config", json.dumps(spec, sort_keys=True)]
    return args + list(engine.extra_args)


def server_env(engine: EngineSpec, arm: ArmPlan) -> dict[str, str]:
    """Environment additions for the arm's server (config env, then arm env)."""
    env = {"VLLM_LOGGING_LEVEL": "INFO"}
    if engine.cpu_kvcache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(engine.cpu_kvcache_space_gib)
    if engine.host in LOOPBACK:
        # POST /reset_prefix_cache is a dev endpoint; enable it only on a loopback bind.
        env["VLLM_SERVER_DEV_MODE"] = "1"
    env.update(engine.env)
    env.update(arm.env)
    return env
