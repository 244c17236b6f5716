"""``specfleet report``: one self-contained HTML report and a markdown summary of a sweep."""

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specfleet_cli.errors import exit_on_error
from specfleet_cli.output import print_json, stdout_to_stderr

if TYPE_CHECKING:
    from specfleet.verdicts.cell import Decision
    from specfleet.verdicts.detection import Detection
    from specfleet.verdicts.mix import MixVerdict
    from specfleet.verdicts.sequential import Look

DEFAULT_DRAFT_COST_RATIO = 0.05  # the seed's c for its worked grid: an assumption, never a measurement

TrackingUri = Annotated[str | None, typer.Option(
    "--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db).")]
DraftCostRatio = Annotated[float, typer.Option(
    "--draft-cost-ratio", min=0.0, help="Assumed draft cost ratio c for the modelled grid (labelled as modelled).")]


def report(
    sweep: Annotated[str, typer.Argument(help="Sweep id (under --results-dir) or a sweep's results folder.")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder for report.html and report.md (default: <sweep folder>/report).")] = None,
    against: Annotated[str | None, typer.Option(
        "--against", help="Another sweep (id or folder): add a side-by-side diff with the flipped decisions.")] = None,
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Root of the sweeps' results.")] = Path("results"),
    tracking_uri: TrackingUri = None,
    draft_cost_ratio: DraftCostRatio = DEFAULT_DRAFT_COST_RATIO,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object on stdout: the files written and every verdict.")] = False,
) -> Path:
    """Write the sweep's report (decision, heat maps, latency, acceptance, KV, energy, model vs
    measured, negative cells, equivalence, contract) and log it to the sweep's MLflow run."""
    from specfleet_tasks.report.content import build_content
    from specfleet_tasks.report.publish import log_to_sweep_run, write_report
    from specfleet_tasks.store.sweep import StoredSweep
    from specfleet_tasks.tracking.runs import tracking_uri as resolve_uri
    from specfleet_tasks.tracking.runs import use_short_http_retries

    with exit_on_error(), stdout_to_stderr(as_json):
        stored = StoredSweep.find(sweep, results_dir)
        other = StoredSweep.find(against, results_dir) if against else None
        made = stored.report
        files = write_report(build_content(stored, draft_cost_ratio, other), out or stored.dir / "report")
    if not as_json:
        print(f"report: {files.html}")
        print(f"summary: {files.markdown}")
    with stdout_to_stderr(as_json):
        use_short_http_retries()
        mlflow = log_to_sweep_run(resolve_uri(tracking_uri), stored.config.name, made.sweep_id,
                                  [files.html, files.markdown])
    if as_json:
        print_json({**report_json(made.sweep_id, files.html, files.markdown, None if other is None else other.id,
                                  mlflow), **verdicts_json(made.mix, made.decisions, made.look)})
    else:
        print(mlflow)
    return files.html


def report_json(sweep_id: str, html: Path, markdown: Path, against: str | None, mlflow: str) -> dict[str, object]:
    """``specfleet report --json``: the sweep, the files written, the ``--against`` sweep's id, and the
    line saying where MLflow has the files or why it does not."""
    return {"sweep_id": sweep_id, "html": str(html), "markdown": str(markdown), "against": against,
            "mlflow": mlflow}


def verdicts_json(mix: Sequence["MixVerdict"], decisions: Sequence["Decision"],
                  look: "Look | None" = None) -> dict[str, object]:
    """Every verdict of ``specfleet report --json``: each arm and k policy at the traffic mix, and each
    cell, as adopt, reject or inconclusive (the report's figures are in its files); with
    ``analysis.nights`` the look they were decided at, and each carried verdict's sweep."""
    from specfleet.contract.matrix import load_label

    def detectable(found: "Detection | None") -> float | None:
        return found.saving_fraction if found is not None else None

    return {
        "mix": [{"arm": v.name, "sampling": v.sampling, "verdict": v.verdict, "partial": v.partial,
                 "saving_fraction": v.fleet.saving_fraction, "saving_low": v.fleet.pessimistic_saving_fraction,
                 "saving_high": v.fleet.optimistic_saving_fraction,
                 "detectable_saving_fraction": detectable(v.fleet.detection),
                 "to_decide": v.fleet.detection.to_decide if v.fleet.detection and v.verdict == "inconclusive"
                 else None, "carried_from": v.carried.sweep if v.carried else None} for v in mix],
        "decisions": [{"arm": d.slice.arm, "prompt_class": d.slice.prompt_class,
                       "load": load_label(d.slice.load_mode, d.slice.load_value), "sampling": d.slice.sampling,
                       "verdict": d.verdict, "reason": d.reason_code,
                       "detectable_saving_fraction": detectable(d.detection),
                       "to_decide": d.detection.to_decide if d.detection else None,
                       "carried_from": d.carried.sweep if d.carried else None} for d in decisions],
        "look": None if look is None else {**look.model_dump(mode="json"), "text": look.text},
    }
