"""Shared fixtures for tests that start real services: the fixture models and a demo-derived config."""

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from specfleet.server_args import SERVER_MODULE

ROOT = Path(__file__).resolve().parents[2]


def engine_processes() -> list[psutil.Process]:
    """Every vLLM API server or engine core process on this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if SERVER_MODULE in cmdline or (proc.info["name"] or "").startswith(("VLLM::", "EngineCore")):
            found.append(proc)
    return found


@pytest.fixture(scope="session")
def fixture_models() -> dict[str, str]:
    from tasks.fixtures.build import build_fixtures

    paths = build_fixtures()
    return {"fixture:target": str(paths.target), "fixture:draft": str(paths.draft),
            "fixture:tokenizer": str(paths.tokenizer)}


def new_server_serving(before: set[int], requests: int) -> psutil.Process | None:
    """A vLLM API server not in ``before`` whose /metrics counts ``requests`` finished ones."""
    for proc in engine_processes():
        with contextlib.suppress(psutil.Error, httpx.HTTPError, ValueError):
            cmdline = proc.cmdline()
            if proc.pid in before or "--port" not in cmdline:
                continue
            port = cmdline[cmdline.index("--port") + 1]
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            done = [ln for ln in metrics.splitlines() if ln.startswith("vllm:request_success_total")]
            if sum(float(ln.rsplit(" ", 1)[1]) for ln in done) >= requests:
                return proc
    return None


def live_engine_pids() -> set[int]:
    """Engine processes still alive (zombies left for init to reap are dead and hold nothing)."""
    pids = set()
    for proc in engine_processes():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                pids.add(proc.pid)
    return pids


@pytest.fixture
def no_orphans() -> Iterator[None]:
    """Fails the test if it leaves a vLLM process behind."""
    before = live_engine_pids()
    yield
    left = live_engine_pids() - before
    assert not left, f"orphan engine processes: {sorted(left)}"


def marked_processes(name: str, value: str, grace_s: float = 20.0) -> list[str]:
    """Live processes whose environment has ``name=value`` (what one test started: Ray's
    processes, vLLM servers), after waiting up to ``grace_s`` for them to end."""
    deadline = time.monotonic() + grace_s
    while True:
        left = []
        for proc in psutil.process_iter(["name", "status"]):
            with contextlib.suppress(psutil.Error):
                if (proc.pid != os.getpid() and proc.info["status"] != psutil.STATUS_ZOMBIE
                        and proc.environ().get(name) == value):
                    left.append(f"{proc.pid} {proc.info['name']}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


BASELINE_ARM: dict[str, object] = {"name": "baseline", "method": "baseline"}
NGRAM_ARM = {"name": "ngram", "method": "ngram", "k": [3], "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def tiny_sweep_config(path: Path, name: str, arms: list[dict[str, object]], requests: int = 4,
                      warmup: int = 0, max_tokens: int = 16, **sections: object) -> Path:
    """The demo config cut to one prompt class at concurrency 1 and greedy probes only (no
    stochastic one), for sweeps in tests; ``sections`` replace whole top-level sections."""
    data = yaml.safe_load((ROOT / "configs" / "demo-cpu.yaml").read_text())
    data |= {"name": name, "arms": arms,
             "prompt_classes": [{"name": "code", "max_output_tokens": max_tokens}],
             "equivalence": {"prompt_class": "code", "prompts": 2, "greedy_max_tokens": 8}}
    data["load"] |= {"concurrency": [1], "requests_per_cell": requests, "warmup_requests": warmup}
    data |= sections
    path.write_text(yaml.safe_dump(data))
    return path
