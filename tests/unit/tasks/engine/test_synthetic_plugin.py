"""specfleet's vLLM plugin loads only where specfleet asks for it (issue 54): the distribution
declares no vLLM entry point, only a synthetic arm's server gets the plugin's folder, and the
plugin that folder names imports no module of a generic name (a ``tasks.py`` in the server's
working directory comes first on its path). The wheel is built from this tree (a few seconds)."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from specfleet.contract import arm_plans
from specfleet.contract.server_args import server_env
from specfleet_tasks.engine.synthetic_plugin import PLUGIN_GROUP, PLUGIN_PATH, arm_server_env, plugin_shipped
from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import PLUGIN_NAME
from specfleet_tasks.store.config import load_sweep_config
from tests.support.wheel import ROOT, build_wheel, entry_point_groups, top_level_modules, wheel_files

SYNTHETIC = ROOT / "benchmarks" / "configs" / "perfmodel-synthetic.yaml"
MARKER = "tasks-was-imported"
MARKER_MODULE = f"from pathlib import Path\nPath(__file__).with_name({MARKER!r}).touch()\n"
"""A ``tasks.py`` that leaves a file beside itself when anything imports it."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_distribution_declares_no_vllm_plugin_and_ships_the_plugins_folder(wheel: Path) -> None:
    assert "entry-points" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert entry_point_groups(wheel) == {"console_scripts": {"specfleet": "specfleet_cli.main:entry"}}
    folder, names = f"specfleet_{PLUGIN_PATH.relative_to(ROOT).as_posix()}", wheel_files(wheel)
    assert f"{folder}/specfleet_cpu_synthetic.py" in names
    assert f"{folder}/specfleet_vllm_plugin-0.1.0.dist-info/entry_points.txt" in names
    assert plugin_shipped()


def test_the_wheel_installs_only_specfleet_named_modules(wheel: Path) -> None:
    """The repository's tasks/, flows/ and cli/ are installed as specfleet_tasks, specfleet_flows and specfleet_cli."""
    assert top_level_modules(wheel) == {"specfleet", "specfleet_tasks", "specfleet_flows", "specfleet_cli"}


def test_only_a_synthetic_arms_server_gets_the_plugins_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/inherited")
    config = load_sweep_config(SYNTHETIC)
    plans = arm_plans(config)
    assert {plan.synthetic for plan in plans} == {True, False}
    for plan in plans:
        env = arm_server_env(config.engine, plan)
        if plan.synthetic:
            assert env == server_env(config.engine, plan) | {"PYTHONPATH": f"{PLUGIN_PATH}{os.pathsep}/inherited"}
        else:
            assert env == server_env(config.engine, plan) and "PYTHONPATH" not in env
    engine = config.engine.model_copy(update={"env": {"PYTHONPATH": "/configured"}})
    synthetic = next(plan for plan in plans if plan.synthetic)
    assert arm_server_env(engine, synthetic)["PYTHONPATH"] == f"{PLUGIN_PATH}{os.pathsep}/configured"


PROBE = f"""
import json, sys
from importlib.metadata import distributions
from pathlib import Path
[plugin] = [ep for dist in distributions(path=[{str(PLUGIN_PATH)!r}]) for ep in dist.entry_points
            if ep.group == {PLUGIN_GROUP!r}]
register = plugin.load()
seen = {{"name": plugin.name, "value": plugin.value, "callable": callable(register),
         "generic_modules": sorted(set(sys.modules) & {{"tasks", "flows", "cli"}}),
         "ran_tasks_py": Path("{MARKER}").exists()}}
import tasks  # the control: importing a module named tasks from this directory runs the file
seen["control_ran_tasks_py"] = Path("{MARKER}").exists()
print(json.dumps(seen))
"""


def test_the_plugin_loads_from_its_folder_without_importing_a_module_named_tasks(tmp_path: Path) -> None:
    """The entry point vLLM would load from the plugin's folder, loaded as vLLM loads it, from a
    directory holding a ``tasks.py`` (first on the path, as in ``python -m``): the file is not run,
    though importing ``tasks`` there runs it."""
    (tmp_path / "tasks.py").write_text(MARKER_MODULE)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"PYTHONPATH": str(PLUGIN_PATH)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": PLUGIN_NAME, "value": f"{PLUGIN_NAME}:register", "callable": True,
                                       "generic_modules": [], "ran_tasks_py": False, "control_ran_tasks_py": True}
