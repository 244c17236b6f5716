"""How well the performance model predicts cells it was not fitted on, on one stored sweep.

Two schemes, each cell predicted by a model calibrated without it (``specfleet.perfmodel``):

- ``cell``: leave one cell out: every usable cell (arm, k, class, load, sampling; both baseline
  phases count as one configuration and are left out together) predicted from all the others;
- ``load``: leave one load out: every cell at one concurrency (or rate) predicted from the
  cells at the other loads.

Beside the model, the plain "nearest measured cell" predictor: the same arm, class and
sampling at the nearest other load (in the ``cell`` scheme, when there is one). Prints a
table per cell and the mean absolute percentage error (MAPE) of output tokens/s, SLO-qualified
tokens/s, TPOT p50, TTFT p50 and ITL p50 per chunk (a measured 0, chunks read together, has
no percentage error and is left out), output tokens/s again for the speculative arms and the
baseline apart, and how often the measured output tokens/s fell inside the model's interval.

    python -m benchmarks.perfmodel_holdout SWEEP_DIR [--scheme cell|load|both] [--requests N]
"""

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.results_record import write_result
from specfleet.contract import CellIdentity
from specfleet.errors import InputError
from specfleet.perfmodel.calibrate import calibrate
from specfleet.perfmodel.predict import PredictionQuery, predict
from specfleet.results import CellResult
from specfleet_tasks.store.sweep import StoredSweep

FIGURES = ("output_tokens_per_s", "qualified_tokens_per_s", "tpot_p50", "ttft_p50", "itl_p50")
Config = tuple[str, str, str, float, str]


@dataclass(frozen=True)
class Held:
    scheme: str
    label: str
    measured: dict[str, float | None]
    predicted: dict[str, float | None]
    nearest: dict[str, float | None] | None
    inside: bool | None
    extrapolates: int


def _config(ident: CellIdentity) -> Config:
    return (ident.arm, ident.prompt_class, ident.load_mode, ident.load_value, ident.sampling)


def _value(summary: object) -> float | None:
    estimate = getattr(summary, "p50", None)
    return getattr(estimate, "value", None)


def _measured(cell: CellResult) -> dict[str, float | None]:
    return {"output_tokens_per_s": cell.throughput.output_tokens_per_s,
            "qualified_tokens_per_s": cell.throughput.qualified_tokens_per_s,
            "tpot_p50": _value(cell.tpot_ms), "ttft_p50": _value(cell.ttft_ms),
            "itl_p50": _value(cell.itl_per_chunk_ms)}


def _nearest(cells: Sequence[CellResult], target: CellResult,
             allowed: Callable[[CellResult], bool]) -> CellResult | None:
    t = target.identity
    same = [c for c in cells if c.usable and allowed(c) and c.identity.arm == t.arm
            and c.identity.prompt_class == t.prompt_class and c.identity.sampling == t.sampling
            and c.identity.load_mode == t.load_mode and c.identity.load_value != t.load_value]
    return min(same, key=lambda c: (abs(c.identity.load_value - t.load_value), c.identity.phase != "main"),
               default=None)


def _hold(data: StoredSweep, scheme: str, target: CellResult, keep: Callable[[CellIdentity], bool],
          requests: int) -> Held:
    t = target.identity
    cal = calibrate(data.id, data.config, data.cells, data.records, keep=keep, seed=data.config.analysis.seed)
    spec_name = next(a.name for a in data.config.arms if a.method == t.method and (t.k is None or t.k in a.k))
    got = predict(cal, PredictionQuery(
        arm=spec_name, k=t.k, prompt_class=t.prompt_class, sampling=t.sampling,
        concurrency=int(t.load_value) if t.load_mode == "concurrency" else None,
        rate_per_s=t.load_value if t.load_mode == "rate" else None, requests=requests,
        seed=data.config.analysis.seed))
    near = _nearest(data.cells, target, lambda c: keep(c.identity))
    measured = _measured(target)
    bounds = got.interval.output_tokens_per_s
    value = measured["output_tokens_per_s"]
    return Held(
        scheme=scheme, label=t.label, measured=measured,
        predicted={"output_tokens_per_s": got.output_tokens_per_s, "qualified_tokens_per_s": got.qualified_tokens_per_s,
                   "tpot_p50": got.tpot_ms.p50, "ttft_p50": got.ttft_ms.p50, "itl_p50": got.itl_ms.p50},
        nearest=_measured(near) if near else None,
        inside=None if value is None or bounds.low is None or bounds.high is None
        else bounds.low <= value <= bounds.high,
        extrapolates=len(got.extrapolates),
    )


