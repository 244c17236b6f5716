"""How much streaming load specfleet's Python client can ingest, and how true its clock is.

Drives ``tasks.loadgen.run_load`` against ``benchmarks/synthetic_stream_server.py`` (a
synthetic server for benchmarking the client only, never a vLLM stand-in) on 127.0.0.1,
at 64, 256 and 1024 concurrent streams:

- Unpaced: the server writes whole batches of events; the client's ingest rate in
  tokens/s, and its CPU time per token (user + sys of this process, a 3x run minus a
  1x run, so connection setup and fixed costs cancel).
- Paced (10 ms per token, one token per chunk): the client's per-chunk ITL against the
  pacing, and how far each client timestamp trails the server's write of that chunk.
  Both read CLOCK_MONOTONIC (``time.perf_counter_ns`` here, ``time.monotonic_ns`` there).

Prints markdown tables. Runs in well under three minutes; stops its servers.

    python benchmarks/loadgen_capacity.py
"""

import asyncio
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from specfleet.contract.workload import SamplingSpec
from specfleet.metrics import NS_PER_MS, itl_per_chunk_series_ms
from specfleet.prompts import PromptItem
from tasks.loadgen import ClosedLoop, LoadResult, RequestSettings, run_load

SERVER = Path(__file__).with_name("synthetic_stream_server.py")
STREAMS = (64, 256, 1024)
UNPACED_TOKENS = 256
PACED_TOKENS = 100
PACED_MS_PER_TOKEN = 10.0
REQUEST_TIMEOUT_S = 60.0
STAGE_TIMEOUT_S = 50.0


@contextmanager
def synthetic_server(*options: str) -> Iterator[str]:
    """Start the server on a free loopback port; yield its base URL; always stop it."""
    process = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *options],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"synthetic server did not start (said {line!r})")
        yield "http://" + line.removeprefix("listening on ").strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _settings(max_tokens: int) -> RequestSettings:
    return RequestSettings(endpoint="completions", model="synthetic", max_tokens=max_tokens, ignore_eos=True,
                           sampling=SamplingSpec(), timeout_s=REQUEST_TIMEOUT_S)


def _prompts(count: int) -> list[PromptItem]:
    return [PromptItem(id=f"r{i}", prompt=f"r{i}") for i in range(count)]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _errors(result: LoadResult) -> int:
    return sum(1 for r in result.records if not r.ok)


def _lag(result: LoadResult) -> str:
    lag = result.loop_lag
    return f"{lag.p99_ms or 0:.1f} / {lag.max_ms or 0:.1f}"


@dataclass(frozen=True)
class Measured:
    result: LoadResult
    cpu_s: float
    tokens: int


async def _measured_run(base_url: str, streams: int, requests: int) -> Measured:
    """CPU time from the end of warm-up (all connections open) to the end of the run."""
    cpu_at_start: list[float] = []

    async def mark() -> None:
        cpu_at_start.append(_cpu_s())

    result = await asyncio.wait_for(run_load(
        base_url, _prompts(requests), _settings(UNPACED_TOKENS), ClosedLoop(streams),
        requests=requests, warmup_requests=streams, before_measured=mark), STAGE_TIMEOUT_S)
    tokens = sum(r.streamed_tokens for r in result.records)
    return Measured(result, _cpu_s() - cpu_at_start[0], tokens)


async def unpaced_row(base_url: str, streams: int) -> str:
    small = await _measured_run(base_url, streams, streams)
    large = await _measured_run(base_url, streams, 3 * streams)
    cpu_us_per_token = (large.cpu_s - small.cpu_s) / (large.tokens - small.tokens) * 1e6
    tokens_per_s = large.tokens / large.result.duration_s
    errors = _errors(small.result) + _errors(large.result)
    return (f"| {streams} | {large.tokens:,} | {tokens_per_s:,.0f} | {cpu_us_per_token:.1f} "
            f"| {_lag(large.result)} | {errors} |")


async def paced_row(base_url: str, streams: int) -> str:
    async with httpx.AsyncClient(base_url=base_url) as control:

        cpu_at_start: list[float] = []

        async def clear_send_log() -> None:
            (await control.get("/send_log")).raise_for_status()
            cpu_at_start.append(_cpu_s())

        result = await asyncio.wait_for(run_load(
            base_url, _prompts(streams), _settings(PACED_TOKENS), ClosedLoop(streams),
            requests=streams, warmup_requests=streams, before_measured=clear_send_log), STAGE_TIMEOUT_S)
        cpu_us_per_chunk = (_cpu_s() - cpu_at_start[0]) / sum(len(r.chunk_ns) for r in result.records) * 1e6
        send_log_ns: dict[str, list[int]] = (await control.get("/send_log")).json()
    server_gaps_ms = [float(g) / NS_PER_MS for sends in send_log_ns.values() for g in np.diff(sends)]
    delays_ms = [(arrival - sent) / NS_PER_MS for r in result.records if r.ok
                 for arrival, sent in zip(r.chunk_ns, send_log_ns.get(r.prompt_id, []), strict=False)]
    itl = np.percentile(itl_per_chunk_series_ms(result.records), [50, 99])
    server = np.percentile(server_gaps_ms, [50, 99])
    delay = np.percentile(delays_ms, [50, 99, 100])
    return (f"| {streams} | {streams * 1000 / PACED_MS_PER_TOKEN:,.0f} | {itl[0]:.2f} / {itl[1]:.2f} "
            f"| {server[0]:.2f} / {server[1]:.2f} | {delay[0]:.2f} / {delay[1]:.2f} / {delay[2]:.2f} "
            f"| {cpu_us_per_chunk:.0f} | {_lag(result)} | {_errors(result)} |")


async def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    print(f"Unpaced server, {UNPACED_TOKENS} tokens per stream, 1 token per chunk, 64 chunks per write; "
          "1x then 3x requests per stream count.\n")
    print("| streams | tokens (3x run) | client tokens/s | client CPU µs/token | loop lag p99 / max ms "
          "| errors |\n|---|---|---|---|---|---|")
    with synthetic_server("--ms-per-token", "0", "--chunks-per-write", "64") as base_url:
        for streams in STREAMS:
            print(await unpaced_row(base_url, streams), flush=True)
    print(f"\nPaced server, {PACED_MS_PER_TOKEN:g} ms per token, 1 token per chunk, {PACED_TOKENS} tokens "
          "per stream; one request per stream.\n")
    print("| streams | chunks/s offered | client ITL p50 / p99 ms | server send gap p50 / p99 ms "
          "| client stamp - server send p50 / p99 / max ms | client CPU µs/chunk | loop lag p99 / max ms "
          "| errors |\n|---|---|---|---|---|---|---|---|")
    with synthetic_server("--ms-per-token", str(PACED_MS_PER_TOKEN), "--tokens-per-chunk", "1") as base_url:
        for streams in STREAMS:
            print(await paced_row(base_url, streams), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
