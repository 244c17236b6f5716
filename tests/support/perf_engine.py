"""A synthetic engine whose true step time and acceptance are known, for the performance model's tests.

Written apart from ``specfleet.perfmodel.batching`` on purpose (a fit checked against its own
simulator would prove little): a closed loop of N clients, each sending its next request the
moment the previous one ends; the engine admits what has arrived before each step, prefills
it, decodes the rest; a step lasts exactly ``law(decode, prefill, context, draft)`` ms. Every
decoding sequence drafts with probability ``draft_rate`` and a draft's accepted prefix reaches
position i with probability ``reach[i]``. The counters are kept as vLLM keeps them.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specfleet.contract import CellIdentity, SLOSpec
from specfleet.measure.metrics import assemble_cell
from specfleet.results import CellResult, EnergyReading, SpecDecodeStats
from specfleet.results.records import RequestRecord
from tests.support.records import MS, request_record

Law = Callable[[int, int, int, float], float]
"""(decode sequences, prefill tokens, context tokens, draft tokens verified) -> step ms."""


@dataclass(frozen=True)
class TrueLaw:
    """A known linear step law, with a draft model's own costs when ``method`` is draft_model."""

    step: float = 3.0
    decode_seq: float = 0.6
    prefill_token: float = 0.02
    context_ktoken: float = 2.0
    draft_step: float = 2.0
    draft_token: float = 0.3
    draft_pass: float = 0.8
    draft_prefill_token: float = 0.01

    def at(self, method: str, k: int) -> Law:
        def law(decode: int, prefill: int, context: int, draft: float) -> float:
            t = self.step + self.decode_seq * decode + self.prefill_token * prefill
            t += self.context_ktoken * context / 1000
            if method == "draft_model":
                t += self.draft_step + self.draft_token * draft + self.draft_pass * k
                t += self.draft_prefill_token * prefill
            return t
        return law

    def coefficients(self, method: str = "draft_model") -> dict[str, float]:
        return {"step": self.step, "decode_seq": self.decode_seq, "prefill_token": self.prefill_token,
                "context_ktoken": self.context_ktoken, f"{method}:step": self.draft_step,
                f"{method}:draft_token": self.draft_token, f"{method}:draft_pass": self.draft_pass,
                f"{method}:draft_prefill_token": self.draft_prefill_token}


@dataclass
class _Req:
    index: int
    send_ms: float
    prompt: int
    output: int
    emitted: int = 0
    chunks: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def emit(self, t: float, n: int) -> None:
        self.emitted += n
        self.chunks.append(t)
        self.tokens.append(n)

    def record(self) -> RequestRecord:
        chunk_ns = tuple(int(round(c * MS)) for c in self.chunks)
        return request_record(self.index, chunk_ns, self.tokens, send_ns=int(round(self.send_ms * MS)),
                              prompt_tokens=self.prompt, usage_completion_tokens=self.output, finish_reason="length",
                              max_tokens=self.output)


def run_engine(
    law: Law, concurrency: int, requests: int, prompts: Sequence[int], outputs: Sequence[int], *,
    k: int = 0, reach: Sequence[float] = (), draft_rate: float = 1.0, seed: int = 0, noise: float = 0.0,
) -> tuple[list[RequestRecord], SpecDecodeStats | None]:
    """The records of ``requests`` requests at closed-loop ``concurrency`` (request i has prompt
    ``prompts[i mod len]`` tokens and output ``outputs[i mod len]``), and the counters."""
    rng = np.random.default_rng(seed)
    t = 0.0
    waiting: list[_Req] = []
    running: list[_Req] = []
    finished: list[_Req] = []
    drafts = accepted_total = 0
    per_pos = [0] * k
    sent = 0

    def send(at: float) -> None:
        nonlocal sent
        waiting.append(_Req(sent, at, prompts[sent % len(prompts)], outputs[sent % len(outputs)]))
        sent += 1

    for _ in range(min(concurrency, requests)):
        send(0.0)
    while len(finished) < requests:
        new = list(waiting)
        waiting.clear()
        drafted = [k > 0 and bool(rng.random() < draft_rate) for _ in running]
        step = law(len(running), sum(r.prompt for r in new), sum(r.prompt + r.emitted for r in running),
                   float(sum(drafted) * k))
        t += step * (1.0 + noise * float(rng.standard_normal())) if noise else step
        for r, d in zip(list(running), drafted, strict=True):
            extra = 0
            if d:
                u = rng.random()
                extra = sum(1 for a in reach[:k] if u < a)
                drafts += 1
                accepted_total += extra
                for i in range(extra):
                    per_pos[i] += 1
            r.emit(t, min(1 + extra, r.output - r.emitted))
            if r.emitted == r.output:
                running.remove(r)
                finished.append(r)
                if sent < requests:
                    send(t)
        for r in new:
            r.emit(t, 1)
            if r.emitted < r.output:
                running.append(r)
            else:
                finished.append(r)
                if sent < requests:
                    send(t)
    records = [r.record() for r in sorted(finished, key=lambda r: r.index)]
    stats = None
    if k:
        draft_tokens = drafts * k
        stats = SpecDecodeStats(
            num_drafts=drafts, num_draft_tokens=draft_tokens, num_accepted_tokens=accepted_total,
            accepted_per_position=per_pos, acceptance_rate=accepted_total / draft_tokens if draft_tokens else None,
            mean_acceptance_length=1 + accepted_total / drafts if drafts else None,
            acceptance_per_position=[n / drafts for n in per_pos] if drafts else [])
    return records, stats


def engine_cell(ident: CellIdentity, key: str, records: list[RequestRecord], stats: SpecDecodeStats | None,
                slo: SLOSpec) -> CellResult:
    start = min(r.send_ns for r in records)
    end = max(r.end_ns or 0 for r in records)
    return assemble_cell(ident, key, records, slo=slo, duration_s=(end - start) / 1e9, requests_planned=len(records),
                         ignore_eos=True, max_error_fraction=0.05,
                         energy=EnergyReading(source="none", joules=None, reason="synthetic"), spec_decode=stats,
                         records_file=f"records/{key}.parquet")
