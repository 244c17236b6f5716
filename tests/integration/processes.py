"""Finding the processes a test started: vLLM servers and engines (and stand-in engines), and
anything marked by an environment variable."""

import contextlib
import os
import time

import httpx
import psutil

from specfleet_tasks.engine.engines import STANDIN, VLLM


def engine_processes() -> list[psutil.Process]:
    """Every vLLM API server or engine core process, or stand-in engine, on this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        servers = (VLLM.module, STANDIN.module)
        if any(m in cmdline for m in servers) or (proc.info["name"] or "").startswith(("VLLM::", "EngineCore")):
            found.append(proc)
    return found


def new_server_serving(before: set[int], requests: int) -> psutil.Process | None:
    """An arm's server not in ``before`` whose /metrics counts ``requests`` finished ones."""
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
