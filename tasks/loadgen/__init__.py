"""Load generation: a streaming OpenAI client, closed/open-loop drivers, record Parquet."""

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
from tasks.loadgen.parquet import (
    RECORDS_SCHEMA,
    frame_to_records,
    read_records_parquet,
    records_to_frame,
    write_records_parquet,
)

__all__ = [
    "REQUEST_FUNCS", "RECORDS_SCHEMA", "ClosedLoop", "Endpoint", "Load", "LoadResult", "LoopLag",
    "PoissonArrivals", "RequestSettings", "frame_to_records", "poisson_offsets_ns", "read_records_parquet",
    "records_to_frame", "request_chat", "request_completion", "run_load", "write_records_parquet",
]
