"""Server start-ups recorded on this machine, per engine version, the models a server loads and the
engine settings that change its start (extra arguments such as ``--enforce-eager``, environment): what
the plan's prior counts on before any sweep of a config exists (a start-up is mostly the engine's,
the host's and the models' own; the prior's stated default only where nothing was recorded)."""

import functools
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from specfleet.contract import ArmPlan, SweepConfig
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.engines import arm_engine
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.store.results import atomic_write_text

STARTUPS_DIR = "startups"
KEEP = 20
"""The newest start-ups of the same models that count."""
IMPORT_TIMEOUT_S = 300.0


def startup_key(config: SweepConfig, arm: ArmPlan) -> tuple[str, ...]:
    """What a recorded start-up is matched on: the models an arm's server loads, as the config names
    them, then its engine settings (extra arguments and environment, the arm's over the engine's)."""
    draft = (arm.speculative_config or {}).get("model")
    env = {**config.engine.env, **arm.env}
    settings = json.dumps([config.engine.extra_args, sorted(env.items())])
    # hashed: an argument or a variable may hold a credential, which never reaches a file
    digest = hashlib.sha256(settings.encode()).hexdigest()[:16]
    return (config.models.target.path, *([draft] if isinstance(draft, str) else []), f"settings:{digest}")


def _path(cache_root: Path | None) -> Path:
    engine, version = engine_distribution()
    return (cache_root or default_cache_root()) / STARTUPS_DIR / f"{engine}-{version}.jsonl"


def record_startup(models: Sequence[str], startup_s: float, cache_root: Path | None = None) -> None:
    """Append one start-up (one short line: concurrent servers' appends do not interleave); best
    effort, never a reason for an arm to fail."""
    path = _path(cache_root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"models": list(models), "startup_s": round(startup_s, 3)}) + "\n")
    except OSError:
        pass


@functools.lru_cache(maxsize=64)
def recorded_startups(models: tuple[str, ...], cache_root: Path | None = None) -> tuple[float, ...]:
    """The newest ``KEEP`` start-ups of servers that loaded exactly ``models`` with this engine version.
    Read once per process: a sweep's budget keeps the start-ups it was planned with, so a later stage's
    plan does not shift under it when the sweep's own servers record theirs."""
    try:
        lines = _path(cache_root).read_text(encoding="utf-8").splitlines()
    except OSError:
        return ()
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
            if entry.get("models") == list(models) and float(entry["startup_s"]) > 0:
                found.append(float(entry["startup_s"]))
        except (ValueError, KeyError, TypeError):  # a torn or foreign line
            continue
    return tuple(found[-KEEP:])


def startup_note(recorded: Mapping[str, Sequence[float]]) -> str | None:
    """What the prior says about the start-ups it read, or None without any."""
    counts = [len(v) for v in recorded.values() if v]
    if not counts:
        return None
    medians = [statistics.median(v) for v in recorded.values() if v]

    def span(low: float, high: float, unit: str = "") -> str:
        return f"{low:.0f}{unit}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}{unit}"

    return (f"server start-up: the median of up to {KEEP} starts of the same models recorded on this machine "
            f"({span(min(counts), max(counts))} per arm, {span(min(medians), max(medians), ' s')}), not the default")


def _import_path(cache_root: Path | None) -> Path:
    engine, version = engine_distribution()
    return (cache_root or default_cache_root()) / STARTUPS_DIR / f"{engine}-{version}-import.json"


@functools.cache
def engine_import_s(cache_root: Path | None = None) -> float | None:
    """Seconds a fresh process takes to import the module an arm's server runs, on this machine with
    this engine version: timed once (a child process, about 10 s on 2 cores) and kept, since the
    prior needs it only until this machine records a start of the config's models. None when the
    import fails (nothing kept)."""
    path = _import_path(cache_root)
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["import_s"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", f"import {arm_engine().module}"], capture_output=True,
                              timeout=IMPORT_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode != 0:
        return None
    import_s = time.perf_counter() - started
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"module": arm_engine().module, "import_s": round(import_s, 3)}) + "\n")
    except OSError:
        pass
    return import_s
