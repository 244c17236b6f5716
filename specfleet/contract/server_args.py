"""The vLLM server command line and environment for one arm (pure: no process is started here)."""

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import ArmPlan, arm_plans
from specfleet.contract.models import EngineSpec, ModelRef
from specfleet.contract.sweep import SweepConfig

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
PLACED_BY_DEPLOYMENT = ("--host", "--port")
"""Flags a deployment sets itself, left out of the stored arguments."""
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
    *,
    tensor_parallel_size: int,
    seed: int = 0,
    per_request_spec_metrics: bool = False,
) -> list[str]:
    """Arguments after ``python -m vllm.entrypoints.openai.api_server``.

    ``resolved`` maps model names in the config (e.g. ``fixture:target``) to what the
    server loads; names not in it are passed as they are. The API key is not here: it
    travels in the environment (VLLM_API_KEY) so it never appears in a process listing
    or a log. ``tensor_parallel_size`` is the hardware's (``hardware.tensor_parallel_size``): the
    accelerators Ray reserves for the arm and the cost charges are the ones the server shards over.
    With ``per_request_spec_metrics`` (the engine accepts the flag) a speculative arm
    gets ``--per-request-spec-decode-metrics summary``, unless ``engine.extra_args`` sets it.
    """
    args = [
        "--model", resolved.get(target.path, target.path),
        "--served-model-name", served_model_name,
        "--host", engine.host,
        "--port", str(port),
        "--dtype", target.dtype,
        "--seed", str(seed),
        "--tensor-parallel-size", str(tensor_parallel_size),
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


def server_command(args: Sequence[str]) -> str:
    """The shell command that starts a server with ``args``."""
    return shlex.join(["python", "-m", SERVER_MODULE, *args])


def _without(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``args`` less each of ``flags`` and its value."""
    return [a for i, a in enumerate(args) if a not in flags and (i == 0 or args[i - 1] not in flags)]


class ArmServerCommand(RecordModel):
    """One arm's server as the sweep starts it (``specfleet validate --json``): the dry run a user
    reviews before a night on the accelerators."""

    arm: str
    command: str = Field(description="The server's shell command, without --port (each server gets a free "
                         "port when it starts).")
    env: dict[str, str] = Field(description="What the server's environment adds to the sweep's (never the API key).")


def arm_server_commands(config: SweepConfig, resolved: Mapping[str, str], served_model_name: str,
                        per_request_spec_metrics: Callable[[ArmPlan], bool]) -> list[ArmServerCommand]:
    """Every arm's ``server_args`` and ``server_env``, ``per_request_spec_metrics`` telling which
    arms the engine gives per-request acceptance (``specfleet_tasks.engine.features``)."""
    commands = []
    for arm in arm_plans(config):
        args = server_args(config.engine, config.models.target, arm, resolved, 0, served_model_name,
                           tensor_parallel_size=config.hardware.tensor_parallel_size,
                           per_request_spec_metrics=per_request_spec_metrics(arm))
        commands.append(ArmServerCommand(arm=arm.arm, command=server_command(_without(args, ("--port",))),
                                         env=server_env(config.engine, arm)))
    return commands


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
        return server_command(self.speculation_off if arm is None else self.speculative[arm])


def deployment_args(config: SweepConfig, resolved: Mapping[str, str], served_model_name: str,
                    seed: int = 0) -> DeploymentArgs:
    """Every arm's ``server_args`` less the flags in ``PLACED_BY_DEPLOYMENT``."""
    def args(arm: ArmPlan) -> list[str]:
        return _without(server_args(config.engine, config.models.target, arm, resolved, 0, served_model_name,
                                    tensor_parallel_size=config.hardware.tensor_parallel_size, seed=seed),
                        PLACED_BY_DEPLOYMENT)

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
