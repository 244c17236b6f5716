"""A seeded simulation of continuous batching (vLLM-like) that emits request records.

The engine runs one step after another. Before each step it admits waiting requests in
arrival order while fewer than ``max_num_seqs`` run and the KV pool holds every running
request's whole length, prompt and output (a reservation: vLLM allocates blocks as sequences
grow and preempts when they run out, which the model does not; a request that does not fit an
empty engine is admitted anyway); admitted requests prefill in that step and stream their first token at its
end. Every running request decodes once per step: with speculation it drafts with probability
``draft_rate``, and a draft's accepted prefix reaches position i with probability a_i (the
measured per-position acceptance), so it emits 1 + accepted tokens, never past its output
length. Step time is the fitted linear law of the step's batch, times a multiplicative jitter
drawn from the calibration's measured gap ratios.

Load: a closed loop (N clients, each sending its next request when the previous one ends, all
N sent at once at the start, as the load client does) or Poisson arrivals at a rate. A sent
request reaches the scheduler after the API server has handled it: one server, first come
first served, ``overhead_ms`` per request (HTTP, parsing, tokenization; fitted to TTFT), so
requests sent together reach the engine one after another, as the stored cells show.

What it returns are ``RequestRecord`` objects stamped in integer nanoseconds, so
``specfleet.measure.metrics`` computes the predicted TTFT, ITL, TPOT, E2E, throughput and SLO figures
with the very code that computes the measured ones.
"""

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from specfleet.measure.metrics import NS_PER_MS
from specfleet.perfmodel.step_time import LinearStep, StepBatch
from specfleet.results.records import RequestRecord

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class RequestShape:
    prompt_id: str
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Speculation:
    """What a speculative arm does per decode step (None in ``simulate`` for the baseline)."""

    k: int
    per_position: tuple[float, ...]
    """a_1 .. a_k: the share of drafts whose accepted prefix reaches each position (non-increasing)."""
    draft_rate: float
    proposed_share: float = 1.0


@dataclass(frozen=True, slots=True)
class ClosedLoad:
    concurrency: int


@dataclass(frozen=True, slots=True)
class PoissonLoad:
    rate_per_s: float


SimLoad = ClosedLoad | PoissonLoad


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_num_seqs: int
    kv_tokens: int | None = None


@dataclass(frozen=True)
class Simulated:
    records: list[RequestRecord]
    mean_batch: StepBatch
    """The mean over the simulated steps (the law is linear, so its time is the mean step time)."""
    steps: int
    max_decode_seqs: int
    kv_limited_steps: int = 0
    """Steps where a waiting request was held back by the KV pool."""
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Request:
    index: int
    shape: RequestShape
    send_ms: float
    ready_ms: float
    emitted: int = 0
    chunks_ms: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)

    @property
    def context(self) -> int:
        return self.shape.prompt_tokens + self.emitted

    @property
    def done(self) -> bool:
        return self.emitted >= self.shape.output_tokens

    def emit(self, t_ms: float, tokens: int) -> None:
        tokens = min(tokens, self.shape.output_tokens - self.emitted)
        self.emitted += tokens
        self.chunks_ms.append(t_ms)
        self.chunk_tokens.append(tokens)

    def record(self) -> RequestRecord:
        chunk_ns = tuple(int(round(t * NS_PER_MS)) for t in self.chunks_ms)
        return RequestRecord(
            index=self.index, prompt_id=self.shape.prompt_id, send_ns=int(round(self.send_ms * NS_PER_MS)),
            chunk_ns=chunk_ns, chunk_tokens=tuple(self.chunk_tokens), end_ns=chunk_ns[-1] if chunk_ns else None,
            prompt_tokens=self.shape.prompt_tokens, usage_completion_tokens=self.emitted, finish_reason="length",
            max_tokens=self.shape.output_tokens)


def poisson_sends_ms(count: int, rate_per_s: float, rng: np.random.Generator) -> list[float]:
    """Send times from the start, the first at 0 (as the load client's schedule)."""
    gaps = rng.exponential(1000.0 / rate_per_s, size=count)
    return [0.0, *np.cumsum(gaps[:-1]).tolist()] if count else []


