"""Load generation: a streaming OpenAI client and closed/open-loop drivers producing RequestRecords."""

from tasks.loadgen.client import REQUEST_FUNCS, Endpoint, RequestSettings, request_chat, request_completion
from tasks.loadgen.drivers import (
    ClosedLoop,
    Load,
    LoadResult,
    LoopLag,
    PoissonArrivals,
    poisson_offsets_ns,
    run_load,
)

__all__ = [
    "REQUEST_FUNCS", "ClosedLoop", "Endpoint", "Load", "LoadResult", "LoopLag",
    "PoissonArrivals", "RequestSettings", "poisson_offsets_ns",
    "request_chat", "request_completion", "run_load",
]
