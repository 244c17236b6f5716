"""The event loop every load runs on: uvloop's (libuv, as vLLM's own API server runs), not asyncio's.

Why: the client's CPU per streamed token is what bounds how much load one process can measure
on a small machine; on uvloop ``run_load`` spent about a tenth to a third less per token than on
asyncio's loop (docs/benchmarks.md, "Client capacity"). Its timers have millisecond resolution,
so the loop-lag ticker and open-loop arrivals wake within about a millisecond of when they are
due; every time a record holds is read from ``time.perf_counter_ns``, never from the loop.
"""

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh uvloop event loop."""
    return uvloop.run(main)
