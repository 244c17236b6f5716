"""vLLM's GPU build, without a GPU: every arm of every shipped GPU config, rendered as the sweep
starts its server (``server_args``, ``server_env``), goes through that build's own server parser
and ``AsyncEngineArgs.create_engine_config()`` (``gpu_parser/probe.py``), and the engine config it
builds runs the tensor-parallel size, the speculative config and vLLM's default model runner the
config states.

The wheels are fetched once and unpacked, not installed (``infra/vllm_gpu_wheel.py``; ``make test``
fetches them). The models are stand-ins: each hub id maps to a folder holding only that
checkpoint's ``config.json`` (``gpu_parser/models``), all an engine config reads.
"""

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from infra.vllm_gpu_wheel import STAMP, VERSIONS, wheel_dir
from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.server_args import server_args, server_env
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.plan.engine_support import RUNNER_ENV
from specfleet_tasks.store.config import load_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.gpu_parser]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "gpu_parser"
STAND_INS = {
    "meta-llama/Llama-3.3-70B-Instruct": HERE / "models" / "llama-3.3-70b-instruct",
    "meta-llama/Llama-3.2-1B-Instruct": HERE / "models" / "llama-3.2-1b-instruct",
    "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B": HERE / "models" / "eagle3-llama3.3-instruct-70b",
}
GPU_CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml") if not load_sweep_config(p).hardware.on_cpu)
WITHOUT_TP = "baseline-without-tp"
"""The baseline with --tensor-parallel-size left out: the engine must then read TP 1, or the
assertions below could not see the flag go missing."""


def _wheel(version: str) -> Path:
    cache_dir = Path(os.environ.get("SPECFLEET_CACHE_DIR") or Path.home() / ".cache" / "specfleet")
    path = wheel_dir(cache_dir, version)
    if not (path / STAMP).is_file():
        pytest.fail(f"vLLM {version}'s GPU wheel is not unpacked under {path}: "
                    f"python infra/vllm_gpu_wheel.py {cache_dir} {version} (make test runs it)")
    return path


def _rendered(config: SweepConfig) -> list[dict[str, Any]]:
    """Each arm's arguments and environment as ``specfleet_tasks.arm.lifecycle`` starts its server, on an
    engine with per-request acceptance (both builds have it)."""
    resolved = {name: str(path) for name, path in STAND_INS.items()}
    arms = []
    for arm in arm_plans(config):
        args = server_args(config.engine, config.models.target, arm, resolved, 8000, SERVED_MODEL_NAME,
                           tensor_parallel_size=config.hardware.tensor_parallel_size,
                           per_request_spec_metrics=arm.speculative_config is not None)
        arms.append({"arm": arm.arm, "args": args, "env": server_env(config.engine, arm)})
    baseline, flag = arms[0]["args"], "--tensor-parallel-size"
    without = [a for i, a in enumerate(baseline) if a != flag and (i == 0 or baseline[i - 1] != flag)]
    arms.append({"arm": WITHOUT_TP, "args": without, "env": arms[0]["env"]})
    return arms


@cache
def _engine_views() -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """version -> (config, arm) -> what that version's engine made of the arm: one child process per
    version, all running at once (importing vLLM is most of their time)."""
    arms = [{**arm, "arm": f"{name}/{arm['arm']}"} for name in GPU_CONFIGS
            for arm in _rendered(load_sweep_config(ROOT / "configs" / name))]
    children = {version: subprocess.Popen([sys.executable, str(HERE / "probe.py")], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env=os.environ | {"VLLM_LOGGING_LEVEL": "WARNING"})
                for version in VERSIONS}
    views: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    try:
        for version, child in children.items():
            out, err = child.communicate(json.dumps({"wheel": str(_wheel(version)), "arms": arms}), timeout=1200)
            assert child.returncode == 0, err[-4000:]
            found = views.setdefault(version, {})
            for view in (json.loads(line) for line in out.splitlines() if line.startswith("{")):
                name, arm = view["arm"].split("/", 1)
                found[name, arm] = view
    finally:  # a probe that failed or hung leaves no other probe running
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    return views


@pytest.mark.parametrize("config_name", GPU_CONFIGS)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_arm_runs_as_the_config_states_on_the_gpu_build(version: str, config_name: str) -> None:
    config = load_sweep_config(ROOT / "configs" / config_name)
    views = {arm: view for (name, arm), view in _engine_views()[version].items() if name == config_name}
    plans = arm_plans(config)
    assert set(views) == {plan.arm for plan in plans} | {WITHOUT_TP}
    for plan in plans:
        view = views[plan.arm]
        assert "error" not in view, (plan.arm, view)
        assert view["version"] == version
        assert view["tensor_parallel_size"] == config.hardware.tensor_parallel_size, plan.arm
        assert view["quantization"] == config.models.target.quantization
        assert view["max_model_len"] == config.engine.max_model_len
        assert view["deprecations"] == [], (plan.arm, view["deprecations"])
        # vLLM's own choice of runner on a GPU node: nothing in the arm's environment overrides it
        assert RUNNER_ENV not in config.engine.env | plan.env and view["model_runner_v2"], plan.arm
        spec = view["speculative"]
        if plan.speculative_config is None:
            assert spec is None and view["per_request_spec_decode_metrics"] == "none"
            continue
        assert view["per_request_spec_decode_metrics"] == "summary"
        assert spec["method"] == plan.method and spec["num_speculative_tokens"] == plan.k, plan.arm
        stated = plan.speculative_config
        if plan.method == "ngram":
            assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (
                stated["prompt_lookup_min"], stated["prompt_lookup_max"])
        else:
            assert spec["model"] == str(STAND_INS[str(stated["model"])]), plan.arm
    assert views[WITHOUT_TP]["tensor_parallel_size"] == 1 != config.hardware.tensor_parallel_size
