"""A real two-node Ray cluster on this machine, started with `ray start` as on real nodes:
a head and a worker node B, each with one CPU and one `specfleet_arm`, reached the way the
Prefect worker reaches KubeRay (the Ray client port, `RAY_ADDRESS=ray://...`) through the
sweep's own `ray_session`. Token authentication is off here (`RAY_AUTH_MODE=disabled`): Ray
reads the mode once per process, and this driver shares its process with other tests.

Placement and retry are first shown with light remote functions that carry the sweep's own
resource request (`arm_resources`) and result shape (parsed by the sweep's `arm_report`). Then a
real sweep (the CLI) runs on the cluster, its arms on the stand-in engine (`tasks/engine/standin.py`:
what is checked is Ray's and the sweep's, not what vLLM measures; the nodes and the sweep inherit
its selection): its first arm is steered to node B (the head's arm slot is held), node B is
killed while that arm's server is serving (a cell of 4 requests of 16 tokens in 100 ms steps:
about 6.4 s, of which 4.8 s are left after the first request, against the 0.3 s poll that sees
it done), and the sweep finishes with the arm retried on the head.

Loopback only: Ray maps 127.0.0.1 to the machine's outward address, so the nodes
advertise 127.0.0.2 and 127.0.0.3 (both loopback)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from specfleet.contract import arm_plans
from specfleet_tasks.cluster.session import ARM_RESOURCE, arm_resources, ray_session
from specfleet_tasks.cluster.stage import ARM_RETRIES, arm_report, arm_task
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.plan.sweep_plan import ArmWork
from specfleet_tasks.store.config import load_sweep_config
from tests.integration.processes import engine_processes, new_server_serving
from tests.integration.services import PrefectServer
from tests.integration.sweep_configs import BASELINE_ARM, NGRAM_ARM, standin_env, tiny_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
HEAD_IP, NODE_B_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_S = 120.0
TEARDOWN_GRACE_S = 3.0
"""How long the cluster's processes get to end on SIGTERM at the end of the module before SIGKILL: one
of the head's ignores SIGTERM (every teardown waited out the whole 15 s default, 16.5 s in all), and a
test cluster holds nothing a graceful stop would keep."""
SWEEP_REQUESTS = 4
"""Requests per cell of the lost-node sweep: each of its three cells lasts about 6.4 s on the stand-in."""


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    pids: set[int] = field(default_factory=set)

    def track(self) -> None:
        """Remember every process this node started, to end exactly those (by id) later."""
        with suppress(psutil.NoSuchProcess):
            self.pids |= {p.pid for p in psutil.Process(self.process.pid).children(recursive=True)}

    def stop(self, sig: signal.Signals = signal.SIGTERM, grace_s: float = 15.0) -> None:
        self.track()
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        for pid in self.pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        gone_by = time.monotonic() + grace_s
        for pid in {self.process.pid, *self.pids}:
            with suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                try:
                    proc.wait(timeout=max(0.1, gone_by - time.monotonic()))
                except psutil.TimeoutExpired:
                    proc.kill()
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    gcs_address: str
    client_address: str
    head: Node | None = None
    node_b: Node | None = None

    def start_node_b(self) -> Node:
        node = _start(self, "node-b", [
            "--address", self.gcs_address, "--node-ip-address", NODE_B_IP, "--num-cpus", "1", "--num-gpus", "0",
            "--resources", f'{{"{ARM_RESOURCE}": 1, "node_b": 1}}',
            "--dashboard-agent-listen-port", str(free_port()), "--temp-dir", str(self.root / "node-b"),
        ])
        self.node_b = node
        return node


def _start(cluster: Cluster, name: str, args: list[str]) -> Node:
    log = cluster.root / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], env=cluster.env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    node = Node(name, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            node.stop(signal.SIGKILL)
            raise RuntimeError(f"ray start ({name}) failed: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    node.track()
    return node


def _alive_nodes() -> dict[str, str]:
    """node id -> advertised IP of every live node, seen through the driver."""
    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
        # How long the head waits for a driver's client server (Ray's default). Those that start took
        # 1-3 s at a load average of 9-11 here; one whose process dies at once (the head forks it beside
        # gRPC's threads) is waited out for this long before the driver's retry (`ray_session`), which
        # at 120 s held the lost-node sweep two minutes.
        "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "30",
        # Declare a lost node dead within seconds, not the default tens of seconds.
        "RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3",
    } | standin_env()
    port, client_port = free_port(), free_port()
    made = Cluster(root, env, f"{HEAD_IP}:{port}", f"ray://{HEAD_IP}:{client_port}")
    try:
        made.head = _start(made, "head", [
            "--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--num-cpus", "1", "--num-gpus", "0",
            "--resources", f'{{"{ARM_RESOURCE}": 1}}', "--include-dashboard", "false",
            "--ray-client-server-port", str(client_port), "--dashboard-agent-listen-port", str(free_port()),
            "--temp-dir", str(root / "head"),
        ])
        made.start_node_b()
        yield made
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in (made.node_b, made.head):
            if node is not None:
                node.stop(grace_s=TEARDOWN_GRACE_S)


@pytest.fixture
def driver(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The sweep's own `ray_session` on the demo config, connected as the Prefect worker is."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ADDRESS", cluster.client_address)
    if cluster.node_b is None or cluster.node_b.process.poll() is not None:
        cluster.start_node_b()
    config = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    with ExitStack() as stack:
        for attempt in range(3):  # the client server's per-driver process can fail to start on a loaded machine
            try:
                resources = stack.enter_context(ray_session(config))
                break
            except ConnectionAbortedError:
                if attempt == 2:
                    raise
                time.sleep(2)
        deadline = time.monotonic() + 60
        while len(_alive_nodes()) < 2:  # node B (re)joining
            assert time.monotonic() < deadline, "node B did not join"
            time.sleep(0.5)
        yield arm_resources(config) | {"first": resources}  # recomputed now that both nodes are in


@ray.remote
def light_arm(arm: str, seconds: float, marks: str) -> dict[str, Any]:
    """One 'server life' that only sleeps; records each attempt's node in the marks file."""
    node = ray.get_runtime_context().get_node_id()
    path = Path(marks) / arm
    with path.open("a") as handle:
        handle.write(node + "\n")
    attempts = path.read_text().split()
    time.sleep(seconds if len(attempts) == 1 else 1.0)
    return {"arm": arm, "error": None, "timing": {"wall_s": seconds}, "cells": [], "not_measured": [], "node": node}


