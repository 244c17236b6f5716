"""Acceptance length per request, from the client's stream and from vLLM's own per-request
figures, beside the ``/metrics`` counters (docs/measurement.md, "Per-request acceptance").

Three figures, named apart:

- the counters' ``1 + accepted / drafts`` (``SpecDecodeStats.mean_acceptance_length``): server-wide
  over the window and pooled (a long completion weighs more). vLLM counts a draft only in steps
  that proposed one, so it is a length *conditional on drafting*: ngram proposes nothing when no
  n-gram matches, and those steps are not in it.
- vLLM's per-request figure (``RequestRecord.request_spec_decode``, sent by a server started with
  ``--per-request-spec-decode-metrics``): the same ratio for one request, also conditional on drafting.
- the client's estimate (``client_steps``): at vLLM's default stream interval one chunk is one
  engine step of the request, carrying the step's accepted tokens and the bonus token, so the
  tokens per content chunk between the first (prefill) and the last (cut by ``max_tokens``) are
  that request's tokens per engine step *over all steps*, drafting or not: what speedup follows.
  It reads high when a chunk carries several steps (a stream interval above one, a proxy merging
  chunks, tokens the detokenizer held back to the next chunk).
"""

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specfleet.contract.base import RecordModel
from specfleet.results.cell import AcceptanceDistribution, CellResult, RequestAcceptance
from specfleet.results.records import UNCOUNTED_CHUNKS_KEY, RequestRecord, pooled_acceptance_length

MIN_CLIENT_CHUNKS = 3
"""Content chunks a request needs for a client estimate: the first and the last are left out."""
TOO_FEW_CHUNKS = (f"fewer than {MIN_CLIENT_CHUNKS} content chunks (nothing between the first, from prefill, "
                  "and the last, cut by max_tokens)")
NO_CHUNK_USAGE = "the stream carried no per-chunk token count (continuous_usage_stats), so chunks say nothing " \
                 "about steps"
NO_SERVER_FIGURES = ("the server sent no metrics.speculative_decoding (started without "
                     "--per-request-spec-decode-metrics, or not speculating)")
NO_DRAFTING_STEP = "no step of the request verified a draft"


@dataclass(frozen=True, slots=True)
class StepCount:
    """One request's tokens over the engine steps that emitted them."""

    tokens: int
    steps: int

    @property
    def length(self) -> float:
        return self.tokens / self.steps


def client_missing(record: RequestRecord) -> str | None:
    """Why ``record`` has no client estimate; None when it has one."""
    if record.extra.get(UNCOUNTED_CHUNKS_KEY):
        return NO_CHUNK_USAGE
    if len(record.chunk_tokens) < MIN_CLIENT_CHUNKS:
        return TOO_FEW_CHUNKS
    return None


def client_steps(record: RequestRecord) -> StepCount | None:
    """Tokens of the content chunks after the first and before the last, over their number."""
    if client_missing(record) is not None:
        return None
    middle = record.chunk_tokens[1:-1]
    return StepCount(sum(middle), len(middle))


def client_mean_acceptance_length(record: RequestRecord) -> float | None:
    """The client's estimate of one request's tokens per engine step over all steps."""
    counted = client_steps(record)
    return counted.length if counted is not None else None


def request_missing(record: RequestRecord) -> str | None:
    """Why ``record`` has no vLLM per-request acceptance length; None when it has one."""
    spec = record.request_spec_decode
    if spec is None:
        return NO_SERVER_FIGURES
    return NO_DRAFTING_STEP if spec.num_spec_steps <= 0 else None


def request_steps(record: RequestRecord) -> StepCount | None:
    """vLLM's per-request counts: drafting steps and the tokens they emitted (accepted + bonus)."""
    spec = record.request_spec_decode
    if spec is None or spec.num_spec_steps <= 0:
        return None
    return StepCount(spec.num_spec_steps + spec.num_accepted_draft_tokens, spec.num_spec_steps)


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q))


