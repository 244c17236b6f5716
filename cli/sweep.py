"""``specfleet sweep``, ``revalidate`` and ``demo``: thin calls into the Prefect flows."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specfleet_cli.errors import ExitCode, exit_on_error
from specfleet_cli.output import print_json, stdout_to_stderr

if TYPE_CHECKING:
    from specfleet.report.sweep_report import SweepReport
    from specfleet_flows.revalidate import Revalidation
    from specfleet_flows.sync import SyncResult

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO_ROOT / "configs" / "demo-cpu.yaml"
POLICY_DEMO_CONFIG = REPO_ROOT / "configs" / "demo-policy-cpu.yaml"

ConfigArg = Annotated[Path, typer.Argument(help="Sweep config (YAML).")]
TrackingUri = Annotated[str | None, typer.Option(
    "--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db).")]
ResultsDir = Annotated[Path, typer.Option("--results-dir", help="Per-cell results, one folder per sweep.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout; the rest goes to stderr.")]
LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def mlflow_ui_hint(tracking_uri: str, experiment: str) -> str:
    """A server is opened in a browser, a local store through ``mlflow ui`` on loopback; either
    way on the experiment's runs table, where sweeps are compared. Asks the store for the
    experiment's id, so the command calls it before rendering (``specfleet_cli.render`` does no I/O)."""
    from specfleet_tasks.tracking.runs import experiment_id, experiment_page, shown_uri

    found = experiment_id(tracking_uri, experiment)
    if tracking_uri.startswith(("http://", "https://")):
        base = shown_uri(tracking_uri)
        return f"open {experiment_page(base, found) if found else base}"
    page = f", then open {experiment_page(LOCAL_MLFLOW_UI, found)}" if found else ""
    return f"mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1{page}"


def sweep_json(summary: "SweepReport") -> dict[str, Any]:
    """``specfleet sweep --json``: where the sweep was written, and its summary as ``summary.json`` holds it."""
    folder = Path(summary.results_dir)
    return {"sweep_id": summary.sweep_id, "sweep_dir": str(folder), "summary_json": str(folder / "summary.json"),
            "summary_md": str(folder / "summary.md"), "failed_cells": len(summary.failed_cells),
            "summary": summary.model_dump(mode="json")}


def revalidate_json(result: "Revalidation") -> dict[str, Any]:
    """``specfleet revalidate --json``: the comparison, whether the event went out, and the sweep
    it ran (``sweep_json``'s object), or null with ``--check`` or no change."""
    return {"verdict": result.verdict, **result.model_dump(mode="json", exclude={"sweep"}),
            "sweep": sweep_json(result.sweep) if result.sweep is not None else None}


def sync_json(result: "SyncResult", tracking_uri: str) -> dict[str, Any]:
    """``specfleet sync --json``: what was logged, and where (the URI without credentials)."""
    from specfleet_tasks.tracking.runs import shown_uri

    return {**result.model_dump(mode="json"), "already_logged": result.cells_stored - result.runs_created,
            "tracking_uri": shown_uri(tracking_uri)}


def _run_sweep(config: Path, resume: str | None, tracking_uri: str | None, results_dir: Path,
               budget: str | None = None, continue_sweep: bool = False, as_json: bool = False,
               policy_from: str | None = None) -> "SweepReport":
    from specfleet.planning.budget import budgeted
    from specfleet_cli.render import print_sweep_summary
    from specfleet_flows.sweep import sweep_flow
    from specfleet_tasks.cluster.interrupt import ctrl_c_stops_the_sweep
    from specfleet_tasks.fixtures.progress import BuildDisplay
    from specfleet_tasks.plan.models import resolve_models
    from specfleet_tasks.plan.preflight import check_inputs
    from specfleet_tasks.plan.sweep_plan import check_continue, check_policy_from, open_sweep
    from specfleet_tasks.tracking.runs import tracking_uri as resolve_uri

    with exit_on_error(), stdout_to_stderr(as_json):
        checked = budgeted(check_inputs(config), budget)  # bad input exits 2 before Prefect, Ray or an engine starts
        if continue_sweep:
            check_continue(results_dir, checked.name, resume)
        if resume is not None:
            open_sweep(results_dir, resume)
        if policy_from is not None:
            check_policy_from(results_dir, checked, policy_from, resume, continue_sweep)
        with BuildDisplay() as display:  # a first build's progress reaches this console, not the flow's log
            resolve_models(checked, progress=display)
        announce_embedded_prefect()
        with ctrl_c_stops_the_sweep():
            summary = sweep_flow(str(config), resume, tracking_uri, str(results_dir), budget, continue_sweep,
                                 policy_from)
    if as_json:
        print_json(sweep_json(summary))
    else:
        print_sweep_summary(summary, mlflow_ui_hint(resolve_uri(tracking_uri), summary.config_name))
    return summary


def announce_embedded_prefect() -> None:
    """Without ``PREFECT_API_URL`` the flow starts Prefect's embedded server, which says nothing
    for its first tens of seconds; the first time on a machine it creates its database (42 s
    from the command to the flow's first line on the 2-core machine, docs/install.md)."""
    from prefect.settings import get_current_settings
    from rich.console import Console

    settings = get_current_settings()
    if settings.api.url:
        return
    database = settings.server.database.connection_url
    url = database.get_secret_value() if database is not None else ""
    first = url.startswith("sqlite") and not Path(url.split(":///", 1)[-1]).exists()
    Console(highlight=False, soft_wrap=True).print("starting Prefect's embedded server" + (
        ", the first time on this machine: it creates its database (about 40 s)" if first else ""), markup=False)


