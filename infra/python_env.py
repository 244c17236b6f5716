"""Build the Python environment ``make`` uses, saying what it does at least every 15 seconds.

Run by the Makefile with the machine's own Python (standard library only, nothing is installed
yet). The packages are installed by uv, which fetches and unpacks them in parallel: 32 s here
against pip's 298 s for the same resolution (docs/install.md); uv is told pip's own configuration
(indexes, find-links, constraints, certificate), so a machine set up for pip installs the same
packages. uv compiles every module to bytecode, as pip does by default: where
``PYTHONDONTWRITEBYTECODE`` is set (this machine, CI) nothing else writes ``.pyc`` files, and
importing vLLM's API server then takes 33 s instead of 14 s, twice in every server start (its
API process and its engine core). Should uv fail, pip does the install. Their output is kept
and shown only when a step fails, unless ``VERBOSE=1`` passes it through; meanwhile one line per
step and phase, and one at least every ``HEARTBEAT_S`` with the elapsed time and what the last
build on this machine says is left. A build that was cut off leaves no stamp, so the next
``make`` starts it again from nothing.

    python3 infra/python_env.py ENV_DIR --extras cpu,dev [--uninstall torchvision ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

HEARTBEAT_S = 15.0
FIRST_BUILD_S = 60.0
"""A first build's wall time on the 2-core development machine with nothing in uv's cache
(docs/install.md); later estimates come from this machine's own last build."""
TIMES_FILE = "build-seconds.json"
STAMP = ".installed-stamp"
SHOWN_ON_FAILURE = 40
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "constraint", "cert")
"""pip settings uv is given, from pip's own configuration (its files and ``PIP_*`` variables)."""


def main() -> int:
    args = _arguments()
    env_dir: Path = args.env_dir
    verbose = os.environ.get("VERBOSE", "") not in ("", "0")
    expected_s = _expected_s(env_dir.parent)
    source = "this machine's last build" if expected_s != FIRST_BUILD_S else "a first build on a 2-core machine"
    _say(f"building the Python environment, once per pyproject.toml and builder: about {_minutes(expected_s)} "
         f"({source}); VERBOSE=1 shows the installers' output")
    started = time.monotonic()
    shutil.rmtree(env_dir, ignore_errors=True)
    python = str(env_dir / "bin" / "python")
    target = f".[{args.extras}]"
    steps: list[tuple[str, list[str], dict[str, str]]] = [
        ("creating the virtual environment", [sys.executable, "-m", "venv", str(env_dir)], {}),
        ("installing uv", [python, "-m", "pip", "install", "uv"], {})]
    for label, command, env in steps:
        if (code := _run(label, command, env, started, expected_s, verbose)) != 0:
            return _failed(label, code)
    settings = pip_settings(python)
    uv = [str(env_dir / "bin" / "uv"), "pip", "install", "--python", python, *uv_options(settings)]
    uv_env = {"SSL_CERT_FILE": settings["cert"][0]} if settings.get("cert") else {}
    label = f"installing specfleet with the {args.extras} extras"
    if (code := _run(label, [*uv, "-e", target, "setuptools>=77"], uv_env, started, expected_s, verbose)) != 0:
        _say(f"uv could not install (exit {code}); installing with pip instead, which takes about 5 min")
        pip = [python, "-m", "pip", "install", "--progress-bar", "off", "-e", target, "setuptools>=77"]
        if (code := _run(f"{label} (pip)", pip, {}, started, expected_s, verbose)) != 0:
            return _failed(label, code)
    if args.uninstall:
        label = f"removing {', '.join(args.uninstall)}"
        command = [python, "-m", "pip", "uninstall", "--yes", *args.uninstall]
        if (code := _run(label, command, {}, started, expected_s, verbose)) != 0:
            return _failed(label, code)
    took_s = time.monotonic() - started
    _record(env_dir.parent, took_s)
    (env_dir / STAMP).touch()
    _say(f"environment ready in {_minutes(took_s)}: {env_dir}")
    return 0


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_dir", type=Path)
    parser.add_argument("--extras", required=True)
    parser.add_argument("--uninstall", nargs="*", default=[])
    return parser.parse_args()


