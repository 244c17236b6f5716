"""How close `specfleet plan` comes to the sweep it plans, and whether budgeted sweeps hold their
budget (issue 32, "Plans that hold"), on the commands a user runs.

    python -m benchmarks.plan_accuracy [--config configs/demo-cpu.yaml] [--work DIR]
        [--budgets 3m,5m] [--calibrated-runs 2] [--skip-plans]

Plans (a fresh results dir, then calibrated on what it measured):

1. ``specfleet plan CONFIG --json`` in an empty results dir (the prior, with whatever server
   start-ups this machine has recorded), then the sweep it plans (``specfleet sweep CONFIG``);
2. the prior again in another empty results dir (now with the first sweep's start-ups recorded)
   and ``specfleet plan CONFIG --from FIRST --json`` (calibrated), then a second sweep: both errors.

Budgets, flow wall time (the sweep's ``wall_s``, from the flow's start, as the budget counts):
each ``--budget`` once in its own fresh results dir (the prior) and ``--calibrated-runs`` times in
the plans' dir (calibrated on the newest finished sweep there). A budgeted sweep overruns when its
wall time exceeds the budget plus one cell (its longest measured cell: warm-up and measured time
over cells, per arm, the largest). Every run's figures go to ``WORK/plan_accuracy.json`` and a
markdown table is printed. Measure alone: another job on the cores slows the sweeps and the
servers' start-up, which no plan sees.
"""

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specfleet.contract.durations import parse_duration_s
from specfleet.report.sweep_report import REPORT_FILE
from specfleet_tasks.store.config import load_sweep_config

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "demo-cpu.yaml"
OUTPUT_FILE = "plan_accuracy.json"


@dataclass(frozen=True)
class SweepRun:
    """One sweep as its summary recorded it."""

    label: str
    results_dir: str
    sweep_id: str | None
    exit_code: int
    command_s: float
    wall_s: float | None
    budget_s: float | None
    cells_measured: int
    speculative_cells: int
    not_measured: int
    longest_cell_s: float | None
    predicted_s: float | None = None
    """What ``specfleet plan`` predicted for this sweep just before it (plans only)."""
    basis: str | None = None

    @property
    def error(self) -> float | None:
        if self.predicted_s is None or not self.wall_s:
            return None
        return self.predicted_s / self.wall_s - 1.0

    @property
    def overrun_s(self) -> float | None:
        return None if self.wall_s is None or self.budget_s is None else self.wall_s - self.budget_s

    @property
    def overran(self) -> bool | None:
        """Past the budget plus one cell."""
        if self.overrun_s is None:
            return None
        return self.overrun_s > (self.longest_cell_s or 0.0)


