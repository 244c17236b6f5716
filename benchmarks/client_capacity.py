"""CPU per streamed token of ``specfleet measure`` (end to end), ``run_load`` and vLLM's client.

Every client streams from ``benchmarks/synthetic_stream_server.py`` (a synthetic server for
benchmarking clients only, never a vLLM stand-in) on 127.0.0.1, in each server mode:

- ``1 event/write``: one SSE event per socket write, one write on every stream per step, a
  step every 5 ms: how vLLM's API server streams (each engine step's delta is one write on
  every stream), so a client that keeps up reads about one event per read;
- ``32 events/write``: blocks of 32 events per write, steps back to back, faster than any
  Python client reads, so reads hold many events.

Clients, each run its own process so its CPU time (user + sys, ``os.wait4``) is its own:

- ``specfleet measure``: the command as a user runs it (the ``specfleet`` console script,
  ``--json``), start-up, endpoint check, streams, metrics and all;
- ``run_load``: specfleet's load driver alone (``benchmarks/clients.py``);
- ``vllm``: vLLM's own benchmark client, ``vllm.benchmarks.serve`` (``benchmarks/clients.py``).

CPU per token is (CPU of a large run - CPU of a one-round run) / (their token difference), so
start-up cancels (vLLM's import alone is seconds); the large run streams at least
``--large-tokens`` tokens. Each pair is run ``--runs`` times, interleaved.

ITL accuracy: a server paces each stream at 10 ms per token, one event per write, and logs the
CLOCK_MONOTONIC time of every write; each client's per-chunk ITL p99 is compared with the p99
of the server's own send gaps. Two independently written pacing servers: the synthetic server
(asyncio streams, its own chunk framing) and ``benchmarks/aiohttp_stream_server.py`` (a plain
aiohttp application, ``StreamResponse`` chunked encoding), so the accuracy is not one server's
write pattern's; the goal is an error no larger than vLLM's client's on each.

A client that cannot run gets null figures and its reason, never a number.

    python -m benchmarks.client_capacity [--streams 256] [--large-tokens 1000000] [--runs 2]
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.results_record import write_result
from specfleet.measure.metrics import NS_PER_MS

HERE = Path(__file__).parent
ROOT = HERE.parent
SERVER = HERE / "synthetic_stream_server.py"
AIOHTTP_SERVER = HERE / "aiohttp_stream_server.py"
CLIENTS = HERE / "clients.py"
MEASURE = "specfleet measure"
CLIENT_NAMES = (MEASURE, "run_load", "vllm")
SERVER_MODES = {
    "1 event/write": ("--chunks-per-write", "1", "--step-ms", "5"),
    "32 events/write": ("--chunks-per-write", "32", "--step-ms", "0"),
}
"""Server mode: the synthetic server's options (unpaced: a write per stream per step)."""
PACED_MODE = "1 event/write, 10 ms/token"
PACED_MS_PER_TOKEN = 10.0
PACING_SERVERS = {
    "synthetic": (SERVER, ("--ms-per-token", str(PACED_MS_PER_TOKEN), "--tokens-per-chunk", "1")),
    "aiohttp": (AIOHTTP_SERVER, ("--ms-per-token", str(PACED_MS_PER_TOKEN))),
}
"""Pacing server: its script and options."""
TOKENS_PER_STREAM = 128
PACED_STREAMS = (64, 256)
PACED_TOKENS = 100
GOAL_RATIO = 1 / 1.5
RUN_TIMEOUT_S = 300.0
OPEN_FILES = 4096


@contextmanager
def stream_server(script: Path, *options: str) -> Iterator[str]:
    """Start a benchmark server on a free loopback port; yield its base URL; always stop it."""
    process = subprocess.Popen([sys.executable, str(script), "--port", "0", *options],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"{script.name} did not start (said {line!r})")
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


def cpu_us_per_token(small: Run, large: Run) -> float:
    """(large CPU - small CPU) / (large tokens - small tokens), in µs: start-up cancels."""
    return (large.cpu_s - small.cpu_s) / (large.tokens - small.tokens) * 1e6


def measure_figures(result: dict[str, object], max_tokens: int) -> dict[str, float]:
    """``specfleet measure --json`` in the figures ``clients.py`` reports. Tokens are completed
    requests x ``max_tokens``: the command's own token accounting (reasons) must be clean."""
    reasons = result["reasons"]
    assert isinstance(reasons, list)
    accounting = [r for r in reasons if str(r).startswith("token accounting")]
    if accounting:
        raise ValueError(accounting[0])
    completed, tokens_per_s, itl = result["completed"], result["output_tokens_per_s"], result["itl_ms"]
    assert isinstance(completed, int) and isinstance(tokens_per_s, float) and isinstance(itl, dict)
    tokens = completed * max_tokens
    lag = result["client_lag_p99_ms"]
    return {"tokens": tokens, "duration_s": tokens / tokens_per_s, "itl_p50_ms": itl["p50"], "itl_p99_ms": itl["p99"],
            "errors": float(result["failed"]),  # type: ignore[arg-type]
            "loop_lag_p99_ms": float(lag) if isinstance(lag, int | float) else math.nan}