def pip_settings(python: str) -> dict[str, list[str]]:
    """``PIP_KEYS`` as pip reads them: a ``PIP_*`` variable over a config file's ``global`` entry."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found: dict[str, dict[str, str]] = {}
    for line in listed.splitlines():
        match = re.match(r"(:env:|global)\.([\w-]+)='(.*)'$", line.strip())
        if match and match.group(2) in PIP_KEYS:
            found.setdefault(match.group(2), {})[match.group(1)] = match.group(3)
    return {key: (values.get(":env:") or values["global"]).split() for key, values in found.items()}


def uv_options(settings: dict[str, list[str]]) -> list[str]:
    """uv's flags for pip's settings; a local index or folder that does not exist is left out, as pip
    ignores it. pip takes the best version across its indexes, hence uv's ``unsafe-best-match``, and
    compiles what it installs to bytecode, hence ``--compile-bytecode`` (the module docstring)."""
    options = ["--compile-bytecode", "--index-strategy", "unsafe-best-match"]
    for key in ("index-url", "extra-index-url", "find-links", "constraint"):
        for value in settings.get(key, []):
            local = value.removeprefix("file://")
            if "://" not in local and not Path(local).exists():
                continue
            options += [f"--{key}", value]
    return options


_NEXT = {"Resolved": ", fetching them", "Installed": ", compiling them to bytecode"}
"""What uv does, silently, after the line that starts with the key."""


class _Phase:
    """What the installer is doing, read off its own lines."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.collected = 0
        self.latest: str | None = None
        self.lock = threading.Lock()

    def read(self, line: str) -> str | None:
        """Update from one line of output; a line worth showing at once, else None."""
        with self.lock:
            if line.startswith("Collecting "):
                self.collected += 1
            elif re.match(r"(Resolved|Prepared|Installed|Uninstalled) \d+ packages?|Bytecode compiled", line):
                self.latest = line.strip() + _NEXT.get(line.split(" ", 1)[0], "")
                return f"{self.label}: {self.latest}"
            elif line.startswith("Installing collected packages:"):
                self.latest = f"installing {len(line.split(':', 1)[1].split(','))} packages"
                return f"{self.label}: {self.latest}"
            return None

    def describe(self) -> str:
        with self.lock:
            if self.latest is not None:
                return f"{self.label}: {self.latest}"
            return f"{self.label}: {self.collected} packages collected" if self.collected else self.label


def _run(label: str, command: list[str], env: dict[str, str], started: float, expected_s: float,
         verbose: bool) -> int:
    _say(f"{label} ({_progress(started, expected_s)})")
    environment = os.environ | env | {"PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1"}
    if verbose:
        return subprocess.call(command, env=environment)
    phase = _Phase(label)
    tail: deque[str] = deque(maxlen=SHOWN_ON_FAILURE)
    errors: list[str] = []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                               env=environment)
    done = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(phase, started, expected_s, done), daemon=True)
    beat.start()
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip("\n")
        tail.append(line)
        if re.match(r"\s*(ERROR|error)\b", line):
            errors.append(line)
        news = phase.read(line)
        if news is not None:
            _say(f"{news} ({_progress(started, expected_s)})")
    code = process.wait()
    done.set()
    beat.join()
    if code != 0:
        shown = list(tail) if not errors else [*errors, "...", *list(tail)[-10:]]
        for line in shown:
            print(f"  {line}", file=sys.stderr, flush=True)
    return code


def _failed(label: str, code: int) -> int:
    _say(f"environment build failed while {label} (exit {code}); VERBOSE=1 shows the installers' whole output")
    return code


def _heartbeat(phase: _Phase, started: float, expected_s: float, done: threading.Event) -> None:
    while not done.wait(HEARTBEAT_S):
        _say(f"{phase.describe()} ({_progress(started, expected_s)})")


def _progress(started: float, expected_s: float) -> str:
    elapsed = time.monotonic() - started
    left = expected_s - elapsed
    remaining = f"about {_minutes(left)} left" if left > 0 else f"past the {_minutes(expected_s)} expected"
    return f"{_minutes(elapsed)} elapsed, {remaining}"


def _minutes(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def _expected_s(envs_dir: Path) -> float:
    """The last build's wall time on this machine, else a first build's (``FIRST_BUILD_S``)."""
    try:
        return float(json.loads((envs_dir / TIMES_FILE).read_text())["last_build_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return FIRST_BUILD_S


def _record(envs_dir: Path, took_s: float) -> None:
    (envs_dir / TIMES_FILE).write_text(json.dumps({"last_build_s": round(took_s, 1)}) + "\n")


def _say(message: str) -> None:
    print(f"specfleet: {message}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
