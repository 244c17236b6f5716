"""``specfleet canary``: a speculative replica against a matched baseline replica, side by side."""

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from specfleet.contract.durations import duration_flag, format_duration
from specfleet.production.replica_age import DEFAULT_MAX_AGE_GAP_S
from specfleet_cli.errors import ExitCode, check_load_flags, exit_on_error


def canary(
    baseline: Annotated[str, typer.Option(help="Base URL of the baseline (speculation-off) replica.")],
    candidate: Annotated[str, typer.Option(help="Base URL of the speculative replica.")],
    prompts: Annotated[list[str], typer.Option(
        help="A bundled class name or a JSONL/ShareGPT file; repeat per class.")],
    requests: Annotated[int, typer.Option(min=1, help="Measured requests per class and replica.")],
    concurrency: Annotated[int | None, typer.Option(
        min=1, help="Closed loop: requests in flight per replica.")] = None,
    rate: Annotated[float | None, typer.Option(
        min=0.0, help="Open loop: Poisson arrivals per second per replica.")] = None,
    model: Annotated[str | None, typer.Option(help="Served model name; default: the one each replica serves.")] = None,
    from_sweep: Annotated[str | None, typer.Option(
        "--from", help="Sweep whose SLO, noise floor, break-even and rollback arguments apply.")] = None,
    arm: Annotated[str | None, typer.Option(
        help="The sweep's arm the candidate runs (its break-even); default: the sweep's adopted arm, if one.")] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Unmeasured warm-up requests per replica.")] = 2,
    max_tokens: Annotated[int, typer.Option(min=1)] = 64,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.0,
    slo_ttft_ms: Annotated[float | None, typer.Option(min=0.0, help="Without --from: the TTFT SLO.")] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(min=0.0, help="Without --from: the ITL SLO.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key.")] = None,
    ca_bundle: Annotated[Path | None, typer.Option(help="PEM CA bundle to verify https replicas with, in place of "
                                                   "the system store (a private CA).")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Do not verify the replicas' TLS certificates "
                                           "(said on stderr).")] = False,
    results_dir: Annotated[Path, typer.Option(help="Where the canary's cells, records and canary.json go.")] = Path(
        "results"),
    tracking_uri: Annotated[str | None, typer.Option(
        help="MLflow tracking URI (default: MLFLOW_TRACKING_URI).")] = None,
    baseline_twin: Annotated[str | None, typer.Option(
        help="Base URL of a freshly started replica configured as the baseline: the candidate is compared with "
        "it (like age), and the baseline against it is the age difference, measured.")] = None,
    max_age_gap: Annotated[str, typer.Option(
        help="Replicas this close in age (30s, 30m, 2h, 1d) are taken as alike: further apart, or of unknown age, "
        "throughput and ITL can neither promote nor roll back.")] = format_duration(DEFAULT_MAX_AGE_GAP_S),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Compare a speculative replica with a baseline replica per prompt class: promote, hold or rollback."""
    from specfleet_flows.canary import run_and_publish
    from specfleet_tasks.canary.context import CanaryLoad

    with exit_on_error():
        check_load_flags(concurrency, rate)
        max_age_gap_s = duration_flag("--max-age-gap", max_age_gap)
        run = run_and_publish(baseline, candidate, prompts, CanaryLoad(concurrency, rate, requests, warmup, max_tokens,
                                                                      temperature), results_dir,
                              model=model, api_key=os.environ.get(api_key_env) if api_key_env else None,
                              from_sweep=from_sweep, arm=arm, slo_ttft_ms=slo_ttft_ms, slo_itl_ms=slo_itl_ms,
                              ca_bundle=ca_bundle, insecure=insecure, tracking=tracking_uri,
                              baseline_twin=baseline_twin, max_age_gap_s=max_age_gap_s)
    for note in run.notes:
        print(f"note: {note}", file=sys.stderr)
    if as_json:
        print(json.dumps(run.result.model_dump(mode="json")))
    else:
        from specfleet_cli.render import print_canary

        print_canary(run.result, run.canary_dir)
    if run.result.verdict == "rollback":
        raise typer.Exit(ExitCode.ROLLBACK)
