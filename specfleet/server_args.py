"""The vLLM server command line and environment for one arm (pure: no process is started here)."""

import json
import re
from collections.abc import Mapping

from specfleet.contract.matrix import ArmPlan
from specfleet.contract.models import EngineSpec, ModelRef

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PER_REQUEST_SPEC_METRICS = "--per-request-spec-decode-metrics"
"""vLLM's flag for ``metrics.speculative_decoding`` in each response (docs/measurement.md,
"Per-request acceptance"); speculative arms start with it at ``summary`` where the engine has it."""
PER_REQUEST_SPEC_METRICS_LEVEL = "summary"


def flag_choices(help_text: str, flag: str) -> set[str] | None:
    """The choices the server's ``--help`` lists for ``flag`` (``[--flag {a,b}]``); an empty set for
    a flag without listed choices; None when the help does not name the flag."""
    found = re.search(re.escape(flag) + r"(?![\w-])(?:[ =]\{([^}]*)\})?", help_text)
    if found is None:
        return None
    return {choice.strip() for choice in found.group(1).split(",")} if found.group(1) else set()


def accepts_per_request_spec_metrics(help_text: str) -> bool:
    """Whether a server with this ``--help`` accepts ``--per-request-spec-decode-metrics summary``."""
    return PER_REQUEST_SPEC_METRICS_LEVEL in (flag_choices(help_text, PER_REQUEST_SPEC_METRICS) or set())


def server_args(
    engine: EngineSpec,
    target: ModelRef,
    arm: ArmPlan,
    resolved: Mapping[str, str],
    port: int,
    served_model_name: str,
    seed: int = 0,
    per_request_spec_metrics: bool = False,
) -> list[str]:
    """Arguments after ``python -m vllm.entrypoints.openai.api_server``.

    ``resolved`` maps model names in the config (e.g. ``fixture:target``) to what the
    server loads; names not in it are passed as they are. The API key is not here: it
    travels in the environment (VLLM_API_KEY) so it never appears in a process listing
    or a log. With ``per_request_spec_metrics`` (the engine accepts the flag) a speculative arm
    gets ``--per-request-spec-decode-metrics summary``, unless ``engine.extra_args`` sets it.
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
        if per_request_spec_metrics and not any(a.split("=")[0] == PER_REQUEST_SPEC_METRICS
                                                for a in engine.extra_args):
            args += [PER_REQUEST_SPEC_METRICS, PER_REQUEST_SPEC_METRICS_LEVEL]
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
