"""The client's self-check: a ticker measures how late the event loop wakes, and a cell whose
client lagged past the limit is flagged (and so left out of decisions)."""

import asyncio
import time

from specfleet.measure.metrics import NS_PER_MS, client_saturation
from specfleet_tasks.loadgen.drivers import LAG_TICK_MS, _lag, _tick


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


class ScriptedWakes:
    """The ticker's clock, read once before each sleep and once after it: each wake comes
    exactly as late as the script says, and the ticker is stopped when the script ends. So the
    verdict on a loop does not depend on what else this machine is doing."""

    def __init__(self, late_ms: list[float], stop: asyncio.Event) -> None:
        self.late_ms, self.stop, self.now_ns, self.waking = list(late_ms), stop, 0, False

    def __call__(self) -> int:
        if self.waking:
            self.now_ns += int((LAG_TICK_MS + self.late_ms.pop(0)) * NS_PER_MS)
            if not self.late_ms:
                self.stop.set()
        self.waking = not self.waking
        return self.now_ns


async def _scripted(late_ms: list[float]) -> list[int]:
    lags_ns: list[int] = []
    stop = asyncio.Event()
    await _tick(LAG_TICK_MS, lags_ns, stop, clock_ns=ScriptedWakes(late_ms, stop))
    return lags_ns


def test_a_blocked_loop_shows_up_as_lag_and_flags_the_cell() -> None:
    """A real loop blocked on purpose: its wakes can only come later than the block, never earlier."""
    lag = _lag(asyncio.run(_lags_while(0.15, 3)))
    assert lag.samples > 0 and lag.max_ms is not None and lag.max_ms >= 140
    assert lag.p99_ms is not None
    reason = client_saturation(lag.p99_ms, 50.0)
    assert reason is not None and reason.startswith("client saturated")


def test_the_verdict_tells_a_blocked_loop_from_one_that_is_not() -> None:
    on_time = _lag(asyncio.run(_scripted([0.2] * 60)))
    assert on_time.samples == 60 and on_time.p99_ms == on_time.max_ms == 0.2
    assert client_saturation(on_time.p99_ms, 50.0) is None
    blocked = _lag(asyncio.run(_scripted([0.2] * 57 + [300.0] * 3)))
    assert blocked.samples == 60 and blocked.max_ms == 300.0
    assert blocked.p99_ms is not None and blocked.p99_ms > 50.0
    assert client_saturation(blocked.p99_ms, 50.0) == (
        f"client saturated: event-loop lag p99 {blocked.p99_ms:.1f} ms > 50 ms")
    once = _lag(asyncio.run(_scripted([0.2] * 199 + [300.0])))  # one late wake in 200 is under p99
    assert once.max_ms == 300.0 and client_saturation(once.p99_ms, 50.0) is None


def test_no_samples_is_no_verdict() -> None:
    assert _lag([]).p99_ms is None and client_saturation(None, 50.0) is None
    assert client_saturation(50.0, 50.0) is None and client_saturation(50.1, 50.0) is not None