def _exit_for(summary: "SweepReport") -> None:
    if summary.failed_cells:
        raise typer.Exit(ExitCode.FAILED_CELLS)


def sweep(
    config: ConfigArg,
    resume: Annotated[str | None, typer.Option("--resume", help="Sweep id: measure only its missing cells.")] = None,
    tracking_uri: TrackingUri = None,
    results_dir: ResultsDir = Path("results"),
    budget: Annotated[str | None, typer.Option(
        "--budget", help="Wall time from the start: 90m, 7h, 1d (over the config's budget block). No cell starts "
        "once it and the closing baseline no longer fit; adaptive stopping is on.")] = None,
    continue_sweep: Annotated[bool, typer.Option(
        "--continue", help="Continue the newest unfinished sweep of CONFIG under --results-dir (a new one when "
        "its fingerprint changed), most decision-relevant cells first.")] = False,
    policy_from: Annotated[str | None, typer.Option(
        "--policy-from", help="Sweep id: measure the k policy it chose, each on its own server, beside the baseline "
        "(a follow-up of the same config and fingerprint; resumable with --resume).")] = None,
    as_json: AsJson = False,
) -> None:
    """Measure every arm and cell of CONFIG on real servers and decide where speculation pays.

    Exit 3 when some cells failed (their results are kept; --resume measures the rest). Cells a
    budget left out are listed as not measured (exit 0; --continue measures them).
    """
    _exit_for(_run_sweep(config, resume, tracking_uri, results_dir, budget, continue_sweep, as_json, policy_from))


def revalidate(
    config: ConfigArg,
    check: Annotated[bool, typer.Option("--check", help="Only say whether the fingerprint changed.")] = False,
    tracking_uri: TrackingUri = None,
    results_dir: ResultsDir = Path("results"),
    as_json: AsJson = False,
) -> None:
    """Compare the fingerprint with the last finished sweep's; on a change, emit the event and sweep."""
    from specfleet_cli.render import print_sweep_summary
    from specfleet_flows.revalidate import revalidate_flow
    from specfleet_tasks.cluster.interrupt import ctrl_c_stops_the_sweep
    from specfleet_tasks.plan.preflight import check_inputs
    from specfleet_tasks.tracking.runs import tracking_uri as resolve_uri

    with exit_on_error(), stdout_to_stderr(as_json):
        check_inputs(config)
        with ctrl_c_stops_the_sweep():
            result = revalidate_flow(str(config), check=check, tracking=tracking_uri, results_dir=str(results_dir))
    if as_json:
        print_json(revalidate_json(result))
    else:
        print(result.verdict)
        if result.sweep is not None:
            print_sweep_summary(result.sweep, mlflow_ui_hint(resolve_uri(tracking_uri), result.sweep.config_name))
    if result.sweep is not None:
        _exit_for(result.sweep)


def sync(
    sweep_id: Annotated[str, typer.Argument(help="Sweep id under --results-dir.")],
    tracking_uri: TrackingUri = None,
    results_dir: ResultsDir = Path("results"),
    as_json: AsJson = False,
) -> None:
    """Log a sweep's stored results to MLflow (after an outage); running it twice creates nothing new."""
    from specfleet_flows.sync import sync_flow
    from specfleet_tasks.plan.sweep_plan import open_sweep
    from specfleet_tasks.store.sweep import StoredSweep
    from specfleet_tasks.tracking.runs import require_reachable, shown_uri
    from specfleet_tasks.tracking.runs import tracking_uri as resolve_uri

    with exit_on_error(), stdout_to_stderr(as_json):
        store, stored = open_sweep(results_dir, sweep_id)
        _ = StoredSweep(store.dir, stored).config  # a format-1 sweep's config file must still be there
        require_reachable(resolve_uri(tracking_uri))
        result = sync_flow(sweep_id, tracking_uri, str(results_dir))
    if as_json:
        print_json(sync_json(result, resolve_uri(tracking_uri)))
        return
    print(f"sweep {result.sweep_id}: {result.runs_created} cell runs created, "
          f"{result.cells_stored - result.runs_created} already logged; parent run {result.parent_run_id} "
          f"({result.status}) at {shown_uri(resolve_uri(tracking_uri))}")
    print("summary: logged" if result.summary_logged else "summary: none stored (the sweep never finished; resume it)")
    print(f"report: {result.report}")


def demo(tracking_uri: TrackingUri = None, results_dir: ResultsDir = Path("results"),
         policy: Annotated[bool, typer.Option(
             "--policy", help="The k-policy demo (configs/demo-policy-cpu.yaml): the draft arm's k policy measured "
             "on its own server beside its composed verdict.")] = False) -> None:
    """The embedded demo: configs/demo-cpu.yaml on the CPU build of vLLM with the fixture models,
    then the pilot report."""
    from specfleet_cli.render import print_answer, print_next_steps
    from specfleet_cli.report import report
    from specfleet_tasks.tracking.runs import tracking_uri as resolve_uri

    summary = _run_sweep(POLICY_DEMO_CONFIG if policy else DEMO_CONFIG, None, tracking_uri, results_dir)
    report_html = report(summary.sweep_id, results_dir=results_dir, tracking_uri=tracking_uri)
    print_answer(summary)
    print_next_steps(report_html, mlflow_ui_hint(resolve_uri(tracking_uri), summary.config_name))
    _exit_for(summary)
