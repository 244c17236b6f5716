"""A benchmark's result as data: one small typed record per run under ``benchmarks/results/``.

Each benchmark's entry point writes one (``write_result``); ``benchmarks/results_page.py`` renders
``docs/results.md`` from them, so a benchmark's figures reach the docs only through its records.
Set ``SPECFLEET_BENCHMARK_RESULTS`` to write them elsewhere (the tests do).
"""

import datetime
import json
import os
import platform
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
RESULTS_DIR_ENV = "SPECFLEET_BENCHMARK_RESULTS"
REFERENCE_MACHINE = "2-core AMD EPYC"
"""The machine the README's "is it good?" table judges on: the development machine's kind."""


class BenchmarkResult(BaseModel):
    """One run of one benchmark: what it set out to show, its figures and where they came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str = Field(description="The benchmark script's name, e.g. model_accuracy.")
    goal: str = Field(description="The goal in words; 'none' for a comparison with no goal.")
    met: bool | None = Field(description="Whether the goal is met; None where there is no goal or no figure.")
    figures: dict[str, float | None] = Field(
        description="Figures named with their unit (_pct, _ms, _s, _x); None: not measured (the note says why).")
    sweep_id: str | None = Field(None, description="The stored sweep the figures come from, if any.")
    machine: str = Field(description="Cores and CPU family (and accelerator), e.g. '2-core AMD EPYC'.")
    commit: str | None = Field(description="The specfleet commit that ran it; None outside a git checkout.")
    date: datetime.date = Field(description="The day it ran (UTC).")
    note: str = Field("", description="What the figures need said beside them: setup, seeds, misses.")


def file_name(result: BenchmarkResult, at: datetime.datetime) -> str:
    """``STAMP-MACHINE.json``: a compact UTC time stamp first, so names sort by when they ran."""
    machine = re.sub(r"[^a-z0-9]+", "-", result.machine.lower()).strip("-")
    return f"{at.strftime('%Y%m%dT%H%M%SZ')}-{machine}.json"


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo``; None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def machine_name() -> str:
    """Cores, the CPU's family (the first two words of its model name) and any NVIDIA GPUs."""
    model = cpu_model() or platform.processor() or "unknown CPU"
    family = " ".join(model.replace("(R)", "").replace("(TM)", "").split()[:2])
    name = f"{os.cpu_count()}-core {family}"
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return name
    gpus = [g.strip() for g in gpus if g.strip()]
    return f"{name}, {len(gpus)}x {gpus[0]}" if gpus else name


def current_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def results_dir() -> Path:
    return Path(os.environ.get(RESULTS_DIR_ENV) or RESULTS_DIR)


def write_result(benchmark: str, goal: str, met: bool | None, figures: Mapping[str, float | None],
                 sweep_id: str | None = None, note: str = "") -> Path:
    """Record this run of ``benchmark`` on this machine at this commit; returns the file written."""
    now = datetime.datetime.now(datetime.UTC)
    result = BenchmarkResult(benchmark=benchmark, goal=goal, met=met, figures=dict(figures), sweep_id=sweep_id,
                             machine=machine_name(), commit=current_commit(), date=now.date(), note=note)
    folder = results_dir() / benchmark
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(result, now)
    while path.exists():  # two runs in one second: the later one sorts after
        now += datetime.timedelta(seconds=1)
        path = folder / file_name(result, now)
    path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    print(f"result recorded: {path}")
    return path


def read_results(folder: Path = RESULTS_DIR) -> list[tuple[Path, BenchmarkResult]]:
    """Every record under ``folder`` with its file, oldest first (file names start with their time)."""
    return [(path, BenchmarkResult.model_validate(json.loads(path.read_text(encoding="utf-8"))))
            for path in sorted(folder.glob("*/*.json"), key=lambda path: path.name)]
