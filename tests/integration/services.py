"""Real services the integration tests start on loopback (MLflow, Prefect, Prometheus; SeaweedFS S3 in
s3_server.py): each runs in its own process group with its output in a log file, is waited on until it
answers, and is stopped (SIGTERM, then SIGKILL) however the test ends."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import log_tail

BIN = Path(sys.executable).parent


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


@dataclass(frozen=True)
class PrefectServer:
    """A running ``prefect server``: its API URL and the environment a client process needs."""

    api_url: str
    env: dict[str, str]


def prefect_env(home: Path, api_url: str) -> dict[str, str]:
    """This process's environment with every Prefect setting replaced by the given server's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return env | {"PREFECT_HOME": str(home), "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                  "PREFECT_CLI_PROMPT": "false"}


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[PrefectServer]:
    """A real Prefect server on loopback over SQLite in ``home``. No scheduler: flow runs come
    only from a caller or an automation's trigger, never from a deployment's schedule."""
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = prefect_env(home, api_url)
    log = home / "server.log"
    argv = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui",
            "--no-scheduler", "--analytics-off"]
    with service(argv, log, env=env) as process:
        wait_until_ready(answers_http(f"{api_url}/health"), process, log, "prefect server")
        yield PrefectServer(api_url, env)


@contextlib.contextmanager
def mlflow_server(root: Path, artifacts: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A real ``mlflow server`` on loopback over SQLite in ``root``, proxying artifacts to
    ``artifacts`` (a folder or an ``s3://`` URL); yields its tracking URI once it answers."""
    port = free_port()
    argv = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", artifacts, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    server_env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))} | dict(env or {})
    server_env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # no background job workers: 2 shared cores
    log = root / "mlflow.log"
    with service(argv, log, env=server_env, cwd=root) as process:
        uri = f"http://127.0.0.1:{port}"
        wait_until_ready(answers_http(f"{uri}/health"), process, log, "mlflow server")
        yield uri


@contextlib.contextmanager
def prometheus_server(root: Path, target: str | None, scrape_interval: str = "500ms",
                      copy_as_model: str | None = None, rules: Path | None = None) -> Iterator[str]:
    """A real ``prometheus`` (Debian's package, ``make prometheus``) on loopback scraping ``target``'s
    /metrics every ``scrape_interval`` into ``root`` (nothing when None); yields its URL once its
    first scrape is up. ``copy_as_model``: a second job scrapes the same target with its
    ``model_name`` label rewritten to that name, so Prometheus holds two models' series. ``rules``:
    a rule file, evaluated every ``scrape_interval``."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is missing: apt-get install -y prometheus (make test installs it)")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    jobs = [] if target is None else [{"job_name": "vllm", "static_configs": [{"targets": [target]}]}]
    if target is not None and copy_as_model is not None:
        jobs.append({"job_name": "vllm-copy", "static_configs": [{"targets": [target]}],
                     "metric_relabel_configs": [{"source_labels": ["model_name"], "regex": "(.+)",
                                                 "target_label": "model_name", "replacement": copy_as_model}]})
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": jobs,
    } | ({"rule_files": [str(rules)]} if rules is not None else {})))
    port = free_port()
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    log = root / "prometheus.log"
    with service(argv, log, cwd=root) as process:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(answers_http(f"{url}/-/ready"), process, log, "prometheus")
        if target is not None:
            wait_until_ready(lambda: _scrapes_up(url), process, log, f"prometheus's scrape of {target}")
        yield url


def _scrapes_up(url: str) -> bool:
    try:
        targets = httpx.get(f"{url}/api/v1/targets", timeout=2).json()["data"]["activeTargets"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return bool(targets) and all(t["health"] == "up" for t in targets)
