"""How long a budgeted sweep takes to time its next cells (issue 31: under one second on ``make
demo``'s sweep). Before a budgeted stage starts, the sweep calibrates its plan on the newest
finished sweep of its config (``specfleet_tasks.plan.budget.cell_budget``): this reads that sweep's cells,
records and arm timings through ``StoredSweep``, and must never re-run its gates or analysis.

Usage: ``python -m benchmarks.stage_timing SWEEP_DIR [--config configs/demo-cpu.yaml] [--runs 5]``,
``SWEEP_DIR`` a finished demo sweep (``results/<id>`` after ``make demo``; a format-1 one, such as
the ce4142f fixture tests/unit/tasks/store/data/demo-ce4142f, has its config path pointed at ``--config``).
The sweep is copied into a scratch results folder beside a new sweep of the same config planned
with ``--budget 5m``; each run times ``cell_budget`` for that plan as each stage of the sweep calls it:
the first (cold: the performance model is fitted to the earlier sweep) and the later ones (the
fit kept for the same stored contents).
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results_record import write_result
from specfleet_tasks.plan.budget import cell_budget
from specfleet_tasks.plan.sweep_plan import plan_sweep
from specfleet_tasks.store.sweep import SWEEP_FILE, StoredSweep

GOAL_S = 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a finished sweep's results folder")
    parser.add_argument("--config", type=Path, default=Path("configs/demo-cpu.yaml"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", default="5m")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results"
        earlier = results / args.sweep.name
        shutil.copytree(args.sweep, earlier)
        record = json.loads((earlier / SWEEP_FILE).read_text(encoding="utf-8"))
        if isinstance(record.get("config"), str):  # format 1: the config file it names is this machine's
            (earlier / SWEEP_FILE).write_text(json.dumps(record | {"config": str(args.config.resolve())}))
        stored = StoredSweep(earlier)
        print(f"calibrating on {stored.id}: {len(stored.cells)} cells, format {stored.record.format}", flush=True)
        plan = plan_sweep(args.config, None, results, budget=args.budget)
        seconds = []
        for _ in range(args.runs):
            started = time.perf_counter()
            budget = cell_budget(plan, 300.0, time.time())
            seconds.append(time.perf_counter() - started)
        print(f"cell_budget: {len(budget.cell_s)} pending cells timed; seconds per run "
              + ", ".join(f"{s:.3f}" for s in seconds))
        later = statistics.median(seconds[1:]) if len(seconds) > 1 else None
        print(f"first stage {seconds[0]:.3f} s, later stages median "
              + (f"{later:.3f} s" if later is not None else "n/a (--runs 1)") + f" (goal < {GOAL_S:g} s): first "
              + ("met" if seconds[0] < GOAL_S else "NOT met") + ", later "
              + ("met" if later is not None and later < GOAL_S else "NOT met"))
        write_result("stage_timing", f"a budgeted stage times its pending cells in under {GOAL_S:g} s",
                     seconds[0] < GOAL_S and later is not None and later < GOAL_S,
                     {"first_stage_s": seconds[0], "later_stage_s": later}, sweep_id=stored.id,
                     note=f"{len(budget.cell_s)} pending cells, {args.runs} runs, budget {args.budget}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
