"""Load drivers: closed-loop concurrency and seeded open-loop Poisson arrivals.

Both send W unrecorded warm-up requests first (closed loop, prompts 0..W-1 cycling, seed
indices past the measured ones), then M measured ones. Measured request i
uses prompt ``i mod len(prompts)`` and (open loop) the i-th arrival of a schedule fixed
by the seed, so every arm sees the same prompts in the same order at the same offsets.

``stop_when`` (adaptive stopping) sees each measured request as it completes; once it
returns True no new measured request is issued, and those in flight finish and are recorded.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specfleet.contract.prompts import PromptItem
from specfleet.measure.metrics import NS_PER_MS, NS_PER_S, measured_window_ns
from specfleet.results.records import RequestRecord
from specfleet_tasks.loadgen.client import REQUEST_FUNCS, RequestSettings, check_prompts
from specfleet_tasks.loadgen.endpoint import ServerEndpoint
from specfleet_tasks.loadgen.http import StreamClient

LAG_TICK_MS = 5.0


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """N requests always in flight."""

    concurrency: int


@dataclass(frozen=True, slots=True)
class PoissonArrivals:
    """Open loop: exponential inter-arrival gaps at ``rate_per_s``, fixed by ``seed``."""

    rate_per_s: float
    seed: int


Load = ClosedLoop | PoissonArrivals


@dataclass(frozen=True, slots=True)
class LoopLag:
    """How late the client's event loop woke a ``tick_ms`` ticker during the measured phase.

    A high p99 means the client itself, not the server, delayed timestamps and sends.
    An idle loop reads up to about 1 ms (asyncio rounds epoll timeouts up to whole ms).
    """

    tick_ms: float
    samples: int
    p99_ms: float | None
    max_ms: float | None


@dataclass(frozen=True, slots=True)
class LoadResult:
    records: list[RequestRecord]
    window_ns: tuple[int, int] | None
    loop_lag: LoopLag

    @property
    def duration_s(self) -> float:
        return (self.window_ns[1] - self.window_ns[0]) / NS_PER_S if self.window_ns else 0.0


Send = Callable[[int], Coroutine[object, object, RequestRecord]]
StopWhen = Callable[[RequestRecord], bool]


def poisson_offsets_ns(count: int, rate_per_s: float, seed: int) -> list[int]:
    """Send offsets from the start of the measured phase; the first request goes at 0."""
    gaps_s = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=count)
    offsets_s = np.concatenate(([0.0], np.cumsum(gaps_s[:-1]))) if count else gaps_s
    return [int(s * NS_PER_S) for s in offsets_s]


async def run_load(
    endpoint: ServerEndpoint,
    prompts: Sequence[PromptItem],
    settings: RequestSettings,
    load: Load,
    *,
    requests: int,
    warmup_requests: int,
    before_measured: Callable[[], Awaitable[None]] | None = None,
    stop_when: StopWhen | None = None,
) -> LoadResult:
    """Drive one cell: warm-up, then ``before_measured()`` (e.g. snapshot /metrics), then up to
    ``requests`` measured requests. Returns their records and the measured window.

    Environment proxies are ignored (a proxy would sit inside every measured latency). Paths
    join the endpoint's base URL as a prefix (``http://host/prefix`` serves
    ``http://host/prefix/v1/completions``).
    """
    check_prompts(list(prompts), settings.route)
    request = REQUEST_FUNCS[settings.route]
    pool = load.concurrency if isinstance(load, ClosedLoop) else None
    client = StreamClient(endpoint.base_url, endpoint.headers(), ssl_context=endpoint.ssl_context(),
                          connect_timeout_s=settings.connect_timeout_s)
    try:

        def sender(first_index: int) -> Send:
            """Request i takes prompt i (cycling) and record/seed index first_index + i."""
            def send(i: int) -> Coroutine[object, object, RequestRecord]:
                return request(client, endpoint.model, prompts[i % len(prompts)], settings, first_index + i)
            return send

        if warmup_requests:
            await _closed_loop(sender(requests), warmup_requests, pool or warmup_requests)
        if before_measured is not None:
            await before_measured()
        measured = sender(0)
        stop = asyncio.Event()
        lags_ns: list[int] = []
        ticker = asyncio.create_task(_tick(LAG_TICK_MS, lags_ns, stop))
        try:
            if isinstance(load, ClosedLoop):
                records = await _closed_loop(measured, requests, load.concurrency, stop_when)
            else:
                offsets_ns = poisson_offsets_ns(requests, load.rate_per_s, load.seed)
                records = await _open_loop(measured, offsets_ns, stop_when)
        finally:
            stop.set()
            await ticker
    finally:
        await client.aclose()
    return LoadResult(records=records, window_ns=measured_window_ns(records), loop_lag=_lag(lags_ns))


class _Stop:
    """Set once ``stop_when`` says so; never asks again after that."""

    def __init__(self, stop_when: StopWhen | None) -> None:
        self.stop_when = stop_when
        self.stopped = False

    def completed(self, record: RequestRecord) -> None:
        if self.stop_when is not None and not self.stopped:
            self.stopped = self.stop_when(record)

    def task_done(self, task: "asyncio.Task[RequestRecord]") -> None:
        if not task.cancelled() and task.exception() is None:
            self.completed(task.result())


async def _closed_loop(send: Send, count: int, concurrency: int,
                       stop_when: StopWhen | None = None) -> list[RequestRecord]:
    """``concurrency`` workers share one index iterator, so requests start in index order."""
    results: dict[int, RequestRecord] = {}
    indices = iter(range(count))
    stop = _Stop(stop_when)

    async def worker() -> None:
        for i in indices:
            results[i] = await send(i)
            stop.completed(results[i])
            if stop.stopped:
                return

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    return [results[i] for i in range(len(results))]


async def _open_loop(send: Send, offsets_ns: list[int], stop_when: StopWhen | None = None) -> list[RequestRecord]:
    """Start request i at start + offsets_ns[i], whether or not earlier ones finished."""
    start_ns = time.perf_counter_ns()
    tasks: list[asyncio.Task[RequestRecord]] = []
    stop = _Stop(stop_when)
    for i, offset_ns in enumerate(offsets_ns):
        delay_ns = start_ns + offset_ns - time.perf_counter_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / NS_PER_S)
        if stop.stopped:
            break
        tasks.append(asyncio.create_task(send(i)))
        tasks[-1].add_done_callback(stop.task_done)
    records = await asyncio.gather(*tasks)
    return [replace(r, scheduled_ns=start_ns + offset_ns)
            for r, offset_ns in zip(records, offsets_ns[:len(records)], strict=True)]


async def _tick(tick_ms: float, lags_ns: list[int], stop: asyncio.Event,
                clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
    """Sleep one tick at a time and record how late each wake came (``clock_ns`` is the
    clock the lateness is read on)."""
    tick_ns = int(tick_ms * NS_PER_MS)
    while not stop.is_set():
        due_ns = clock_ns() + tick_ns
        await asyncio.sleep(tick_ms / 1000.0)
        lags_ns.append(max(0, clock_ns() - due_ns))


def _lag(lags_ns: list[int]) -> LoopLag:
    if not lags_ns:
        return LoopLag(tick_ms=LAG_TICK_MS, samples=0, p99_ms=None, max_ms=None)
    values_ms = np.asarray(lags_ns, dtype=np.float64) / NS_PER_MS
    return LoopLag(tick_ms=LAG_TICK_MS, samples=len(lags_ns),
                   p99_ms=float(np.percentile(values_ms, 99)), max_ms=float(values_ms.max()))
