"""``specfleet traffic``: the ``traffic`` block a production vLLM's Prometheus metrics imply."""

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from specfleet.errors import InputError
from specfleet_cli.errors import exit_on_error


def traffic(
    prometheus: Annotated[str, typer.Option(help="Prometheus base URL, e.g. http://prometheus:9090")],
    since: Annotated[str, typer.Option(help="Window ending now: 30s, 90m, 7h, 1d or 2w.")] = "7d",
    model: Annotated[str | None, typer.Option(help="The model_name to read (needed when several are served).")] = None,
    config: Annotated[Path | None, typer.Option(
        help="Sweep config: snap levels to its load.concurrency and list its prompt classes.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the traffic block (token-weighted concurrency shares) of a production vLLM server."""
    from specfleet.contract.durations import duration_flag
    from specfleet.production.traffic_estimate import CLASSES_NOT_VISIBLE, estimate_traffic, traffic_block
    from specfleet_tasks.monitor.prometheus import PrometheusClient
    from specfleet_tasks.monitor.traffic import read_server_metrics
    from specfleet_tasks.store.config import load_sweep_config

    with exit_on_error():
        window_s = duration_flag("--since", since)
        sweep = load_sweep_config(config) if config is not None else None
        if sweep is not None and not sweep.load.concurrency:
            raise InputError(f"{config}: load.concurrency is empty: the estimate snaps to the config's levels")
        metrics = read_server_metrics(PrometheusClient(prometheus), window_s, time.time(), model)
        estimate = estimate_traffic(metrics, sweep.load.concurrency if sweep is not None else None)
    print(f"note: {CLASSES_NOT_VISIBLE}" + (" (the block lists the config's with equal placeholder shares)"
                                           if sweep is not None else ""), file=sys.stderr)
    if as_json:
        print(json.dumps(estimate.model_dump(mode="json")))
        return
    print(traffic_block(estimate, metrics, [p.name for p in sweep.prompt_classes] if sweep is not None else None))
