"""What the installed engine's server accepts, read from its own argument parser (``--help`` of
the module an arm's server runs, in a child process: importing vLLM is seconds) once per engine
version and cached, so an upgrade reads it again."""

import json
import subprocess
from pathlib import Path

from specfleet.contract.matrix import ArmPlan
from specfleet.contract.server_args import accepts_per_request_spec_metrics
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.engines import arm_engine
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.store.results import atomic_write_text

HELP_TIMEOUT_S = 300.0
PER_REQUEST_KEY = "per_request_spec_decode_metrics"


def _server_help() -> str | None:
    """The server's ``--help``, or None when it could not be read (then nothing is cached)."""
    try:
        done = subprocess.run(arm_engine().command(["--help"]), capture_output=True, text=True,
                              timeout=HELP_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return done.stdout if done.returncode == 0 else None


def engine_accepts_per_request_spec_metrics(cache_root: Path | None = None) -> bool:
    """Whether the installed server accepts ``--per-request-spec-decode-metrics summary``."""
    engine, version = engine_distribution()
    path = (cache_root or default_cache_root()) / "engine-features" / f"{engine}-{version}.json"
    if version is not None and path.is_file():
        return bool(json.loads(path.read_text(encoding="utf-8")).get(PER_REQUEST_KEY))
    help_text = _server_help()
    if help_text is None:
        return False
    accepted = accepts_per_request_spec_metrics(help_text)
    if version is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({PER_REQUEST_KEY: accepted}))
    return accepted


def per_request_spec_metrics(arm: ArmPlan, cache_root: Path | None = None) -> bool:
    """Whether ``arm``'s server starts with ``--per-request-spec-decode-metrics summary``: a
    speculative arm on an engine that accepts it (the baseline never asks the engine)."""
    return arm.speculative_config is not None and engine_accepts_per_request_spec_metrics(cache_root)
