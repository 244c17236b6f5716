"""The vLLM server command line and environment for one arm (pure: no process is started here)."""

import json
import shlex
from collections.abc import Mapping

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import ArmPlan, arm_plans
from specfleet.contract.models import EngineSpec, ModelRef
from specfleet.contract.sweep import SweepConfig

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PLACED_BY_DEPLOYMENT = ("--host", "--port")
"""Flags a deployment sets itself, left out of the stored arguments."""


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


class DeploymentArgs(RecordModel):
    """Each arm's server arguments for the sweep's target, as its servers ran them, without
    ``--host`` and ``--port`` (the deployment's own). Speculation is set when a vLLM server
    starts (``--speculative-config``) and cannot be turned off while it runs, so rolling back
    is restarting the replica with ``speculation_off``."""

    speculation_off_arm: str = Field(description="The baseline arm, whose arguments turn speculation off.")
    speculation_off: list[str] = Field(description="Arguments after `python -m vllm.entrypoints.openai.api_server`.")
    speculative: dict[str, list[str]] = Field(description="Each speculative arm's arguments, by arm id.")

    def command(self, arm: str | None = None) -> str:
        """The shell command of ``arm``'s server (the speculation-off one when None)."""
        args = self.speculation_off if arm is None else self.speculative[arm]
        return shlex.join(["python", "-m", SERVER_MODULE, *args])


def deployment_args(config: SweepConfig, resolved: Mapping[str, str], served_model_name: str,
                    seed: int = 0) -> DeploymentArgs:
    """Every arm's ``server_args`` less the flags in ``PLACED_BY_DEPLOYMENT``."""
    def args(arm: ArmPlan) -> list[str]:
        full = server_args(config.engine, config.models.target, arm, resolved, 0, served_model_name, seed)
        return [a for i, a in enumerate(full) if a not in PLACED_BY_DEPLOYMENT
                and (i == 0 or full[i - 1] not in PLACED_BY_DEPLOYMENT)]

    plans = arm_plans(config)
    return DeploymentArgs(speculation_off_arm=plans[0].arm, speculation_off=args(plans[0]),
                          speculative={plan.arm: args(plan) for plan in plans[1:]})


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
