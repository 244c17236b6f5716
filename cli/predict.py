"""``specfleet predict``: one cell as the performance model calibrated on a stored sweep predicts it."""

import json
from pathlib import Path
from typing import Annotated

import typer

from specfleet_cli.errors import check_load_flags, exit_on_error


def predict(
    sweep: Annotated[str, typer.Argument(help="Sweep id (under --results-dir) or a sweep's results folder.")],
    arm: Annotated[str, typer.Option("--arm", help="An arm name of the sweep's config (baseline, draft, ...).")],
    prompt_class: Annotated[str, typer.Option("--prompt-class", help="A prompt class of the sweep.")],
    k: Annotated[int | None, typer.Option("--k", min=1, help="Speculative tokens per step (speculative arms).")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Closed loop: requests in flight.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: Poisson arrivals per second.")] = None,
    sampling: Annotated[str | None, typer.Option(help="A sampling mode of the sweep (default: its first).")] = None,
    requests: Annotated[int, typer.Option(min=1, help="Requests to simulate.")] = 256,
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Root of the sweeps' results.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Predict one cell (arm, k, class, load, sampling) from a stored sweep: TTFT, ITL, TPOT and E2E
    percentiles, throughput, SLO-qualified tokens/s, speedup and cost, with an interval and what
    it extrapolates. Predicted, never measured: no decision reads it."""
    from specfleet.perfmodel.calibrate import calibrate
    from specfleet.perfmodel.predict import PredictionQuery
    from specfleet.perfmodel.predict import predict as run_predict
    from specfleet_tasks.store.sweep import StoredSweep

    with exit_on_error():
        check_load_flags(concurrency, rate)
        data = StoredSweep.find(sweep, results_dir)
        calibration = calibrate(data.id, data.config, data.cells, data.records, seed=data.config.analysis.seed)
        prediction = run_predict(calibration, PredictionQuery(
            arm=arm, prompt_class=prompt_class, k=k, concurrency=concurrency, rate_per_s=rate, sampling=sampling,
            requests=requests, seed=data.config.analysis.seed))
    if as_json:
        print(json.dumps(prediction.model_dump(mode="json")))
        return
    from specfleet_cli.render import print_prediction

    print_prediction(prediction)