def holdouts(data: StoredSweep, schemes: Sequence[str], requests: int, console: Console) -> list[Held]:
    """Every usable cell held out in each scheme; one the rest cannot predict (for example the
    arm's only usable cell on its class, so no acceptance is left) is named and skipped."""
    usable = [c for c in data.cells if c.usable and c.key in data.records]
    out: list[Held] = []
    for scheme in schemes:
        for target in usable:
            ident = target.identity
            config, load = _config(ident), (ident.load_mode, ident.load_value)

            def keep(i: CellIdentity, scheme: str = scheme, config: Config = config,
                     load: tuple[str, float] = load) -> bool:
                return _config(i) != config if scheme == "cell" else (i.load_mode, i.load_value) != load

            try:
                out.append(_hold(data, scheme, target, keep, requests))
            except InputError as err:
                console.print(f"{scheme}: {ident.label}: not predicted: {err}", highlight=False)
    return out


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def _errors(rows: Sequence[Held], figure: str, source: Callable[[Held], dict[str, float | None] | None]) -> list[float]:
    errors = []
    for row in rows:
        got = source(row)
        if got is not None and (e := _error(got[figure], row.measured[figure])) is not None:
            errors.append(abs(e))
    return errors


def _mape(rows: Sequence[Held], figure: str, source: Callable[[Held], dict[str, float | None] | None]) -> str:
    errors = _errors(rows, figure, source)
    return f"{100 * float(np.mean(errors)):.1f} % (n={len(errors)})" if errors else "n/a"


def record(sweep_id: str, rows: Sequence[Held]) -> None:
    """The MAPEs as a benchmark result (``benchmarks/results/perfmodel_holdout/``)."""
    sources: dict[str, Callable[[Held], dict[str, float | None] | None]] = {
        "model": lambda r: r.predicted, "nearest": lambda r: r.nearest}
    figures: dict[str, float | None] = {}
    for scheme in sorted({r.scheme for r in rows}):
        for name, source in sources.items():
            for figure in FIGURES:
                errors = _errors([r for r in rows if r.scheme == scheme], figure, source)
                figures[f"{name}_{scheme}_{figure}_mape_pct"] = 100 * float(np.mean(errors)) if errors else None
    write_result("perfmodel_holdout", "none: cells held out of a stored sweep, the model against the nearest "
                 "measured cell", None, figures, sweep_id=sweep_id)


def report(rows: Sequence[Held], console: Console) -> None:
    for scheme in sorted({r.scheme for r in rows}):
        part = [r for r in rows if r.scheme == scheme]
        table = Table(title=f"held out: {scheme} (predicted vs measured; error in %)")
        table.add_column("cell")
        for figure in FIGURES:
            table.add_column(figure, justify="right")
        table.add_column("in interval")
        for r in part:
            cells = []
            for figure in FIGURES:
                p, m = r.predicted[figure], r.measured[figure]
                e = _error(p, m)
                cells.append("n/a" if p is None or m is None else f"{p:.1f} / {m:.1f} ({100 * (e or 0):+.0f})")
            table.add_row(r.label, *cells, "n/a" if r.inside is None else ("yes" if r.inside else "no"))
        console.print(table)
        console.print(f"[bold]{scheme}[/bold]: MAPE, model | nearest measured cell")
        for figure in FIGURES:
            console.print(f"  {figure}: {_mape(part, figure, lambda r: r.predicted)} | "
                          f"{_mape(part, figure, lambda r: r.nearest)}")
        for name, subset in (("speculative arms", [r for r in part if not r.label.startswith("baseline")]),
                             ("baseline", [r for r in part if r.label.startswith("baseline")])):
            model = _mape(subset, "output_tokens_per_s", lambda r: r.predicted)
            console.print(f"  output_tokens_per_s, {name} only: {model} | "
                          f"{_mape(subset, 'output_tokens_per_s', lambda r: r.nearest)}")
        known = [r.inside for r in part if r.inside is not None]
        console.print(f"  measured output tokens/s inside the model's interval: {sum(known)} of {len(known)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("sweep", help="a sweep's results folder (or an id under --results-dir)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--scheme", choices=("cell", "load", "both"), default="both")
    parser.add_argument("--requests", type=int, default=256, help="requests simulated per prediction")
    args = parser.parse_args(argv)
    console = Console(width=200)
    try:
        data = StoredSweep.find(args.sweep, args.results_dir)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    schemes = ("cell", "load") if args.scheme == "both" else (args.scheme,)
    console.print(f"sweep {data.id}: {sum(c.usable for c in data.cells)} usable cells of {len(data.cells)}")
    rows = holdouts(data, schemes, args.requests, console)
    report(rows, console)
    record(data.id, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
