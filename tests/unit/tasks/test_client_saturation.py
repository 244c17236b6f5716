"""The client's self-check: a ticker measures how late the event loop wakes, and a cell whose
client lagged past the limit is flagged (and so left out of decisions)."""

import asyncio
import time

from specfleet.metrics import client_saturation
from tasks.loadgen.drivers import LAG_TICK_MS, _lag, _tick


async def _lags_while(block_s: float, blocks: int) -> list[int]:
    """Tick for a while, blocking the loop ``blocks`` times for ``block_s`` (a busy client)."""
    lags_ns: list[int] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_tick(LAG_TICK_MS, lags_ns, stop))
    for _ in range(blocks):
        await asyncio.sleep(0.02)
        time.sleep(block_s)
    await asyncio.sleep(0.05)
    stop.set()
    await ticker
    return lags_ns


def test_a_blocked_loop_shows_up_as_lag_and_flags_the_cell() -> None:
    lag = _lag(asyncio.run(_lags_while(0.15, 3)))
    assert lag.samples > 0 and lag.max_ms is not None and lag.max_ms >= 140
    assert lag.p99_ms is not None
    reason = client_saturation(lag.p99_ms, 50.0)
    assert reason is not None and reason.startswith("client saturated")


def test_an_idle_loop_is_not_flagged() -> None:
    lag = _lag(asyncio.run(_lags_while(0.0, 10)))
    assert client_saturation(lag.p99_ms, 250.0) is None  # the demo's limit, where the client shares 2 cores


def test_no_samples_is_no_verdict() -> None:
    assert _lag([]).p99_ms is None and client_saturation(None, 50.0) is None
    assert client_saturation(50.0, 50.0) is None and client_saturation(50.1, 50.0) is not None