def specfleet(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", *args]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)


def plan_s(config: Path, results_dir: Path, calibrated_on: str | None) -> tuple[float, str]:
    """The plan's predicted wall time and its basis (with the start-up note where the prior read
    recorded start-ups)."""
    args = ["plan", str(config), "--results-dir", str(results_dir), "--json"]
    if calibrated_on is not None:
        args += ["--from", calibrated_on]
    done = specfleet(*args)
    if done.returncode != 0:
        raise SystemExit(f"specfleet plan exited {done.returncode}: {done.stderr.strip()}")
    plan = json.loads(done.stdout)
    startups = [n for n in plan["notes"] if n.startswith("server start-up")]
    return float(plan["wall_s"]), str(plan["basis"]) + (f"; {startups[0]}" if startups else "")


def newest_sweep(results_dir: Path, config_name: str, before: set[str]) -> str | None:
    made = [p.name for p in results_dir.glob(f"{config_name}-*") if p.is_dir() and p.name not in before]
    return max(made) if made else None


def run_sweep(label: str, config: Path, results_dir: Path, config_name: str, budget: str | None = None) -> SweepRun:
    results_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in results_dir.iterdir()}
    args = ["sweep", str(config), "--results-dir", str(results_dir),
            "--tracking-uri", f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"]
    if budget is not None:
        args += ["--budget", budget]
    print(f"{label}: specfleet {' '.join(args)}", flush=True)
    t0 = time.monotonic()
    done = specfleet(*args)
    command_s = time.monotonic() - t0
    sweep_id = newest_sweep(results_dir, config_name, before)
    summary_path = results_dir / sweep_id / REPORT_FILE if sweep_id else None
    summary = json.loads(summary_path.read_text()) if summary_path and summary_path.is_file() else {}
    arms = summary.get("arms") or []
    per_cell = [(a["timing"]["warmup_s"] + a["timing"]["measured_s"]) / a["cells_measured"]
                for a in arms if a.get("timing") and a.get("cells_measured")]
    spec = sum(a["cells_measured"] for a in arms if not str(a["arm"]).startswith("baseline"))
    return SweepRun(
        label=label, results_dir=str(results_dir), sweep_id=sweep_id, exit_code=done.returncode, command_s=command_s,
        wall_s=summary.get("wall_s"), budget_s=parse_duration_s(budget) if budget else None,
        cells_measured=sum(a["cells_measured"] for a in arms), speculative_cells=spec,
        not_measured=len(summary.get("not_measured") or []), longest_cell_s=max(per_cell) if per_cell else None)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} %"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def table(runs: Sequence[SweepRun]) -> str:
    lines = ["| run | sweep | predicted | actual (flow) | error | budget | overrun (one cell) | measured (speculative) "
             "| not measured |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        overrun = "n/a" if r.overrun_s is None else (
            f"{r.overrun_s:+.1f} s ({_s(r.longest_cell_s)}){': OVER' if r.overran else ''}")
        lines.append(f"| {r.label} | `{r.sweep_id}` | {_s(r.predicted_s)} | {_s(r.wall_s)} | {_pct(r.error)} | "
                     f"{_s(r.budget_s)} | {overrun} | {r.cells_measured} ({r.speculative_cells}) | {r.not_measured} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--work", type=Path, default=Path("results-plan-accuracy"))
    parser.add_argument("--budgets", default="3m,5m")
    parser.add_argument("--calibrated-runs", type=int, default=2)
    parser.add_argument("--skip-plans", action="store_true", help="only the budgeted sweeps (the plans' dir must "
                        "hold a finished sweep for the calibrated ones)")
    args = parser.parse_args(argv)
    config = args.config.resolve()
    name = load_sweep_config(config).name
    plans_dir = (args.work / "plans").resolve()
    runs: list[SweepRun] = []
    if not args.skip_plans:
        predicted, basis = plan_s(config, plans_dir, None)
        first = run_sweep("plan, prior (fresh results dir)", config, plans_dir, name)
        runs.append(_planned(first, predicted, basis))
        prior_again, prior_basis = plan_s(config, (args.work / "prior-again").resolve(), None)
        predicted, basis = plan_s(config, plans_dir, first.sweep_id)
        second = run_sweep(f"plan, calibrated on {first.sweep_id}", config, plans_dir, name)
        runs.append(_planned(second, predicted, basis))
        runs.append(_planned(replace(second, label="plan, prior (fresh results dir) after the first sweep"),
                             prior_again, prior_basis))
    for budget in [b.strip() for b in args.budgets.split(",") if b.strip()]:
        runs.append(run_sweep(f"--budget {budget}, fresh results dir (prior)", config,
                              (args.work / f"fresh-{budget}").resolve(), name, budget))
        for i in range(args.calibrated_runs):
            runs.append(run_sweep(f"--budget {budget}, calibrated ({i + 1})", config, plans_dir, name, budget))
    out = table(runs)
    print("\n" + out)
    for r in runs:
        if r.basis:
            print(f"{r.label}: {r.basis}")
    budgeted = [r for r in runs if r.budget_s is not None]
    over = sum(bool(r.overran) for r in budgeted)
    print(f"\nbudgeted sweeps past their budget plus one cell: {over} of {len(budgeted)}")
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / OUTPUT_FILE).write_text(json.dumps(
        {"runs": [asdict(r) | {"error": r.error, "overrun_s": r.overrun_s, "overran": r.overran} for r in runs],
         "table_markdown": out, "overran": over, "budgeted": len(budgeted)}, indent=2), encoding="utf-8")
    return 0


def _planned(run: SweepRun, predicted_s: float, basis: str) -> SweepRun:
    return SweepRun(**{**asdict(run), "predicted_s": predicted_s, "basis": basis})


if __name__ == "__main__":
    sys.exit(main())
