"""Measure one cell against a running OpenAI-compatible endpoint and store it as it finishes."""

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from specfleet.contract import CellIdentity, SamplingSpec, SLOSpec
from specfleet.contract.prompts import PromptItem
from specfleet.contract.workload import AdaptiveStoppingSpec
from specfleet.measure.metrics import CI_CONFIDENCE, assemble_cell, client_saturation
from specfleet.measure.telemetry import (
    parse_kv_cache_info,
    parse_spec_decode_counters,
    requests_in_flight,
    spec_decode_delta,
)
from specfleet.results import CellResult, SpecDecodeStats
from specfleet.results.cell import StopReason
from specfleet.stats.stopping import AdaptiveStopper
from specfleet_tasks.arm.energy import EnergyWindow
from specfleet_tasks.loadgen import (
    ClosedLoop,
    Load,
    LoadResult,
    PoissonArrivals,
    RequestSettings,
    ServerEndpoint,
    route_for,
    run_load,
)
from specfleet_tasks.loadgen.http import CONNECT_TIMEOUT_S
from specfleet_tasks.store.results import ResultsStore


@dataclass(frozen=True)
class CellPlan:
    """Everything one measured window needs besides the endpoint.

    With ``adaptive_stopping`` the cell measures between its min and max requests
    (``requests``, the fixed budget, is then unused) at interval ``confidence``.
    """

    identity: CellIdentity
    key: str
    prompts: Sequence[PromptItem]
    settings: RequestSettings
    load: Load
    requests: int
    warmup_requests: int
    slo: SLOSpec
    max_error_fraction: float
    client_lag_limit_ms: float = 50.0
    adaptive_stopping: AdaptiveStoppingSpec | None = None
    confidence: float = CI_CONFIDENCE

    def stopper(self) -> AdaptiveStopper | None:
        spec = self.adaptive_stopping
        return None if spec is None else AdaptiveStopper(spec, self.slo, self.confidence)

    @property
    def max_requests(self) -> int:
        return self.requests if self.adaptive_stopping is None else self.adaptive_stopping.max_requests


