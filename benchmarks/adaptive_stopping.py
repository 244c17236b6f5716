"""How many requests adaptive stopping needs, replayed on a stored sweep, against its fixed budget.

For every usable cell of the newest sweep under RESULTS (or of the sweep folder given), the
stored per-request records are fed to ``specfleet.stats.stopping.AdaptiveStopper`` in the
order they completed. When it says stop, the requests already sent by then (in flight ones
included, as the closed-loop driver lets them finish) are what the cell would have used.

The target interval width is the one the fixed budget guaranteed: the widest relative
half-width, over the sweep's cells, of SLO-qualified tokens/s and the SLO-bound ITL
percentile at the full budget (``--relative-half-width`` sets another). Prints a table.

    python -m benchmarks.adaptive_stopping [RESULTS] [--min-requests N] [--check-every N]
"""

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.results_record import write_result
from specfleet.contract import SLOSpec, SweepConfig
from specfleet.contract.workload import AdaptiveStoppingSpec
from specfleet.errors import InputError
from specfleet.results import CellResult, RequestRecord
from specfleet.results.cell import StopReason
from specfleet.stats.stopping import AdaptiveStopper, Precision, RequestStats, precision
from specfleet_tasks.store.sweep import SWEEP_FILE, StoredSweep

EXACT = 1e-9
"""The target when every cell's intervals have zero width (identical requests): any positive one is met."""


@dataclass(frozen=True)
class Replay:
    fixed_requests: int
    at_budget: Precision
    used_requests: int
    reason: StopReason


def _completed_ns(record: RequestRecord) -> int:
    return record.end_ns if record.end_ns is not None else (record.chunk_ns[-1] if record.chunk_ns else record.send_ns)


def widest(at_budget: Precision) -> float | None:
    widths = (at_budget.qualified_tps_relative_half_width, at_budget.itl_relative_half_width)
    return None if None in widths else max(w for w in widths if w is not None)


def target_width(at_budget: Sequence[Precision]) -> float | None:
    """The widest interval the fixed budget left on any cell: the width it guarantees them all."""
    widths = [w for p in at_budget if (w := widest(p)) is not None]
    return max(max(widths), EXACT) if widths else None


def budget_precision(records: Sequence[RequestRecord], slo: SLOSpec, confidence: float) -> Precision:
    return precision([RequestStats.of(r, slo) for r in records], slo, confidence)


def replay_cell(records: Sequence[RequestRecord], slo: SLOSpec, confidence: float, spec: AdaptiveStoppingSpec,
                at_budget: Precision) -> Replay:
    """Adaptive stopping over the cell's records in completion order; ``spec.max_requests``
    is the fixed budget (the records stored)."""
    stopper = AdaptiveStopper(spec, slo, confidence)
    used = len(records)
    for record in sorted(records, key=_completed_ns):
        if stopper(record):
            stopped_ns = _completed_ns(record)
            used = sum(1 for r in records if r.send_ns <= stopped_ns)
            break
    return Replay(len(records), at_budget, used, stopper.reason or "max_requests")


def newest_sweep(path: Path) -> Path | None:
    """``path`` itself when it is a sweep folder, else its newest sweep folder."""
    if (path / SWEEP_FILE).is_file():
        return path
    sweeps = [p.parent for p in path.glob(f"*/{SWEEP_FILE}")]
    return max(sweeps, key=lambda p: (p / SWEEP_FILE).stat().st_mtime) if sweeps else None


def load_sweep(sweep_dir: Path) -> tuple[SweepConfig, list[tuple[CellResult, list[RequestRecord]]]]:
    """The sweep's contract (as it ran) and its usable cells with records."""
    sweep = StoredSweep(sweep_dir)
    records = sweep.usable_records
    return sweep.config, [(cell, records[cell.key]) for cell in sweep.cells if cell.key in records]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def report(cells: list[tuple[CellResult, Replay]], target: float, slo: SLOSpec, console: Console) -> None:
    table = Table(title=f"Requests per cell for a relative half-width of {target:.1%}")
    itl = f"ITL p{slo.percentile:g} ± at budget"
    for column in ("cell", "fixed budget", "qualified tokens/s ± at budget", itl, "adaptive", "stop reason"):
        table.add_column(column, justify="left" if column == "cell" else "right")
    for cell, replay in cells:
        table.add_row(cell.identity.label, str(replay.fixed_requests),
                      _pct(replay.at_budget.qualified_tps_relative_half_width),
                      _pct(replay.at_budget.itl_relative_half_width), str(replay.used_requests), replay.reason)
    fixed = sum(r.fixed_requests for _, r in cells)
    used = sum(r.used_requests for _, r in cells)
    table.add_section()
    table.add_row("all cells", str(fixed), "", "", str(used), f"{1 - used / fixed:.0%} fewer" if fixed else "")
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("results", nargs="?", type=Path, default=Path("results"),
                        help="a results folder (its newest sweep) or one sweep's folder")
    parser.add_argument("--relative-half-width", type=float, default=None)
    parser.add_argument("--min-requests", type=int, default=4)
    parser.add_argument("--check-every", type=int, default=1)
    args = parser.parse_args(argv)
    sweep_dir = newest_sweep(args.results) if args.results.is_dir() else None
    if sweep_dir is None:
        print(f"adaptive_stopping: no sweep results under {args.results} (run `make demo`, or pass a results folder)")
        return 0
    try:
        config, cells = load_sweep(sweep_dir)
    except InputError as err:
        print(f"adaptive_stopping: {sweep_dir.name}: {err}")
        return 2
    slo, confidence = config.slo, config.analysis.confidence
    measured = [(cell, records) for cell, records in cells if len(records) >= 2]
    if not measured:
        print(f"adaptive_stopping: {sweep_dir.name} has no usable cell with stored per-request records")
        return 0
    at_budget = [budget_precision(records, slo, confidence) for _, records in measured]
    target = args.relative_half_width or target_width(at_budget)
    if target is None:
        print(f"adaptive_stopping: no cell of {sweep_dir.name} has an interval on both statistics at its budget")
        return 0
    replays = []
    for (cell, records), precise in zip(measured, at_budget, strict=True):
        spec = AdaptiveStoppingSpec(relative_half_width=target, min_requests=min(args.min_requests, len(records)),
                                    max_requests=len(records), check_every=args.check_every)
        replays.append((cell, replay_cell(records, slo, confidence, spec, precise)))
    console = Console(width=140)
    console.print(f"sweep {sweep_dir.name}: {len(replays)} usable cells; ITL series {slo.itl_statistic}, "
                  f"confidence {confidence:g}, min_requests {args.min_requests}, check_every {args.check_every}")
    report(replays, target, slo, console)
    fixed, used = sum(r.fixed_requests for _, r in replays), sum(r.used_requests for _, r in replays)
    write_result("adaptive_stopping", "none: a replay of the stopping rule on a stored sweep", None,
                 {"target_relative_half_width_pct": 100 * target, "fixed_requests": fixed, "adaptive_requests": used,
                  "fewer_requests_pct": 100 * (1 - used / fixed) if fixed else None}, sweep_id=sweep_dir.name,
                 note=f"{len(replays)} usable cells, min_requests {args.min_requests}, check_every {args.check_every}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