def _work(arm: str) -> ArmWork:
    config = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    chosen = next(a for a in arm_plans(config) if a.arm.startswith(arm))
    return ArmWork(arm=chosen, phase="main", cells=[], probe=False)


def _wait_for_marks(marks: Path, arms: list[str], timeout_s: float = 60.0) -> dict[str, list[str]]:
    deadline = time.monotonic() + timeout_s
    while not all((marks / a).exists() for a in arms):
        assert time.monotonic() < deadline, "arms did not start"
        time.sleep(0.2)
    return {a: (marks / a).read_text().split() for a in arms}


def test_arm_resources_ask_for_a_whole_node(driver: dict[str, Any]) -> None:
    assert driver["first"] == {"num_cpus": 1.0, "resources": {ARM_RESOURCE: 1}}
    assert driver["num_cpus"] == 1.0 and driver["resources"] == {ARM_RESOURCE: 1}


def test_arms_land_on_both_nodes(driver: dict[str, Any], tmp_path: Path) -> None:
    options = {k: v for k, v in driver.items() if k != "first"}
    refs = [light_arm.options(**options).remote(arm, 3.0, str(tmp_path)) for arm in ("baseline", "ngram")]
    results = ray.get(refs, timeout=120)
    nodes = _alive_nodes()
    assert sorted(nodes[r["node"]] for r in results) == [HEAD_IP, NODE_B_IP]


