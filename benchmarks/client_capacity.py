"""specfleet's load client against vLLM's own (``vllm bench serve``), same run, same server.

Both clients stream from ``benchmarks/synthetic_stream_server.py`` (a synthetic server for
benchmarking clients only, never a vLLM stand-in) on 127.0.0.1. Each client run is its own
process (``benchmarks/clients.py``), so its CPU time is read exactly (``os.wait4``).

- Unpaced (the server writes 64 chunks per write, 256 tokens per stream), at 64, 256 and
  1024 concurrent streams: streamed tokens/s, and CPU (user + sys) per streamed token as a
  large run minus a one-round run, so start-up (vLLM's import alone is seconds) cancels.
  ``client CPU / wall`` near 1 means the client process, not the server, set the pace.
- Paced (10 ms per token, one token per chunk) at 64 and 256 streams: each client's
  per-chunk ITL p50 / p99 against the same percentiles of the server's own send gaps
  (CLOCK_MONOTONIC on both sides). At 1024 paced streams the server itself cannot keep
  10 ms on two shared cores, so that row would measure the server.

A client that cannot run gets null figures and its reason, never a number.

    python benchmarks/client_capacity.py
"""

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from specfleet.metrics import NS_PER_MS

HERE = Path(__file__).parent
SERVER = HERE / "synthetic_stream_server.py"
CLIENTS = HERE / "clients.py"
CLIENT_NAMES = ("specfleet", "vllm")
UNPACED_STREAMS = (64, 256, 1024)
PACED_STREAMS = (64, 256)
UNPACED_TOKENS = 256
PACED_TOKENS = 100
PACED_MS_PER_TOKEN = 10.0
LARGE_RUN_TOKENS = 1_000_000  # vLLM's start-up varies by about 1 s of CPU: 1 µs per token at this size
RUN_TIMEOUT_S = 180.0
OPEN_FILES = 4096


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


@dataclass(frozen=True)
class Run:
    """One client process: what it reported and the CPU it used; ``error`` instead when it failed."""

    figures: dict[str, float]
    cpu_s: float
    error: str | None = None

    @property
    def tokens(self) -> int:
        return int(self.figures.get("tokens", 0))


def run_client(client: str, base_url: str, streams: int, requests: int, tokens: int, tokenizer: Path) -> Run:
    with tempfile.TemporaryDirectory() as scratch:
        out, log = Path(scratch) / "out.json", Path(scratch) / "log.txt"
        command = [sys.executable, str(CLIENTS), client, base_url, str(streams), str(requests), str(tokens),
                   str(out), str(tokenizer)]
        with log.open("wb") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        while pid == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid == 0:
            process.kill()
            pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        cpu_s = usage.ru_utime + usage.ru_stime
        if process.returncode != 0 or not out.is_file():
            lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
            reason = lines[-1] if lines else f"exit status {process.returncode}"
            return Run({}, cpu_s, f"{client} client failed: {reason[:200]}")
        return Run(json.loads(out.read_text()), cpu_s)


@dataclass(frozen=True)
class Capacity:
    """One client at one stream count, unpaced: None figures when it could not run."""

    tokens_per_s: float | None
    cpu_us_per_token: float | None
    cpu_per_wall: float | None
    loop_lag_p99_ms: float | None
    error: str | None


def capacity(client: str, base_url: str, streams: int, tokenizer: Path) -> Capacity:
    rounds = max(2, math.ceil(LARGE_RUN_TOKENS / (streams * UNPACED_TOKENS)))
    small = run_client(client, base_url, streams, streams, UNPACED_TOKENS, tokenizer)
    large = run_client(client, base_url, streams, rounds * streams, UNPACED_TOKENS, tokenizer)
    error = small.error or large.error
    if error is None and (small.figures["errors"] or large.figures["errors"]):
        error = f"{client}: {int(small.figures['errors'] + large.figures['errors'])} failed requests"
    if error is not None:
        return Capacity(None, None, None, None, error)
    duration_s = large.figures["duration_s"]
    return Capacity(
        tokens_per_s=large.tokens / duration_s,
        cpu_us_per_token=(large.cpu_s - small.cpu_s) / (large.tokens - small.tokens) * 1e6,
        cpu_per_wall=(large.cpu_s - small.cpu_s) / duration_s,
        loop_lag_p99_ms=large.figures.get("loop_lag_p99_ms"),
        error=None,
    )