def _measure_command(base_url: str, streams: int, requests: int, tokens: int, prompts: Path) -> list[str]:
    """The console script beside this interpreter, as a user runs it (``python -c`` where there is none)."""
    script = Path(sys.executable).with_name("specfleet")
    entry = "from specfleet_cli.main import entry; entry()"
    head = [str(script)] if script.is_file() else [sys.executable, "-c", entry]
    return [*head, "measure", "--endpoint", base_url, "--model", "synthetic", "--prompts", str(prompts),
            "--concurrency", str(streams), "--requests", str(requests), "--warmup", "0",
            "--max-tokens", str(tokens), "--json"]


def run_client(client: str, base_url: str, streams: int, requests: int, tokens: int, scratch: Path) -> Run:
    out, log = scratch / "out.json", scratch / "log.txt"
    out.unlink(missing_ok=True)
    if client == MEASURE:
        command = _measure_command(base_url, streams, requests, tokens, scratch / "prompts.jsonl")
    else:
        kind = "specfleet" if client == "run_load" else client
        command = [sys.executable, str(CLIENTS), kind, base_url, str(streams), str(requests), str(tokens),
                   str(out), str(scratch / "tokenizer")]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log.open("wb") as sink:  # measure's JSON comes on stdout (far under a pipe's buffer)
        process = subprocess.Popen(command, stdout=subprocess.PIPE if client == MEASURE else sink, stderr=sink,
                                   env=env, cwd=ROOT)
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
    if process.stdout is not None:
        text = process.stdout.read().decode(errors="replace")
        process.stdout.close()
    else:
        text = out.read_text() if out.is_file() else ""
    if process.returncode != 0 or not text.strip():
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
        reason = lines[-1] if lines else f"exit status {process.returncode}"
        return Run({}, cpu_s, f"{client} failed: {reason[:200]}")
    try:
        figures = measure_figures(json.loads(text), tokens) if client == MEASURE else json.loads(text)
    except (ValueError, KeyError, AssertionError) as err:
        return Run({}, cpu_s, f"{client}: unusable output ({str(err)[:200]})")
    return Run(figures, cpu_s)


@dataclass(frozen=True)
class Capacity:
    """One client, one server mode, one small/large pair: None figures when it could not run."""

    cpu_us_per_token: float | None
    tokens_per_s: float | None
    cpu_per_wall: float | None
    loop_lag_p99_ms: float | None
    error: str | None


def capacity(client: str, base_url: str, streams: int, large_tokens: int, scratch: Path) -> Capacity:
    rounds = max(2, math.ceil(large_tokens / (streams * TOKENS_PER_STREAM)))
    small = run_client(client, base_url, streams, streams, TOKENS_PER_STREAM, scratch)
    large = run_client(client, base_url, streams, rounds * streams, TOKENS_PER_STREAM, scratch)
    error = small.error or large.error
    if error is None and (small.figures["errors"] or large.figures["errors"]):
        error = f"{client}: {int(small.figures['errors'] + large.figures['errors'])} failed requests"
    if error is not None:
        return Capacity(None, None, None, None, error)
    duration_s = large.figures["duration_s"]
    lag = large.figures.get("loop_lag_p99_ms")
    return Capacity(
        cpu_us_per_token=cpu_us_per_token(small, large),
        tokens_per_s=large.tokens / duration_s,
        cpu_per_wall=(large.cpu_s - small.cpu_s) / duration_s,
        loop_lag_p99_ms=None if lag is None or math.isnan(lag) else lag,
        error=None,
    )


@dataclass(frozen=True)
class Accuracy:
    """Client ITL p99 against the server's send-gap p99, paced."""

    server_p99_ms: float
    client_p99_ms: float | None
    error: str | None

    @property
    def error_p99_ms(self) -> float | None:
        return None if self.client_p99_ms is None else self.client_p99_ms - self.server_p99_ms


