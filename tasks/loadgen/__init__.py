"""Load generation: a streaming OpenAI client and closed/open-loop drivers producing RequestRecords."""

from specfleet_tasks.loadgen.client import (
    REQUEST_FUNCS,
    ApiRoute,
    RequestSettings,
    request_chat,
    request_completion,
    route_for,
)
from specfleet_tasks.loadgen.drivers import (
    ClosedLoop,
    Load,
    LoadResult,
    LoopLag,
    PoissonArrivals,
    poisson_offsets_ns,
    run_load,
)
from specfleet_tasks.loadgen.endpoint import ServerEndpoint
from specfleet_tasks.loadgen.loop import run_async

__all__ = [
    "REQUEST_FUNCS", "ApiRoute", "ClosedLoop", "Load", "LoadResult", "LoopLag",
    "PoissonArrivals", "RequestSettings", "ServerEndpoint", "poisson_offsets_ns",
    "request_chat", "request_completion", "route_for", "run_async", "run_load",
]