def test_a_lost_node_is_retried_on_the_head(cluster: Cluster, driver: dict[str, Any], tmp_path: Path) -> None:
    """With the sweep's own retry setting the arm on the lost node reruns on the head and
    comes back through the sweep's `arm_report` without an error."""
    options = {k: v for k, v in driver.items() if k != "first"} | {"max_retries": ARM_RETRIES}
    assert arm_task._default_options["max_retries"] == ARM_RETRIES >= 1  # type: ignore[attr-defined]
    nodes = _alive_nodes()
    refs = {arm: light_arm.options(**options).remote(arm, 10.0, str(tmp_path)) for arm in ("baseline", "ngram")}
    first = _wait_for_marks(tmp_path, list(refs))
    on_b = next(arm for arm, seen in first.items() if nodes[seen[0]] == NODE_B_IP)
    assert cluster.node_b is not None
    cluster.node_b.stop(signal.SIGKILL)  # the machine is gone: raylet, agents and the arm's worker
    results = {arm: ray.get(ref, timeout=180) for arm, ref in refs.items()}
    attempts = (tmp_path / on_b).read_text().split()
    assert [nodes[n] for n in attempts] == [NODE_B_IP, HEAD_IP]
    assert _alive_nodes()[results[on_b]["node"]] == HEAD_IP
    reports = {arm: arm_report(_work(arm), ref) for arm, ref in refs.items()}
    assert all(report.error is None for report in reports.values())


@ray.remote
def hold_the_slot(started: str, release: str, timeout_s: float = 900.0) -> None:
    """Occupies a node's arm slot until ``release`` exists."""
    Path(started).touch()
    deadline = time.monotonic() + timeout_s
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def _new_server_serving(before: set[int], sweep: subprocess.Popen[bytes], log: Path,
                        timeout_s: float = 600.0) -> psutil.Process:
    """The first arm server not in ``before`` that has answered a request."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert sweep.poll() is None, f"the sweep ended early:\n{log.read_text(errors='replace')[-4000:]}"
        proc = new_server_serving(before, requests=1)
        if proc is not None:
            return proc
        time.sleep(0.3)
    raise AssertionError("no arm server came up and served")


def _runs_under(proc: psutil.Process, node: Node) -> bool:
    return node.process.pid in {p.pid for p in proc.parents()}


@pytest.mark.timeout(600)
def test_a_sweep_finishes_after_its_worker_node_is_lost(
    cluster: Cluster, driver: dict[str, Any], tmp_path: Path, fixture_models: dict[str, str],
    prefect_api: PrefectServer,
) -> None:
    assert cluster.head is not None and cluster.node_b is not None
    head_id = next(node for node, ip in _alive_nodes().items() if ip == HEAD_IP)
    started, release = tmp_path / "held", tmp_path / "release"
    holder = hold_the_slot.options(  # type: ignore[attr-defined]
        num_cpus=0, resources={ARM_RESOURCE: 1},
        scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(head_id, soft=False),
    ).remote(str(started), str(release))
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the head's arm slot was not taken"
        time.sleep(0.2)

    config = tiny_sweep_config(tmp_path / "lost-node.yaml", "it-lost-node", [BASELINE_ARM, NGRAM_ARM],
                               requests=SWEEP_REQUESTS)
    env = cluster.env | {"RAY_ADDRESS": cluster.client_address, "PREFECT_HOME": str(tmp_path / "prefect-home"),
                         "PREFECT_API_URL": prefect_api.api_url}
    log = tmp_path / "sweep.log"
    before = {p.pid for p in engine_processes()}
    with log.open("w") as out:
        sweep = subprocess.Popen(
            [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", "sweep", str(config),
             "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--results-dir", str(tmp_path / "results")],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        on_b = _new_server_serving(before, sweep, log)
        assert _runs_under(on_b, cluster.node_b), "the first arm did not run on node B"
        release.touch()
        cluster.node_b.stop(signal.SIGKILL)  # mid-arm: the server on B has served, its cells are not all done
        retried = _new_server_serving(before | {on_b.pid}, sweep, log)
        assert _runs_under(retried, cluster.head), "the retried arm did not run on the head"
        assert "--speculative-config" not in retried.cmdline(), "the next server is not the baseline's retry"
        code = sweep.wait(timeout=900)
    finally:
        release.touch()
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert code == 0, output[-4000:]
    ray.get(holder, timeout=30)
    sweep_id = output.split("sweep id: ", 1)[1].split()[0]
    results = tmp_path / "results" / sweep_id
    summary = json.loads((results / "summary.json").read_text())
    cells = [json.loads(p.read_text()) for p in (results / "cells").glob("*.json")]
    assert summary["cells_complete"] == len(cells) == 3  # the baseline at the start and the end, ngram k=3
    assert all(cell["status"] == "ok" and cell["completed"] == SWEEP_REQUESTS for cell in cells)
    assert all(cell["engine_version"].endswith("+standin") for cell in cells)  # labelled, never taken for vLLM
