"""Real services the integration tests start on loopback (MLflow, Prefect, SeaweedFS S3): each
runs in its own process group with its output in a log file, is waited on until it answers,
and is stopped (SIGTERM, then SIGKILL) however the test ends."""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx

from tasks.engine.server import log_tail


def stop_group(process: "subprocess.Popen[bytes]", grace_s: float = 15.0) -> None:
    """SIGTERM a service's process group, SIGKILL it after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def service(argv: list[str], log: Path, *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None) -> "Iterator[subprocess.Popen[bytes]]":
    """Start ``argv`` in a new process group writing to ``log``; stop the group on exit."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            yield process
        finally:
            stop_group(process)


def wait_until_ready(ready: Callable[[], bool], process: "subprocess.Popen[bytes]", log: Path, what: str,
                     timeout_s: float = 120.0) -> None:
    """Poll ``ready`` every half second; fail with the log's tail if the service exits or
    does not answer within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}; its log ends:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {timeout_s:g} s; its log ends:\n{log_tail(log)}")
        time.sleep(0.5)


def answers_http(url: str) -> Callable[[], bool]:
    """A readiness check: GET ``url`` returns 200."""
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == httpx.codes.OK
        except httpx.HTTPError:
            return False
    return check