def simulate(
    law: LinearStep,
    method: str,
    shapes: Sequence[RequestShape],
    load: SimLoad,
    limits: EngineLimits,
    speculation: Speculation | None,
    *,
    requests: int,
    overhead_ms: float,
    rng: np.random.Generator,
    jitter: FloatArray | None = None,
    by_batch: Callable[[int], tuple[LinearStep, Speculation | None]] | None = None,
) -> Simulated:
    """Simulate ``requests`` requests of ``shapes`` (cycled in order) under ``load``. ``by_batch``: a
    k per step (vLLM's ``num_speculative_tokens_per_batch_size``, looked up by the requests the step
    schedules, as its scheduler does): that k's law and speculation, in place of ``law`` and
    ``speculation``."""
    if not shapes:
        raise ValueError("no request shapes to simulate")
    if requests < 1:
        raise ValueError(f"requests must be positive (got {requests})")
    k = speculation.k if speculation else 0
    pending: deque[_Request] = deque()
    closed = isinstance(load, ClosedLoad)
    next_index = 0
    server_free_ms = 0.0

    def send(at_ms: float) -> None:
        nonlocal next_index, server_free_ms
        server_free_ms = max(at_ms, server_free_ms) + overhead_ms
        pending.append(_Request(next_index, shapes[next_index % len(shapes)], at_ms, server_free_ms))
        next_index += 1

    if isinstance(load, ClosedLoad):
        for _ in range(min(load.concurrency, requests)):
            send(0.0)
    else:
        for at in poisson_sends_ms(requests, load.rate_per_s, rng):
            send(at)
    done: list[_Request] = []
    running: list[_Request] = []
    t = 0.0
    steps = kv_limited = max_decode = 0
    sums = np.zeros(4)
    while len(done) < requests:
        if not running and (not pending or pending[0].ready_ms > t):
            if not pending:
                raise RuntimeError("simulation stalled: nothing running and nothing to send")
            t = max(t, pending[0].ready_ms)
        admitted: list[_Request] = []
        in_use = sum(r.shape.prompt_tokens + r.shape.output_tokens for r in running)
        while pending and pending[0].ready_ms <= t and len(running) + len(admitted) < limits.max_num_seqs:
            candidate = pending[0]
            need = candidate.shape.prompt_tokens + candidate.shape.output_tokens
            if limits.kv_tokens is not None and in_use + need > limits.kv_tokens and (running or admitted):
                kv_limited += 1
                break
            admitted.append(pending.popleft())
            in_use += need
        decoding = len(running)
        step_law, spec = (law, speculation) if by_batch is None else by_batch(decoding + len(admitted))
        k = max(k, spec.k if spec else 0)
        reach = np.asarray(spec.per_position if spec else (), dtype=np.float64)
        prefill = sum(r.shape.prompt_tokens for r in admitted)
        context = sum(r.context for r in running)
        drafted = np.zeros(decoding, dtype=bool)
        if spec is not None and decoding:
            drafted = rng.random(decoding) < spec.draft_rate
        draft_tokens = float(drafted.sum()) * (spec.k * spec.proposed_share if spec else 0.0)
        step = step_law(decoding, prefill, context, draft_tokens)
        if jitter is not None and jitter.size:
            step *= float(jitter[rng.integers(jitter.size)])
        t += max(step, 0.0)
        steps += 1
        max_decode = max(max_decode, decoding)
        sums += (decoding, prefill, context, draft_tokens)
        accepted = np.zeros(decoding, dtype=np.int64)
        if spec is not None and decoding and reach.size:
            u = rng.random(decoding)
            accepted = np.where(drafted, (u[:, None] < reach[None, :]).sum(axis=1), 0)
        still: list[_Request] = []
        for r, extra in zip(running, accepted.tolist(), strict=True):
            r.emit(t, 1 + int(extra))
            (done if r.done else still).append(r)
            if r.done and closed and next_index < requests:
                send(t)
        for r in admitted:
            r.emit(t, 1)
            (done if r.done else still).append(r)
            if r.done and closed and next_index < requests:
                send(t)
        running = still
    mean = sums / max(steps, 1)
    return Simulated(
        records=[r.record() for r in sorted(done, key=lambda r: r.index)],
        mean_batch=StepBatch(method=method, k=k, decode_seqs=float(mean[0]), prefill_tokens=float(mean[1]),
                             context_tokens=float(mean[2]), draft_tokens=float(mean[3])),
        steps=steps, max_decode_seqs=max_decode, kv_limited_steps=kv_limited,
    )


def simulate_cells(run: Callable[[int], Simulated], requests: int, cell_requests: int) -> Simulated:
    """About ``requests`` requests simulated as a sweep measures them: cells of ``cell_requests``
    each, every one started on an idle engine (the load client sends a closed-loop cell's first N at
    once and the last ones drain at a smaller batch), laid end to end. A cell of 12 requests at
    concurrency 8 runs its last 4 at half the batch and starts with 8 prefills queued: a long run's
    steady state would overstate its throughput (issue 32, the wide dense benchmark)."""
    cells = [run(cell_requests) for _ in range(max(1, round(requests / cell_requests)))]
    records: list[RequestRecord] = []
    start_ns = 0
    for cell in cells:
        shift = start_ns - min(r.send_ns for r in cell.records)
        for r in cell.records:
            records.append(replace(r, index=len(records), send_ns=r.send_ns + shift,
                                   chunk_ns=tuple(t + shift for t in r.chunk_ns),
                                   end_ns=None if r.end_ns is None else r.end_ns + shift))
        start_ns = max(r.end_ns if r.end_ns is not None else r.send_ns for r in records)
    steps = sum(c.steps for c in cells)

    def mean(value: Callable[[StepBatch], float]) -> float:
        return sum(value(c.mean_batch) * c.steps for c in cells) / max(steps, 1)

    first = cells[0].mean_batch
    return Simulated(
        records=records,
        mean_batch=StepBatch(method=first.method, k=first.k, decode_seqs=mean(lambda b: b.decode_seqs),
                             prefill_tokens=mean(lambda b: b.prefill_tokens),
                             context_tokens=mean(lambda b: b.context_tokens),
                             draft_tokens=mean(lambda b: b.draft_tokens)),
        steps=steps, max_decode_seqs=max(c.max_decode_seqs for c in cells),
        kv_limited_steps=sum(c.kv_limited_steps for c in cells),
        notes=list(dict.fromkeys(n for c in cells for n in c.notes)),
    )
