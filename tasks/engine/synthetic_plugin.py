"""The environment that loads specfleet's vLLM plugin (``tasks/engine/vllm_plugin``) into a server.

Only the servers specfleet starts for synthetic arms get it: the plugin's folder on their
``PYTHONPATH``, which every vLLM process of the server inherits (API server, engine core, workers).
vLLM finds general plugins through installed distributions' entry points, and specfleet's own
distribution declares none, so every other vLLM process of the environment, a real arm's server
included, runs the engine's own kernels."""

import os
from collections.abc import Mapping
from importlib.metadata import distributions
from pathlib import Path

from specfleet.contract.matrix import ArmPlan
from specfleet.contract.models import EngineSpec
from specfleet.contract.server_args import server_env
from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import PLUGIN_NAME

PLUGIN_PATH = Path(__file__).resolve().parent / "vllm_plugin"
"""The folder a synthetic arm's server finds the plugin in: its distribution metadata and module."""
PLUGIN_GROUP = "vllm.general_plugins"


def plugin_shipped() -> bool:
    """Whether the plugin's folder declares its entry point (an install without the package's data would not)."""
    return any(ep.group == PLUGIN_GROUP and ep.name == PLUGIN_NAME
               for dist in distributions(path=[str(PLUGIN_PATH)]) for ep in dist.entry_points)


def with_synthetic_plugin(env: Mapping[str, str]) -> dict[str, str]:
    """A server's environment additions ``env`` with the plugin's folder first on the ``PYTHONPATH``
    the server would otherwise get (``env``'s, else this process's)."""
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return {**env, "PYTHONPATH": os.pathsep.join(path for path in (str(PLUGIN_PATH), inherited) if path)}


def arm_server_env(engine: EngineSpec, arm: ArmPlan) -> dict[str, str]:
    """The arm's server environment additions (``server_env``), with the plugin for a synthetic arm only."""
    env = server_env(engine, arm)
    return with_synthetic_plugin(env) if arm.synthetic else env