def accuracy(client: str, base_url: str, streams: int, scratch: Path) -> Accuracy:
    with httpx.Client(base_url=base_url, trust_env=False) as control:
        control.get("/send_log").raise_for_status()  # clears the log
        run = run_client(client, base_url, streams, streams, PACED_TOKENS, scratch)
        send_log_ns: dict[str, list[int]] = control.get("/send_log").json()
    gaps = [np.diff(np.asarray(s, dtype=np.int64)) for s in send_log_ns.values()]
    gaps_ms = np.concatenate(gaps) / NS_PER_MS if gaps else np.array([])
    server_p99 = float(np.percentile(gaps_ms, 99)) if gaps_ms.size else math.nan
    if run.error is not None:
        return Accuracy(server_p99, None, run.error)
    return Accuracy(server_p99, run.figures["itl_p99_ms"], None)


def prepare(scratch: Path, requests: int) -> None:
    """A prompt file with one distinct prompt per request (the paced server logs sends per prompt)
    and a small tokenizer for vLLM's random prompts (the synthetic server ignores both)."""
    from specfleet_tasks.fixtures.tokenizer import save_tokenizer, train_tokenizer

    lines = (json.dumps({"id": f"r{i}", "prompt": f"r{i}"}) for i in range(requests))
    (scratch / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    save_tokenizer(train_tokenizer([f"token {i} of the synthetic prompt set" for i in range(200)], 400),
                   scratch / "tokenizer", 2048)


def _num(value: float | None, spec: str) -> str:
    return "null" if value is None else format(value, spec)


def verdict(measure: Sequence[float | None], vllm: Sequence[float | None]) -> str:
    """Whether ``specfleet measure`` spent at most 1/1.5 of vLLM's CPU per token, run by run."""
    ratios = [None if m is None or v is None else m / v for m, v in zip(measure, vllm, strict=True)]
    if any(r is None for r in ratios):
        return "not measured (a client failed)"
    shown = ", ".join(f"{r:.2f}" for r in ratios if r is not None)
    missed = [r for r in ratios if r is not None and r > GOAL_RATIO]
    if not missed:
        return f"met: measure / vLLM = {shown} (goal <= {GOAL_RATIO:.3f})"
    return f"missed in {len(missed)} of {len(ratios)} runs: measure / vLLM = {shown} (goal <= {GOAL_RATIO:.3f})"


def accuracy_verdict(measure: Sequence[float | None], vllm: Sequence[float | None]) -> str:
    """Whether ``specfleet measure``'s ITL p99 error is no larger than vLLM's client's (by size: a
    client may read gaps longer or shorter than the server wrote), on the median over the runs:
    the clients run one after the other, so a run where the shared machine stalled one of them
    (the server's own gaps show it) is one run, not the verdict. The runs that were worse are
    named, with by how much."""
    pairs = list(zip(measure, vllm, strict=True))
    if not pairs or any(m is None or v is None for m, v in pairs):
        return "not measured (a client failed)"
    sizes = [(abs(m), abs(v)) for m, v in pairs if m is not None and v is not None]
    median_m, median_v = float(np.median([m for m, _ in sizes])), float(np.median([v for _, v in sizes]))
    worse = [m - v for m, v in sizes if m > v]
    runs = f"worse in {len(worse)} of {len(sizes)} runs" + (f", by up to {max(worse):.2f} ms" if worse else "")
    met = "met" if median_m <= median_v else f"missed by {median_m - median_v:.2f} ms"
    return f"{met}: median |error| p99 {median_m:.2f} ms against vLLM's {median_v:.2f} ms ({runs})"


def capacity_table(rows: dict[str, dict[str, list[Capacity]]], streams: int) -> Table:
    table = Table(title=f"CPU per streamed token: {streams} streams, {TOKENS_PER_STREAM} tokens each, "
                        "1 token per event; large run - one-round run")
    for column in ("server mode", "client", "CPU µs/token (each run)", "tokens/s", "client CPU / wall",
                   "loop lag p99 ms"):
        table.add_column(column, justify="right")
    for mode, by_client in rows.items():
        for client, runs in by_client.items():
            table.add_row(mode, client, " / ".join(_num(c.cpu_us_per_token, ".2f") for c in runs),
                          " / ".join(_num(c.tokens_per_s, ",.0f") for c in runs),
                          " / ".join(_num(c.cpu_per_wall, ".2f") for c in runs),
                          " / ".join(_num(c.loop_lag_p99_ms, ".0f") for c in runs))
    return table


def accuracy_table(rows: dict[tuple[str, int], dict[str, list[Accuracy]]]) -> Table:
    table = Table(title=f"ITL p99 at {PACED_MS_PER_TOKEN:g} ms pacing ({PACED_MODE}, {PACED_TOKENS} tokens per "
                        "stream); error = client ITL p99 - server send-gap p99")
    for column in ("pacing server", "streams", "client", "server gap p99 ms (each run)", "client ITL p99 ms",
                   "error p99 ms"):
        table.add_column(column, justify="right")
    for (server, streams), by_client in rows.items():
        for client, runs in by_client.items():
            table.add_row(server, str(streams), client, " / ".join(f"{a.server_p99_ms:.2f}" for a in runs),
                          " / ".join(_num(a.client_p99_ms, ".2f") for a in runs),
                          " / ".join(_num(a.error_p99_ms, "+.2f") for a in runs))
    return table


def record(unpaced: dict[str, dict[str, list[Capacity]]], paced: dict[tuple[str, int], dict[str, list[Accuracy]]],
           verdicts: Sequence[str]) -> None:
    """This run's medians as a benchmark result (``benchmarks/results/client_capacity/``)."""
    def median(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return float(np.median(known)) if known and len(known) == len(values) else None

    figures = {f"{client}_cpu_us_per_token_{mode}": median([c.cpu_us_per_token for c in runs])
               for mode, by_client in unpaced.items() for client, runs in by_client.items()}
    figures |= {f"{client}_itl_p99_abs_error_ms_{server}_{streams}": median(
                    [None if a.error_p99_ms is None else abs(a.error_p99_ms) for a in runs])
                for (server, streams), by_client in paced.items() for client, runs in by_client.items()}
    write_result("client_capacity", f"{MEASURE} spends at most 1/1.5 of vLLM's client's CPU per token in every "
                 "server mode, and its median ITL p99 error is no worse than vLLM's client's on every pacing server",
                 all(v.startswith("met") for v in verdicts) if verdicts else None, figures,
                 note="; ".join(verdicts))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=256, help="concurrent streams, unpaced")
    parser.add_argument("--large-tokens", type=int, default=1_000_000, help="tokens in the large run, at least")
    parser.add_argument("--runs", type=int, default=2, help="small/large pairs per client and mode")
    parser.add_argument("--clients", nargs="+", default=list(CLIENT_NAMES), choices=CLIENT_NAMES)
    parser.add_argument("--modes", nargs="*", default=list(SERVER_MODES), choices=list(SERVER_MODES),
                        help="unpaced server modes; none: the ITL accuracy runs only")
    parser.add_argument("--no-paced", action="store_true", help="skip the ITL accuracy runs")
    parser.add_argument("--pacing-servers", nargs="+", default=list(PACING_SERVERS), choices=list(PACING_SERVERS))
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < OPEN_FILES:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(OPEN_FILES, hard), hard))  # inherited by the clients
    console = Console(width=160)
    unpaced: dict[str, dict[str, list[Capacity]]] = {m: {c: [] for c in args.clients} for m in args.modes}
    paced: dict[tuple[str, int], dict[str, list[Accuracy]]] = {
        (server, s): {c: [] for c in args.clients} for server in args.pacing_servers for s in PACED_STREAMS}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        prepare(scratch, max(PACED_STREAMS))
        for _ in range(args.runs):
            for mode in args.modes:
                with stream_server(SERVER, "--ms-per-token", "0", *SERVER_MODES[mode]) as url:
                    for client in args.clients:
                        unpaced[mode][client].append(capacity(client, url, args.streams, args.large_tokens, scratch))
            if args.no_paced:
                continue
            for server in args.pacing_servers:
                script, options = PACING_SERVERS[server]
                with stream_server(script, *options) as url:
                    for streams in PACED_STREAMS:
                        for client in args.clients:
                            paced[server, streams][client].append(accuracy(client, url, streams, scratch))
    console.print(capacity_table(unpaced, args.streams))
    verdicts: list[str] = []
    if MEASURE in args.clients and "vllm" in args.clients:
        for mode, by_client in unpaced.items():
            verdicts.append(verdict([c.cpu_us_per_token for c in by_client[MEASURE]],
                                    [c.cpu_us_per_token for c in by_client["vllm"]]))
            console.print(f"{mode}: {verdicts[-1]}")
    if not args.no_paced:
        console.print(accuracy_table(paced))
        if MEASURE in args.clients and "vllm" in args.clients:
            for (server, streams), accuracies in paced.items():
                verdicts.append(accuracy_verdict([a.error_p99_ms for a in accuracies[MEASURE]],
                                                 [a.error_p99_ms for a in accuracies["vllm"]]))
                console.print(f"ITL p99 error, {server} server, {streams} streams: {verdicts[-1]}")
    record(unpaced, paced, verdicts)
    errors = {c.error for row in unpaced.values() for runs in row.values() for c in runs if c.error}
    errors |= {a.error for row in paced.values() for runs in row.values() for a in runs if a.error}
    for error in sorted(errors):
        console.print(f"null: {error}")


if __name__ == "__main__":
    main()
