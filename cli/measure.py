"""``specfleet measure``: one cell against an already running OpenAI-compatible endpoint."""

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from specfleet.contract import SamplingSpec, SLOSpec
from specfleet.results import CellResult, DistributionSummary
from specfleet_cli.errors import check_load_flags, exit_on_error
from specfleet_tasks.loadgen.http import CONNECT_TIMEOUT_S

NO_SLO_MS = float("inf")


def _figures(summary: DistributionSummary) -> dict[str, float | None]:
    def value(p: object) -> float | None:
        return getattr(p, "value", None)

    return {"p50": value(summary.p50), "p95": value(summary.p95), "p99": value(summary.p99), "mean": summary.mean}


def measure_json(cell: CellResult, slo_given: bool, tls_verification: str | None = None) -> dict[str, object]:
    """The flat JSON of ``specfleet measure --json``. ``mean_acceptance_length`` is the counters'
    1 + accepted / drafts (conditional on drafting); ``client_mean_acceptance_length`` the client's
    estimate of tokens per engine step over all steps and ``request_mean_acceptance_length`` vLLM's
    per-request figure, each pooled over the requests (token-weighted; their request-level
    distributions are in ``acceptance_per_request``). ``tls_verification`` says how the endpoint's
    certificate was checked (null over plain HTTP; ``off (--insecure)`` when it was not)."""
    spec, per_request = cell.spec_decode, cell.request_acceptance
    client = per_request.client_mean_acceptance_length if per_request else None
    server = per_request.request_mean_acceptance_length if per_request else None
    return {
        "status": cell.status,
        "reasons": cell.reasons,
        "completed": cell.completed,
        "failed": cell.failed,
        "ttft_ms": _figures(cell.ttft_ms),
        "itl_ms": _figures(cell.itl_per_chunk_ms),
        "itl_per_token_ms": _figures(cell.itl_per_token_ms),
        "tpot_ms": _figures(cell.tpot_ms),
        "e2e_ms": _figures(cell.e2e_ms),
        "output_tokens_per_s": cell.throughput.output_tokens_per_s,
        "qualified_tokens_per_s": cell.throughput.qualified_tokens_per_s,
        "request_goodput_per_s": cell.throughput.request_goodput_per_s,
        "slo_applied": slo_given,
        "acceptance_rate": spec.acceptance_rate if spec else None,
        "mean_acceptance_length": spec.mean_acceptance_length if spec else None,
        "acceptance_per_position": spec.acceptance_per_position if spec else None,
        "spec_decode_unavailable": cell.spec_decode_unavailable,
        "client_mean_acceptance_length": client.token_weighted_mean if client else None,
        "request_mean_acceptance_length": server.token_weighted_mean if server else None,
        "acceptance_per_request": per_request.model_dump() if per_request else None,
        "kv_cache": cell.kv_cache.model_dump() if cell.kv_cache else None,
        "energy": cell.energy.model_dump(),
        "client_lag_p99_ms": cell.client_lag_p99_ms,
        "tls_verification": tls_verification,
        "prefix_cache_not_reset": cell.prefix_cache_not_reset,
    }


def measure(
    endpoint: Annotated[str, typer.Option(help="Base URL, e.g. http://127.0.0.1:8000")],
    model: Annotated[str, typer.Option(help="Served model name.")],
    prompts: Annotated[str, typer.Option(help="A bundled class name or a JSONL/ShareGPT file.")],
    concurrency: Annotated[int | None, typer.Option(min=1, help="Closed loop: requests in flight.")] = None,
    rate: Annotated[float | None, typer.Option(min=0.0, help="Open loop: Poisson arrivals per second.")] = None,
    requests: Annotated[int, typer.Option(min=1, help="Measured requests.")] = 32,
    warmup: Annotated[int, typer.Option(min=0, help="Unmeasured warm-up requests.")] = 2,
    max_tokens: Annotated[int, typer.Option(min=1)] = 64,
    slo_ttft_ms: Annotated[float | None, typer.Option(min=0.0)] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(min=0.0)] = None,
    slo_percentile: Annotated[float, typer.Option(min=0.0, max=100.0)] = 95.0,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.0,
    ignore_eos: Annotated[bool, typer.Option(help="Fix output length at --max-tokens.")] = True,
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key.")] = None,
    ca_bundle: Annotated[Path | None, typer.Option(help="PEM CA bundle to verify an https endpoint with, in place "
                                                   "of the system store (a private CA).")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="Do not verify the endpoint's TLS certificate "
                                           "(said in the result).")] = False,
    connect_timeout_s: Annotated[float, typer.Option(min=0.0, help="How long a new connection, TLS handshake "
                                                     "included, may take.")] = CONNECT_TIMEOUT_S,
    out: Annotated[Path | None, typer.Option(help="Also store the cell and its Parquet here.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure one cell against a running endpoint (a canary, a replica, an arm started by hand)."""
    from specfleet_tasks.arm.cell import endpoint_cell_plan, measure_cell
    from specfleet_tasks.arm.energy import EnergyWindow, find_counter
    from specfleet_tasks.engine.endpoint_check import check_openai_endpoint
    from specfleet_tasks.loadgen import ServerEndpoint, run_async
    from specfleet_tasks.plan.prompt_sets import resolve_prompts
    from specfleet_tasks.store.results import ResultsStore

    with exit_on_error():
        check_load_flags(concurrency, rate)
        items = resolve_prompts(prompts)
        server = ServerEndpoint.from_url(endpoint, model, os.environ.get(api_key_env) if api_key_env else None,
                                         ca_bundle=ca_bundle, insecure=insecure)
        check_openai_endpoint(server)
        slo_given = slo_ttft_ms is not None or slo_itl_ms is not None
        slo = SLOSpec(ttft_ms=slo_ttft_ms or NO_SLO_MS, itl_ms=slo_itl_ms or NO_SLO_MS, percentile=slo_percentile)
        plan = endpoint_cell_plan(
            arm="endpoint", prompt_class=prompts, prompts=items,
            sampling=SamplingSpec(name="cli", temperature=temperature),
            concurrency=concurrency, rate=rate, requests=requests, warmup=warmup, max_tokens=max_tokens, slo=slo,
            key_salt="measure", ignore_eos=ignore_eos, connect_timeout_s=connect_timeout_s)
        store = ResultsStore(out, "measure") if out else None
        counter, reason = find_counter()
        cell = run_async(measure_cell(server, plan, EnergyWindow(counter, reason), store))
    result = measure_json(cell, slo_given, server.tls_verification)
    if as_json:
        print(json.dumps(result))
        return
    from specfleet_cli.render import print_measurement

    print_measurement(result)
