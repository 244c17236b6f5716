"""``specfleet``: the command line. Each command is a thin call into tasks, flows or the core."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from specfleet_cli.errors import exit_on_error

if TYPE_CHECKING:
    from specfleet.contract import SweepConfig
    from specfleet.planning.estimate import SweepEstimate

app = typer.Typer(
    name="specfleet",
    help="Does speculative decoding lower cost per million SLO-qualified tokens on your fleet?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


@app.callback()
def main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    if debug:
        import os

        os.environ["SPECFLEET_DEBUG"] = "1"


@app.command()
def version(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print the versions of specfleet, vLLM, Prefect, Ray and MLflow."""
    from specfleet_tasks.plan.versions import stack_versions

    versions = stack_versions()
    if as_json:
        print(json.dumps(versions))
        return
    for name, found in versions.items():
        print(f"{name} {found or 'not installed'}")


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="Sweep config (YAML).")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Validate a sweep config and its scored sets with every check `sweep` makes before a server
    starts, and show the matrix it expands into (with --json, each arm's server command)."""
    from specfleet.contract import arm_plans, cell_identities
    from specfleet.planning.budget import budgeted
    from specfleet_tasks.plan.preflight import check_inputs, config_base_dir
    from specfleet_tasks.plan.prompt_sets import load_scored_sets

    with exit_on_error():
        sweep = budgeted(check_inputs(config), None)
        scored = load_scored_sets(sweep, config_base_dir(config))
        arms = arm_plans(sweep)
        cells = sum(len(cell_identities(sweep, arm)) for arm in arms)
    names = [a.arm for a in arms]
    items = {name: None if s is None else len(s.items) for name, s in scored.items()}
    estimate, why_not = _plan_headline(config)
    if as_json:
        print(json.dumps({"config": str(config), "name": sweep.name, "arms": names, "cells": cells,
                          "scored_items": items, "plan": estimate.model_dump(mode="json") if estimate else None,
                          "plan_error": why_not, "servers": _server_commands(sweep)}))
        return
    sets = ", ".join(f"{name} {'no scored set' if n is None else f'{n} items'}" for name, n in items.items())
    gate = ("quality gate not run (equivalence.quality_tolerance is unset)"
            if sweep.equivalence.quality_tolerance is None else f"quality gate: {sets}")
    console.print(f"[green]ok[/green] {config}: {len(arms)} arms ({', '.join(names)}), {cells} cells; {gate}")
    if estimate is not None:
        from specfleet.planning.estimate import headline

        console.print(f"{headline(estimate)} (`specfleet plan` for stages)", highlight=False)
    else:
        console.print(f"plan: none ({why_not})", highlight=False)


def _server_commands(sweep: "SweepConfig") -> list[dict[str, object]]:
    """Each arm's server command and environment as the sweep starts it here (fixture names unbuilt)."""
    from specfleet.contract.server_args import arm_server_commands
    from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
    from specfleet_tasks.engine.features import per_request_spec_metrics
    from specfleet_tasks.plan.models import named_models

    commands = arm_server_commands(sweep, named_models(sweep), SERVED_MODEL_NAME, per_request_spec_metrics)
    return [command.model_dump(mode="json") for command in commands]


def _plan_headline(config: Path) -> "tuple[SweepEstimate | None, str | None]":
    """The prior's plan of a valid config, or why it cannot be formed (validate still passes)."""
    from specfleet.errors import InputError
    from specfleet_tasks.plan.estimate import plan_sweep_estimate

    try:
        times, _ = plan_sweep_estimate(config, None, None, Path("results"))
    except InputError as err:
        return None, str(err)
    return times.estimate, None


def _mount() -> None:
    from specfleet_cli import calc, fixtures, monitor, stats
    from specfleet_cli.canary import canary
    from specfleet_cli.measure import measure
    from specfleet_cli.plan import plan
    from specfleet_cli.predict import predict
    from specfleet_cli.report import report
    from specfleet_cli.sweep import demo, revalidate, sweep, sync
    from specfleet_cli.traffic import traffic

    app.command()(measure)
    app.command()(traffic)
    app.command()(canary)
    app.command()(plan)
    app.command()(sweep)
    app.command()(revalidate)
    app.command()(sync)
    app.command()(report)
    app.command()(predict)
    app.command()(demo)
    app.add_typer(fixtures.app, name="fixtures", help="Build the fixture models for the CPU demo.")
    app.add_typer(calc.app, name="calc", help="The seed's calculator: speedup, break-even, fleet cost, KV.")
    app.add_typer(stats.app, name="stats", help="Statistical checks on stored samples.")
    app.add_typer(monitor.app, name="monitor", help="Prometheus rules that watch a deployed arm against its sweep.")


_mount()


def _usage_errors() -> tuple[type[Exception], ...]:
    """UsageError of click and of the click that typer 0.2x vendors (a different class)."""
    import importlib

    found: list[type[Exception]] = []
    for name in ("click.exceptions", "typer._click.exceptions"):
        try:
            found.append(importlib.import_module(name).UsageError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


EMBEDDED_PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}
"""Where the user has not configured them: the embedded Prefect server sends no usage telemetry
(nothing here phones home), and gets two minutes to answer instead of Prefect's 20 s, which a
2-core machine migrating a fresh ``PREFECT_HOME`` database can miss ("Timed out while attempting
to connect to ephemeral Prefect API server", seen twice in one fresh-clone CI run here)."""


def entry() -> None:
    """Console entry point: usage errors become one ``error:`` line and exit 2; the embedded
    Prefect server's defaults set (``EMBEDDED_PREFECT_DEFAULTS``)."""
    import os
    import sys

    for name, value in EMBEDDED_PREFECT_DEFAULTS.items():
        os.environ.setdefault(name, value)
    usage_errors = _usage_errors()
    command = typer.main.get_command(app)
    try:
        code = command.main(standalone_mode=False)
    except usage_errors as err:
        print(f"error: {err.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
        sys.exit(2)
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