def endpoint_cell_plan(*, arm: str, prompt_class: str, prompts: Sequence[PromptItem], sampling: SamplingSpec,
                       concurrency: int | None, rate: float | None, requests: int, warmup: int, max_tokens: int,
                       slo: SLOSpec, key_salt: str, ignore_eos: bool = True, max_error_fraction: float = 1.0,
                       client_lag_limit_ms: float = 50.0, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> CellPlan:
    """One cell against a running endpoint (``specfleet measure``, each replica of ``specfleet canary``):
    a closed loop at ``concurrency``, else Poisson arrivals at ``rate``; ``warmup`` unmeasured requests
    first, then ``requests`` measured; the key is the identity's under ``key_salt``."""
    identity = CellIdentity(arm=arm, method="unknown", k=None,
                            load_mode="concurrency" if concurrency is not None else "rate",
                            load_value=float(concurrency or rate or 0), prompt_class=prompt_class,
                            sampling=sampling.name, repeat=0)
    load: Load = ClosedLoop(concurrency) if concurrency is not None else PoissonArrivals(rate or 1.0, 0)
    settings = RequestSettings(route=route_for(prompts), max_tokens=max_tokens, ignore_eos=ignore_eos,
                               sampling=sampling, timeout_s=300.0, connect_timeout_s=connect_timeout_s)
    return CellPlan(identity=identity, key=identity.key(key_salt), prompts=prompts, settings=settings, load=load,
                    requests=requests, warmup_requests=warmup, slo=slo, max_error_fraction=max_error_fraction,
                    client_lag_limit_ms=client_lag_limit_ms)


async def _scrape(client: httpx.AsyncClient) -> str | None:
    try:
        response = await client.get("/metrics")
        return response.text if response.status_code == 200 else None
    except httpx.HTTPError:
        return None


RESET_DRAIN_TIMEOUT_S = 120.0
"""How long a refused prefix-cache reset waits for the server's in-flight requests to drain, trying again."""
RESET_POLL_S = 0.5
RESET_ENDPOINT = "/reset_prefix_cache"
NO_RESET_ENDPOINT = ("the server has no POST /reset_prefix_cache (404: vLLM's dev endpoints are off, as on a "
                     "non-loopback engine.host without VLLM_SERVER_DEV_MODE=1)")


@dataclass(frozen=True)
class PrefixCacheReset:
    """What came of clearing the prefix cache before a cell: ``reason`` None when it was cleared;
    ``distrusted`` when the server has the endpoint and refused until the bound ran out."""

    reason: str | None = None
    distrusted: bool = False


async def reset_prefix_cache(client: httpx.AsyncClient, drain_timeout_s: float = RESET_DRAIN_TIMEOUT_S,
                             poll_s: float = RESET_POLL_S) -> PrefixCacheReset:
    """Between cells, so repeats are comparable. vLLM answers ``{"success": false}`` while KV blocks
    are still held (by requests the client gave up on, say): then wait for its running and waiting
    requests (``/metrics``) to drain and try again, for up to ``drain_timeout_s``."""
    deadline = time.monotonic() + drain_timeout_s
    in_flight: int | None = None
    while True:
        try:
            response = await client.post(RESET_ENDPOINT)
        except httpx.HTTPError as err:
            return PrefixCacheReset(f"POST {RESET_ENDPOINT} failed ({type(err).__name__})")
        if response.status_code == 404:
            return PrefixCacheReset(NO_RESET_ENDPOINT)
        if response.status_code != 200:
            return PrefixCacheReset(f"POST {RESET_ENDPOINT} answered {response.status_code}")
        if _reset_succeeded(response):
            return PrefixCacheReset()
        in_flight = await _drain(client, deadline, poll_s)
        if time.monotonic() >= deadline:
            held = "unknown (no /metrics)" if in_flight is None else str(in_flight)
            return PrefixCacheReset(f"the server refused to reset its prefix cache (success false) for "
                                    f"{drain_timeout_s:g} s; requests in flight at the end: {held}", distrusted=True)
        await asyncio.sleep(poll_s)


def _reset_succeeded(response: httpx.Response) -> bool:
    """vLLM answers ``{"success": bool}``; older servers answer 200 with no body (then trusted)."""
    try:
        body = response.json()
    except ValueError:
        return True
    return not isinstance(body, dict) or body.get("success") is not False


async def _drain(client: httpx.AsyncClient, deadline: float, poll_s: float) -> int | None:
    """Poll the running and waiting gauges until none is in flight or ``deadline``; the last count."""
    while True:
        text = await _scrape(client)
        in_flight = None if text is None else requests_in_flight(text)
        if in_flight == 0 or time.monotonic() >= deadline:
            return in_flight
        await asyncio.sleep(poll_s)


def _spec_decode(before: str | None, after: str | None) -> tuple[SpecDecodeStats | None, str | None]:
    if before is None or after is None:
        return None, "the endpoint exposes no /metrics"
    start, end = parse_spec_decode_counters(before), parse_spec_decode_counters(after)
    if start is None or end is None:
        return None, "no spec-decode counters on /metrics (no speculation on this server)"
    return spec_decode_delta(start, end), None


async def measure_cell(
    endpoint: ServerEndpoint,
    plan: CellPlan,
    energy: EnergyWindow,
    store: ResultsStore | None = None,
    server_alive: Callable[[], bool] | None = None,
    engine_version: str | None = None,
    server: str | None = None,
) -> CellResult:
    """Warm up, snapshot telemetry, run the measured requests, snapshot again, assemble, store.
    ``server`` names the server life the endpoint is (``CellResult.server``)."""
    started_at = datetime.now(UTC).isoformat()
    async with endpoint.async_client(10) as client:
        reset = await reset_prefix_cache(client)
        snapshots: dict[str, str | None] = {}

        async def before_measured() -> None:
            snapshots["before"] = await _scrape(client)
            energy.begin()

        stopper = plan.stopper()
        result: LoadResult = await run_load(
            endpoint, plan.prompts, plan.settings, plan.load, requests=plan.max_requests,
            warmup_requests=plan.warmup_requests, before_measured=before_measured, stop_when=stopper,
        )
        reading = energy.end()
        after = await _scrape(client)
    server_failed = server_alive is not None and not server_alive()
    spec, spec_missing = _spec_decode(snapshots.get("before"), after)
    lag_ms = result.loop_lag.p99_ms
    saturated = client_saturation(lag_ms, plan.client_lag_limit_ms)
    records_file = None if store is None else store.write_records(plan.key, result.records)
    cell = assemble_cell(
        plan.identity, plan.key, result.records, slo=plan.slo, duration_s=result.duration_s,
        requests_planned=plan.requests if stopper is None else len(result.records),
        ignore_eos=plan.settings.ignore_eos,
        max_error_fraction=plan.max_error_fraction,
        energy=reading,
        spec_decode=spec,
        spec_decode_unavailable=spec_missing,
        kv_cache=parse_kv_cache_info(after) if after else None,
        server_failed=server_failed, client_lag_p99_ms=lag_ms,
        runner_reasons=[r for r in (saturated, reset.reason if reset.distrusted else None) if r],
        records_file=records_file, engine_version=engine_version, started_at=started_at,
        stop_reason=_stop_reason(stopper), server=server,
    )
    cell = cell.model_copy(update={"prefix_cache_not_reset": reset.reason})
    if store is not None:
        store.write_cell(cell)
    return cell


def _stop_reason(stopper: AdaptiveStopper | None) -> StopReason:
    if stopper is None:
        return "fixed_budget"
    return stopper.reason or "max_requests"