def distribution(records: Iterable[RequestRecord], steps: Callable[[RequestRecord], StepCount | None],
                 missing: Callable[[RequestRecord], str | None]) -> AcceptanceDistribution:
    """One per-request figure over the successful ``records``: request-weighted mean and p10/p50/p90
    (numpy's linear interpolation), the token-weighted (pooled) mean and the gap between the two."""
    counts: list[StepCount] = []
    why: Counter[str] = Counter()
    for record in records:
        if not record.ok:
            continue
        counted = steps(record)
        if counted is None:
            why[missing(record) or "no figure"] += 1
        else:
            counts.append(counted)
    without = sum(why.values())
    note = "; ".join(f"{n} of {len(counts) + without} requests: {reason}" for reason, n in why.most_common()) or None
    tokens, total_steps = sum(c.tokens for c in counts), sum(c.steps for c in counts)
    if not counts:
        return AcceptanceDistribution(requests=0, requests_without=without, missing=note, mean=None, p10=None,
                                      p50=None, p90=None, tokens=0, steps=0, token_weighted_mean=None,
                                      weighting_gap=None)
    lengths = np.array([c.length for c in counts], dtype=np.float64)
    mean, pooled = float(lengths.mean()), tokens / total_steps
    return AcceptanceDistribution(
        requests=len(counts), requests_without=without, missing=note, mean=mean, p10=_percentile(lengths, 10),
        p50=_percentile(lengths, 50), p90=_percentile(lengths, 90), tokens=tokens, steps=total_steps,
        token_weighted_mean=pooled, weighting_gap=mean - pooled,
    )


def request_acceptance(records: Sequence[RequestRecord]) -> RequestAcceptance:
    """Both per-request sources over one cell's records."""
    return RequestAcceptance(
        client_mean_acceptance_length=distribution(records, client_steps, client_missing),
        request_mean_acceptance_length=distribution(records, request_steps, request_missing),
    )


def pooled_tokens_per_step(cells: Iterable[CellResult]) -> float | None:
    """Tokens per engine step over all steps, pooled over ``cells``' client estimates (tokens over
    steps); None when no cell has one (cells stored before it was recorded, or too few chunks)."""
    dists = [c.request_acceptance.client_mean_acceptance_length for c in cells if c.request_acceptance is not None]
    steps = sum(d.steps for d in dists)
    return sum(d.tokens for d in dists) / steps if steps else None


def counter_mean_acceptance_length(cells: Iterable[CellResult]) -> float | None:
    """``1 + accepted / drafts`` pooled over ``cells``' counter deltas (conditional on drafting)."""
    stats = [c.spec_decode for c in cells if c.spec_decode is not None]
    return pooled_acceptance_length(sum(s.num_accepted_tokens for s in stats), sum(s.num_drafts for s in stats))


class ClassAcceptance(RecordModel):
    """One speculative arm's acceptance on one prompt class at one sampling mode, over its usable
    cells (every load and repeat): the counters beside both per-request sources."""

    arm: str
    method: str
    k: int | None
    prompt_class: str
    sampling: str
    cells: int
    counter_mean_acceptance_length: float | None
    """``1 + accepted / drafts`` from the counters, conditional on drafting; None without counters."""
    client_mean_acceptance_length: AcceptanceDistribution
    """Tokens per engine step over all steps (the client's estimate)."""
    request_mean_acceptance_length: AcceptanceDistribution
    """vLLM's per-request figure, conditional on drafting."""


def class_acceptance(cells: Sequence[CellResult],
                     records: Mapping[str, Sequence[RequestRecord]]) -> list[ClassAcceptance]:
    """Per speculative arm, prompt class and sampling mode, from the usable cells and their
    records (cells without stored records count for the counters only)."""
    groups: dict[tuple[str, str, str], list[CellResult]] = defaultdict(list)
    for cell in cells:
        if cell.usable and cell.identity.method != "baseline":
            groups[(cell.identity.arm, cell.identity.prompt_class, cell.identity.sampling)].append(cell)
    out = []
    for (arm, prompt_class, sampling), members in groups.items():
        pooled = [r for c in members for r in records.get(c.key, ())]
        first = members[0].identity
        out.append(ClassAcceptance(
            arm=arm, method=first.method, k=first.k, prompt_class=prompt_class, sampling=sampling,
            cells=len(members), counter_mean_acceptance_length=counter_mean_acceptance_length(members),
            client_mean_acceptance_length=distribution(pooled, client_steps, client_missing),
            request_mean_acceptance_length=distribution(pooled, request_steps, request_missing),
        ))
    return out
