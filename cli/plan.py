"""``specfleet plan``: what a sweep will cost before it starts (predicted, never measured)."""

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.errors import exit_on_error


def budget_seconds(budget: str | None) -> float | None:
    """``--budget`` in seconds; a bad one is an ``InputError`` naming the flag."""
    from specfleet.contract.durations import duration_flag

    return None if budget is None else float(duration_flag("--budget", budget))


def plan(
    config: Annotated[Path, typer.Argument(help="Sweep config (YAML).")],
    budget: Annotated[str | None, typer.Option("--budget", help="Wall-time budget: 90m, 7h, 1d.")] = None,
    from_sweep: Annotated[str | None, typer.Option(
        "--from", help="Calibrate on this stored sweep (id under --results-dir, or its folder); default: the prior.")
    ] = None,
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Root of the sweeps' results.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Predict a sweep's servers, cells, requests, tokens, wall time, accelerator-hours and cost per
    stage and in total, on the performance model's prior or calibrated on an earlier sweep."""
    from tasks.plan.estimate import plan_sweep_estimate

    with exit_on_error():
        budget_s = budget_seconds(budget)
        times, _ = plan_sweep_estimate(config, budget_s, from_sweep, results_dir)
    if as_json:
        print(json.dumps(times.estimate.model_dump(mode="json")))
        return
    from cli.render import print_plan

    print_plan(times.estimate)
