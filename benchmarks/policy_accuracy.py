"""How well the performance model and the composition predict a measured k policy (issue 33).

A sweep that measured its k policy (``policy: {measure: true}``, or ``--policy-from``) holds, per
concurrency level of the policy arm, three figures of its SLO-qualified speedup over the baseline:

- measured: the policy arm's own cells (its server ran ``num_speculative_tokens_per_batch_size``);
- composed: the fixed-k cell of the k the schedule gives at that level (1.0 where it gives 0),
  which is what the composed policy verdict reads;
- PREDICTED: the performance model calibrated on the sweep's fixed-k and baseline cells (the
  policy arm's cells are never a fit input), simulating the schedule step by step: each step's
  k is looked up by the requests it schedules, as vLLM's scheduler does.

It prints them side by side with each one's error against the measured figure, and writes them
to ``SWEEP_DIR/policy_accuracy.json``. Speedups are over the baseline's main-phase cells, as in
``benchmarks/model_accuracy.py`` (whose ``measure`` computes them).

    python -m benchmarks.policy_accuracy SWEEP_ID_OR_DIR [--results-dir results] [--requests 256]
"""

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.model_accuracy import ModelPredictor, Point, machine, measure
from benchmarks.results_record import write_result
from specfleet.contract.arms import k_at_batch, schedule_text
from specfleet.errors import InputError
from specfleet.perfmodel.calibrate import calibrate
from specfleet_tasks.store.sweep import StoredSweep


@dataclass(frozen=True)
class PolicyRow:
    arm: str
    schedule: str
    prompt_class: str
    concurrency: int
    sampling: str
    k_at_level: int
    measured_speedup: float | None
    composed_speedup: float | None
    predicted_speedup: float | None
    """PREDICTED by the performance model, never measured."""
    predicted_note: str | None

    def error(self, figure: float | None) -> float | None:
        truth = self.measured_speedup
        return None if figure is None or not truth else (figure - truth) / truth


def policy_rows(sweep: StoredSweep, requests: int, seed: int = 0) -> list[PolicyRow]:
    derived = sweep.derived_policies
    arms = [] if derived is None else [p for p in derived.policies if p.arm is not None]
    if not arms:
        raise InputError(f"{sweep.id}: the sweep measured no k policy (policy.measure, --policy-from)")
    config = sweep.config
    measured = measure(config, sweep.cells)
    model = ModelPredictor(calibrate(sweep.id, config, sweep.cells, sweep.usable_records), requests, seed)
    rows = []
    for policy in arms:
        assert policy.arm is not None
        schedule = policy.policy.schedule
        for point in sorted((p for p in measured.figures if p.arm == policy.arm.name),
                            key=lambda p: (p.prompt_class, p.concurrency)):
            k_here = k_at_batch(schedule, point.concurrency)
            fixed = Point(policy.spec_name, k_here, point.prompt_class, point.concurrency, point.sampling)
            composed = 1.0 if k_here == 0 else measured.figures.get(fixed, None)
            predicted = model(point)
            rows.append(PolicyRow(
                arm=policy.arm.name, schedule=schedule_text(schedule), prompt_class=point.prompt_class,
                concurrency=point.concurrency, sampling=point.sampling, k_at_level=k_here,
                measured_speedup=measured.figures[point].speedup,
                composed_speedup=composed if isinstance(composed, float) else
                (composed.speedup if composed is not None else None),
                predicted_speedup=predicted.speedup, predicted_note=model.errors.get(point)))
    return rows


def _fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1%}" if pct else f"{value:.3f}x"


def print_rows(rows: Sequence[PolicyRow], console: Console) -> None:
    table = Table(title="k policy: measured, composed and PREDICTED speedup (SLO-qualified tokens/s over the baseline)")
    for column in ("policy arm", "schedule", "class", "load", "k there", "measured", "composed", "error",
                   "PREDICTED", "error"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.arm, r.schedule, r.prompt_class, f"c{r.concurrency}", str(r.k_at_level),
                      _fmt(r.measured_speedup), _fmt(r.composed_speedup), _fmt(r.error(r.composed_speedup), True),
                      _fmt(r.predicted_speedup), _fmt(r.error(r.predicted_speedup), True))
    console.print(table)
    for r in rows:
        if r.predicted_note:
            console.print(f"no prediction at {r.arm} / {r.prompt_class} / c{r.concurrency}: {r.predicted_note}")


def mean_abs(values: Sequence[float | None]) -> float | None:
    known = [abs(v) for v in values if v is not None]
    return sum(known) / len(known) if known else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("sweep", help="a stored sweep that measured its k policy (id under --results-dir, or folder)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--requests", type=int, default=256, help="requests simulated per prediction")
    args = parser.parse_args(argv)
    console = Console(width=200)
    try:
        sweep = StoredSweep.find(args.sweep, args.results_dir)
        rows = policy_rows(sweep, args.requests)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_rows(rows, console)
    composed = mean_abs([r.error(r.composed_speedup) for r in rows])
    predicted = mean_abs([r.error(r.predicted_speedup) for r in rows])
    console.print(f"mean absolute error against the measured policy: composed {_fmt(composed, True)}, "
                  f"PREDICTED {_fmt(predicted, True)} over {len(rows)} levels")
    out = {"sweep": sweep.id, "machine": machine(), "requests": args.requests, "rows": [asdict(r) for r in rows],
           "mean_abs_error": {"composed": composed, "predicted": predicted}}
    (sweep.dir / "policy_accuracy.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    write_result("policy_accuracy", "none: the measured k policy beside its composition and the PREDICTED speedup",
                 None, {"composed_mean_abs_error_pct": None if composed is None else 100 * composed,
                        "predicted_mean_abs_error_pct": None if predicted is None else 100 * predicted,
                        "levels": len(rows)}, sweep_id=sweep.id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
