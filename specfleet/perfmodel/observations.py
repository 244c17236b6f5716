"""What one stored cell's request records say about the engine's steps.

Under vLLM (default stream interval) every content chunk after a request's first comes from
one engine step, so the gap between two chunks is the time of one step that request took part
in. For each gap, the step's batch is read off all the cell's records at the gap's midpoint:

- decode sequences: requests whose first chunk came before the midpoint and whose last did not;
- context tokens: their prompts plus the tokens each had received by the midpoint;
- prefill tokens: the prompts of requests whose first chunk (the end of their prefill step)
  arrived nearest to this gap's closing chunk; one nearest to the request's own first chunk was
  prefilled in the same step as the request, before its first gap, and the client merely read it
  a little later: it is in none of the request's gaps;
- draft tokens verified: decode sequences x the cell's proposed draft tokens per decode step
  (from its counters: ``num_draft_tokens`` / the decode steps its streams show).

Chunks a client read together share one stamp (a 0 ms gap and a long one after it): a
request's mean gap, the fitted quantity, is unaffected while the reader only falls behind now and
then. A request most of whose gaps are 0 ms was read in bursts, its first and last chunks late by
different amounts, so its mean gap times the reader, not the engine: it is left out of the fit
(``READ_TOGETHER_LIMIT``), though it still counts in the other requests' batches.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specfleet.measure.metrics import NS_PER_MS, output_tokens
from specfleet.perfmodel.step_time import StepBatch, StepObservation
from specfleet.results.records import RequestRecord

FloatArray = npt.NDArray[np.float64]
READ_TOGETHER_LIMIT = 0.5
"""A request whose share of 0 ms chunk gaps is above this is not a step-time observation."""


@dataclass(frozen=True)
class GapBatches:
    """Per chunk gap of one request: its length and the step's batch."""

    gap_ms: FloatArray
    decode_seqs: FloatArray
    prefill_tokens: FloatArray
    context_tokens: FloatArray
    draft_tokens: FloatArray


def streamed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Successful requests with at least one content chunk, in send order."""
    return sorted((r for r in records if r.ok and r.chunk_ns), key=lambda r: (r.send_ns, r.index))


def decode_steps(records: Sequence[RequestRecord]) -> int:
    """Engine steps the streams show after prefill: content chunks after each request's first."""
    return sum(len(r.chunk_ns) - 1 for r in streamed(records))


def prompt_tokens(record: RequestRecord) -> int:
    return record.prompt_tokens if record.prompt_tokens is not None else 0


def gap_batches(records: Sequence[RequestRecord], draft_tokens_per_seq: float) -> list[GapBatches]:
    """One ``GapBatches`` per request with at least two chunks, in ``streamed`` order."""
    reqs = streamed(records)
    if not reqs:
        return []
    first = np.array([r.chunk_ns[0] for r in reqs], dtype=np.float64)
    last = np.array([r.chunk_ns[-1] for r in reqs], dtype=np.float64)
    prompts = np.array([prompt_tokens(r) for r in reqs], dtype=np.float64)
    totals = np.array([r.streamed_tokens for r in reqs], dtype=np.float64)
    first_order, last_order = np.argsort(first, kind="stable"), np.argsort(last, kind="stable")
    first_sorted, last_sorted = first[first_order], last[last_order]
    prompt_by_first = np.concatenate(([0.0], np.cumsum(prompts[first_order])))
    prompt_by_last = np.concatenate(([0.0], np.cumsum(prompts[last_order])))
    total_by_last = np.concatenate(([0.0], np.cumsum(totals[last_order])))
    chunk_t = np.concatenate([np.asarray(r.chunk_ns, dtype=np.float64) for r in reqs])
    chunk_n = np.concatenate([np.asarray(r.chunk_tokens, dtype=np.float64) for r in reqs])
    chunk_order = np.argsort(chunk_t, kind="stable")
    chunk_sorted, emitted_by_time = chunk_t[chunk_order], np.concatenate(([0.0], np.cumsum(chunk_n[chunk_order])))
    out: list[GapBatches] = []
    for j, r in enumerate(reqs):
        if len(r.chunk_ns) < 2:
            continue
        t = np.asarray(r.chunk_ns, dtype=np.float64)
        if np.count_nonzero(np.diff(t) == 0) > READ_TOGETHER_LIMIT * (t.size - 1):
            continue
        mids = (t[1:] + t[:-1]) / 2.0
        started = np.searchsorted(first_sorted, mids, side="left")
        finished = np.searchsorted(last_sorted, mids, side="left")
        # the request itself decodes in each of its gaps, also in a 0 ms one (chunks read together)
        decode = np.maximum((started - finished).astype(np.float64), 1.0)
        emitted = emitted_by_time[np.searchsorted(chunk_sorted, mids, side="left")]
        context = (prompt_by_first[started] - prompt_by_last[finished]) + (emitted - total_by_last[finished])
        prefill = np.zeros(mids.size)
        others = (first > t[0]) & (first <= t[-1] + (t[-1] - t[-2]) / 2.0)
        others[j] = False
        if others.any():
            f = first[others]
            idx = np.clip(np.searchsorted(t, f), 1, t.size - 1)
            nearest = np.where(np.abs(t[idx - 1] - f) < np.abs(t[idx] - f), idx - 1, idx)
            joined = nearest >= 1
            np.add.at(prefill, np.minimum(nearest[joined] - 1, mids.size - 1), prompts[others][joined])
        out.append(GapBatches(gap_ms=np.diff(t) / NS_PER_MS, decode_seqs=decode, prefill_tokens=prefill,
                              context_tokens=context, draft_tokens=decode * draft_tokens_per_seq))
    return out


def step_observations(
    records: Sequence[RequestRecord], method: str, k: int, draft_tokens_per_seq: float, group: str
) -> list[StepObservation]:
    """One observation per request: its mean chunk gap against the mean batch over its gaps."""
    return [
        StepObservation(
            batch=StepBatch(method=method, k=k, decode_seqs=float(g.decode_seqs.mean()),
                            prefill_tokens=float(g.prefill_tokens.mean()),
                            context_tokens=float(g.context_tokens.mean()),
                            draft_tokens=float(g.draft_tokens.mean())),
            gap_ms=float(g.gap_ms.mean()), gaps=int(g.gap_ms.size), group=group)
        for g in gap_batches(records, draft_tokens_per_seq)
    ]


def request_shapes(records: Sequence[RequestRecord]) -> list[tuple[str, int, int]]:
    """(prompt id, prompt tokens, output tokens) of the successful requests, in index order."""
    return [(r.prompt_id, prompt_tokens(r), output_tokens(r)) for r in sorted(records, key=lambda r: r.index)
            if r.ok and output_tokens(r) > 0]