@dataclass(frozen=True)
class Accuracy:
    """Client ITL percentiles against the server's send-gap percentiles, paced."""

    server_p50_ms: float
    server_p99_ms: float
    client_p50_ms: float | None
    client_p99_ms: float | None
    error: str | None


def accuracy(client: str, base_url: str, streams: int, tokenizer: Path) -> Accuracy:
    with httpx.Client(base_url=base_url, trust_env=False) as control:
        control.get("/send_log").raise_for_status()  # clears the log
        run = run_client(client, base_url, streams, streams, PACED_TOKENS, tokenizer)
        send_log_ns: dict[str, list[int]] = control.get("/send_log").json()
    gaps_ms = np.concatenate([np.diff(np.asarray(s, dtype=np.int64)) for s in send_log_ns.values()]) / NS_PER_MS
    server = np.percentile(gaps_ms, [50, 99]) if gaps_ms.size else (math.nan, math.nan)
    if run.error is not None:
        return Accuracy(float(server[0]), float(server[1]), None, None, run.error)
    return Accuracy(float(server[0]), float(server[1]), run.figures["itl_p50_ms"], run.figures["itl_p99_ms"], None)


def tokenizer_dir(root: Path) -> Path:
    """A small byte-level BPE tokenizer for vLLM's random prompts (the synthetic server ignores them)."""
    from tasks.fixtures.tokenizer import save_tokenizer, train_tokenizer

    out = root / "tokenizer"
    save_tokenizer(train_tokenizer([f"token {i} of the synthetic prompt set" for i in range(200)], 400), out, 2048)
    return out


def _num(value: float | None, spec: str) -> str:
    return "null" if value is None else format(value, spec)


def capacity_table(rows: dict[int, dict[str, Capacity]]) -> Table:
    table = Table(title=f"Unpaced: {UNPACED_TOKENS} tokens per stream, 1 token per chunk, 64 chunks per write")
    for column in ("streams", "client", "tokens/s", "CPU µs/token", "client CPU / wall", "loop lag p99 ms"):
        table.add_column(column, justify="right")
    for streams, by_client in rows.items():
        for client, c in by_client.items():
            table.add_row(str(streams), client, _num(c.tokens_per_s, ",.0f"), _num(c.cpu_us_per_token, ".1f"),
                          _num(c.cpu_per_wall, ".2f"), _num(c.loop_lag_p99_ms, ".1f"))
    return table


def accuracy_table(rows: dict[int, dict[str, Accuracy]]) -> Table:
    table = Table(title=f"Paced: {PACED_MS_PER_TOKEN:g} ms per token, 1 token per chunk, {PACED_TOKENS} tokens "
                        "per stream; error = client ITL - server send gap")
    for column in ("streams", "client", "server gap p50 / p99 ms", "client ITL p50 / p99 ms", "error p50 / p99 ms"):
        table.add_column(column, justify="right")
    for streams, by_client in rows.items():
        for client, a in by_client.items():
            p50 = None if a.client_p50_ms is None else a.client_p50_ms - a.server_p50_ms
            p99 = None if a.client_p99_ms is None else a.client_p99_ms - a.server_p99_ms
            table.add_row(str(streams), client, f"{a.server_p50_ms:.2f} / {a.server_p99_ms:.2f}",
                          f"{_num(a.client_p50_ms, '.2f')} / {_num(a.client_p99_ms, '.2f')}",
                          f"{_num(p50, '+.2f')} / {_num(p99, '+.2f')}")
    return table


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < OPEN_FILES:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(OPEN_FILES, hard), hard))  # inherited by the clients
    console = Console(width=140)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = tokenizer_dir(Path(scratch))
        with synthetic_server("--ms-per-token", "0", "--chunks-per-write", "64") as base_url:
            unpaced = {s: {c: capacity(c, base_url, s, tokenizer) for c in CLIENT_NAMES} for s in UNPACED_STREAMS}
        with synthetic_server("--ms-per-token", str(PACED_MS_PER_TOKEN), "--tokens-per-chunk", "1") as base_url:
            paced = {s: {c: accuracy(c, base_url, s, tokenizer) for c in CLIENT_NAMES} for s in PACED_STREAMS}
    console.print(capacity_table(unpaced))
    console.print(accuracy_table(paced))
    errors = {r.error for row in unpaced.values() for r in row.values() if r.error}
    errors |= {r.error for row in paced.values() for r in row.values() if r.error}
    for error in sorted(errors):
        console.print(f"null: {error}")


if __name__ == "__main__":
    main()
