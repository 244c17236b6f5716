"""``specfleet plan``: what a sweep will cost before it starts (predicted, never measured)."""

import json
from pathlib import Path
from typing import Annotated

import typer

from specfleet_cli.errors import exit_on_error


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
    detect: Annotated[str | None, typer.Option(
        "--detect", help="Propose the cheapest design (repeats, requests per cell, baseline server lives) whose every "
        "arm at the traffic mix adopts this true saving at 80 % power: 15% or 0.15.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Predict a sweep's servers, cells, requests, tokens, wall time, accelerator-hours and cost per
    stage and in total, on the performance model's prior or calibrated on an earlier sweep; and the
    minimum detectable saving of every verdict it will make, from this machine's recorded noise."""
    from specfleet.planning.power import parse_saving
    from specfleet_tasks.plan.estimate import plan_inputs, plan_sweep_estimate
    from specfleet_tasks.plan.power import propose_design, sweep_power

    with exit_on_error():
        budget_s = budget_seconds(budget)
        target = None if detect is None else parse_saving(detect)
        times, _ = plan_sweep_estimate(config, budget_s, from_sweep, results_dir)
        inputs = plan_inputs(config, from_sweep, results_dir)
        power = sweep_power(inputs.config, results_dir)
        proposal = None if target is None else propose_design(inputs, target, results_dir)
    if as_json:
        out = times.estimate.model_dump(mode="json") | {"power": power.model_dump(mode="json")}
        print(json.dumps(out | ({"detect": proposal.model_dump(mode="json")} if proposal else {})))
        return
    from specfleet_cli.render import print_design, print_plan, print_power

    print_plan(times.estimate)
    print_power(power)
    if proposal is not None:
        print_design(proposal)
