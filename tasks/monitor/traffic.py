"""What a traffic estimate reads from Prometheus: one vLLM model's running-requests gauge,
generation-tokens counter and per-request length histograms over a window ending now."""

import json
import math

from specfleet.contract.durations import format_duration
from specfleet.errors import InputError
from specfleet.production.traffic_estimate import (
    GENERATION_TOKENS,
    GENERATION_TOKENS_HISTOGRAM,
    PROMPT_TOKENS_HISTOGRAM,
    QUANTILES,
    RUNNING,
    Lengths,
    ServerMetrics,
    query_step_s,
    scrape_interval_s,
)
from specfleet_tasks.monitor.prometheus import PrometheusClient

RAW_LOOKBACK_S = 600
"""Raw samples read to infer the scrape interval: the window's last ten minutes at most."""


def read_server_metrics(client: PrometheusClient, window_s: int, end_s: float, model: str | None) -> ServerMetrics:
    """The series of ``model`` (the only model in the window when None) over [end_s - window_s, end_s]."""
    since = format_duration(window_s)
    counted = client.query(f"count by (model_name) (count_over_time({RUNNING}[{window_s}s]))", end_s)
    models = sorted({s.labels.get("model_name", "") for s in counted})
    if not models:
        raise InputError(f"{client.url}: no samples of {RUNNING} in the last {since}")
    if model is None and len(models) > 1:
        raise InputError(f"{client.url}: several models in the last {since} ({', '.join(models)}): "
                         "choose one with --model")
    if model is not None and model not in models:
        raise InputError(f"--model {model}: no samples of {RUNNING} for it in the last {since} "
                         f"(models seen: {', '.join(models)})")
    chosen = model if model is not None else models[0]
    selector = f"{{model_name={json.dumps(chosen)}}}"
    raw = client.query(f"{RUNNING}{selector}[{min(window_s, RAW_LOOKBACK_S)}s]", end_s)
    interval_s = scrape_interval_s(raw)
    step_s = query_step_s(window_s, interval_s)
    start_s = end_s - window_s
    return ServerMetrics(
        source=client.url, model=chosen, window_s=window_s, step_s=step_s, scrape_interval_s=interval_s,
        running=client.query_range(RUNNING + selector, start_s, end_s, step_s),
        generated=client.query_range(GENERATION_TOKENS + selector, start_s, end_s, step_s),
        prompt_tokens=_lengths(client, PROMPT_TOKENS_HISTOGRAM, selector, window_s, end_s),
        generation_tokens=_lengths(client, GENERATION_TOKENS_HISTOGRAM, selector, window_s, end_s),
    )


def _lengths(client: PrometheusClient, histogram: str, selector: str, window_s: int, end_s: float) -> Lengths:
    def value(promql: str) -> float | None:
        found = [v for s in client.query(promql, end_s) for _, v in s.points]
        return found[0] if found and math.isfinite(found[0]) else None

    def increase(series: str) -> str:
        return f"increase({histogram}_{series}{selector}[{window_s}s])"

    return Lengths(
        sum_increase=value(f"sum({increase('sum')})"), count_increase=value(f"sum({increase('count')})"),
        quantiles={q: value(f"histogram_quantile({q}, sum by (le) ({increase('bucket')}))") for q in QUANTILES},
    )
