"""``specfleet monitor``: Prometheus rules that watch a deployed speculative arm against its sweep."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specfleet_cli.errors import exit_on_error
from specfleet_cli.output import print_json

if TYPE_CHECKING:
    from specfleet.production.monitor_basis import MonitorBasis

app = typer.Typer(no_args_is_help=True)


def rules_json(basis: "MonitorBasis", window_s: int, model: str | None, notes: list[str],
               out: Path | None) -> dict[str, Any]:
    """``specfleet monitor rules --json``: where the rules went (``rules_file``, null without
    ``--out``), what they watch and with which figures (``basis``), and the rules themselves
    (Prometheus' rule-file object, as the YAML holds it)."""
    from specfleet.production.prometheus_rules import AlertingRule, prometheus_rules

    rules = prometheus_rules(basis, window_s, model)
    alerts = sum(isinstance(r, AlertingRule) for g in rules.groups for r in g.rules)
    return {"rules_file": None if out is None else str(out), "sweep_id": basis.sweep_id, "arm": basis.arm,
            "adopted": basis.adopted, "window_s": window_s, "model": model, "alert_expressions": alerts,
            "notes": notes, "basis": basis.model_dump(mode="json"),
            "rules": rules.model_dump(mode="json", by_alias=True)}


@app.command()
def rules(
    sweep: Annotated[str, typer.Argument(help="Sweep id (under --results-dir) or a sweep's results folder.")],
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Root of the sweeps' results.")] = Path("results"),
    out: Annotated[Path | None, typer.Option("--out", help="Rule file to write (default: standard output).")] = None,
    arm: Annotated[str | None, typer.Option(
        "--arm", help="Watch this speculative arm (default: the one the sweep adopted at its traffic mix).")] = None,
    window: Annotated[str, typer.Option(
        "--window", help="Rolling window of the means, and how long an alert condition must hold: 30s, 10m, 1h.")]
        = "10m",
    model: Annotated[str | None, typer.Option(
        "--model", help="Only this served model name (vLLM's model_name label; default: every speculative one).")]
        = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object on stdout: the rule file written (with --out) and the rules.")] = False,
) -> None:
    """Write Prometheus recording and alerting rules: tokens per decode step below the sweep's
    break-even, or below its own figure by more than its noise floor, per load bucket."""
    from specfleet.contract.durations import duration_flag
    from specfleet_tasks.monitor.rules import rules_yaml, sweep_basis, write_rules
    from specfleet_tasks.store.sweep import StoredSweep

    with exit_on_error():
        window_s = duration_flag("--window", window)
        basis, notes = sweep_basis(StoredSweep.find(sweep, results_dir), arm)
        text = rules_yaml(basis, window_s, model, notes)
        if out is not None:
            write_rules(out, text)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if as_json:
        print_json(rules_json(basis, window_s, model, notes, out))
        return
    if out is None:
        print(text, end="")
        return
    alerts = text.count("\n  - alert: ")
    print(f"rules: {out} ({alerts} alert expressions for {basis.arm}, sweep {basis.sweep_id}); "
          f"load with rule_files in prometheus.yml")
