"""Acceptance length per request: the client's estimate from tokens per chunk, vLLM's own
per-request figures, their distributions per cell and per prompt class, and how each relates to
the counters' 1 + accepted / drafts on streams built the way vLLM emits them."""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract.matrix import CellIdentity
from specfleet.contract.workload import SLOSpec
from specfleet.measure.acceptance import (
    NO_CHUNK_USAGE,
    NO_DRAFTING_STEP,
    NO_SERVER_FIGURES,
    TOO_FEW_CHUNKS,
    class_acceptance,
    client_mean_acceptance_length,
    client_missing,
    client_steps,
    counter_mean_acceptance_length,
    pooled_tokens_per_step,
    request_acceptance,
    request_missing,
    request_steps,
)
from specfleet.measure.metrics import assemble_cell
from specfleet.results import CellResult, EnergyReading, SpecDecodeStats
from specfleet.results.records import SPEC_KEY_PREFIX, UNCOUNTED_CHUNKS_KEY, RequestRecord, pooled_acceptance_length
from tests.support.records import request_record

MS = 1_000_000


def record(chunk_tokens: tuple[int, ...], index: int = 0, spec: dict[str, float] | None = None,
           error: str | None = None, extra: dict[str, float] | None = None) -> RequestRecord:
    """A request whose i-th content chunk arrived at 10 + i ms carrying ``chunk_tokens[i]``;
    ``spec`` is vLLM's ``metrics.speculative_decoding`` as the SSE parser keeps it."""
    kept = {SPEC_KEY_PREFIX + k: v for k, v in (spec or {}).items()} | (extra or {})
    return request_record(index, tuple((10 + i) * MS for i in range(len(chunk_tokens))), chunk_tokens,
                          end_ns=(11 + len(chunk_tokens)) * MS, usage_completion_tokens=sum(chunk_tokens),
                          max_tokens=sum(chunk_tokens), error=error, extra=kept)


def vllm_spec(steps: int, accepted: int, k: int = 3) -> dict[str, float]:
    """vLLM's summary, as it sends it (``mean_acceptance_length`` 1.0 when nothing drafted)."""
    return {"mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / (steps * k) if steps else 0.0, "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted, "num_draft_tokens": steps * k, "num_spec_tokens": k}


# --- one request -----------------------------------------------------------------------------

def test_the_client_estimate_leaves_out_the_first_and_the_last_chunk() -> None:
    r = record((1, 3, 4, 2, 1))  # prefill's one token; three steps; the last step cut by max_tokens
    counted = client_steps(r)
    assert counted is not None and (counted.tokens, counted.steps) == (9, 3)
    assert client_mean_acceptance_length(r) == 3.0
    assert client_missing(r) is None


@pytest.mark.parametrize("chunks", [(), (5,), (1, 4)])
def test_too_few_chunks_give_no_estimate_and_say_why(chunks: tuple[int, ...]) -> None:
    r = record(chunks)
    assert client_mean_acceptance_length(r) is None and client_missing(r) == TOO_FEW_CHUNKS


def test_chunks_counted_without_usage_give_no_estimate() -> None:
    r = record((1, 1, 1, 1), extra={UNCOUNTED_CHUNKS_KEY: 4.0})  # the parser counted 1 a chunk
    assert client_mean_acceptance_length(r) is None and client_missing(r) == NO_CHUNK_USAGE


def test_vllms_per_request_figures_become_typed_fields() -> None:
    r = record((1, 2, 2), spec=vllm_spec(steps=4, accepted=6))
    spec = r.request_spec_decode
    assert spec is not None and (spec.num_spec_steps, spec.num_accepted_draft_tokens, spec.num_draft_tokens,
                                 spec.num_spec_tokens) == (4, 6, 12, 3)
    assert r.request_mean_acceptance_length == 2.5 and r.request_draft_acceptance_rate == 0.5
    counted = request_steps(r)
    assert counted is not None and (counted.tokens, counted.steps) == (10, 4)
    assert request_missing(r) is None


def test_no_per_request_figures_are_none_never_vllms_placeholders() -> None:
    absent = record((1, 2, 2))
    assert absent.request_spec_decode is None and absent.request_mean_acceptance_length is None
    assert request_steps(absent) is None and request_missing(absent) == NO_SERVER_FIGURES
    undrafted = record((1, 1, 1), spec=vllm_spec(steps=0, accepted=0))  # vLLM sends 1.0 and 0.0 here
    assert undrafted.request_spec_decode is not None
    assert undrafted.request_mean_acceptance_length is None and undrafted.request_draft_acceptance_rate is None
    assert request_steps(undrafted) is None and request_missing(undrafted) == NO_DRAFTING_STEP
    partial = record((1, 2, 2), extra={"spec_mean_acceptance_length": 2.0})  # a shape this code does not know
    assert partial.request_spec_decode is None


# --- one cell --------------------------------------------------------------------------------

def test_request_weighted_and_token_weighted_means_differ_by_hand() -> None:
    short = record((1, 2, 2, 1), index=0, spec=vllm_spec(steps=2, accepted=2))      # client 4 / 2 = 2
    long = record((1, *[3] * 10, 1), index=1, spec=vllm_spec(steps=10, accepted=20))  # client 30 / 10 = 3
    got = request_acceptance([short, long])
    for dist in (got.client_mean_acceptance_length, got.request_mean_acceptance_length):
        assert (dist.requests, dist.requests_without, dist.missing) == (2, 0, None)
        assert (dist.tokens, dist.steps) == (34, 12)
        assert dist.mean == pytest.approx(2.5)
        assert dist.token_weighted_mean == pytest.approx(34 / 12)
        assert dist.weighting_gap == pytest.approx(2.5 - 34 / 12)
        assert (dist.p10, dist.p50, dist.p90) == pytest.approx((2.1, 2.5, 2.9))  # linear, as numpy
    assert got.tokens_per_step == pytest.approx(34 / 12)


def test_failed_requests_are_left_out_and_missing_ones_are_named() -> None:
    ok = record((1, 2, 2, 1), index=0)
    short = record((1, 2), index=1)
    failed = record((1, 3, 3, 1), index=2, error="HTTP 500")
    got = request_acceptance([ok, short, failed])
    client, server = got.client_mean_acceptance_length, got.request_mean_acceptance_length
    assert (client.requests, client.requests_without) == (1, 1)
    assert client.missing == f"1 of 2 requests: {TOO_FEW_CHUNKS}"
    assert (server.requests, server.requests_without) == (0, 2)
    assert server.missing == f"2 of 2 requests: {NO_SERVER_FIGURES}"
    assert server.mean is None and server.p50 is None and server.token_weighted_mean is None
    assert server.weighting_gap is None and (server.tokens, server.steps) == (0, 0)


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[int, ...]]:
    return draw(st.lists(st.lists(st.integers(0, 6), min_size=0, max_size=30).map(tuple), min_size=1, max_size=12))


@given(streams())
def test_the_distribution_is_ordered_and_pools_tokens_over_steps(chunk_lists: list[tuple[int, ...]]) -> None:
    records = [record(chunks, index=i) for i, chunks in enumerate(chunk_lists)]
    dist = request_acceptance(records).client_mean_acceptance_length
    usable = [c for c in chunk_lists if len(c) >= 3]
    assert dist.requests == len(usable) and dist.requests_without == len(chunk_lists) - len(usable)
    if not usable:
        assert dist.mean is None and dist.token_weighted_mean is None and dist.missing
        return
    lengths = [sum(c[1:-1]) / len(c[1:-1]) for c in usable]
    assert dist.steps == sum(len(c) - 2 for c in usable) and dist.tokens == sum(sum(c[1:-1]) for c in usable)
    assert dist.token_weighted_mean == pytest.approx(dist.tokens / dist.steps)
    assert dist.mean == pytest.approx(float(np.mean(lengths)))
    assert dist.p10 is not None and dist.p50 is not None and dist.p90 is not None
    assert min(lengths) - 1e-9 <= dist.p10 <= dist.p50 <= dist.p90 <= max(lengths) + 1e-9
    assert min(lengths) - 1e-9 <= dist.token_weighted_mean <= max(lengths) + 1e-9


# --- streams as vLLM emits them, against the counters ----------------------------------------

@dataclass(frozen=True)
class Request:
    """One request's decode steps as the engine ran them: (drafted, accepted draft tokens) per step."""

    steps: tuple[tuple[bool, int], ...]
    max_tokens: int

    def chunk_tokens(self, stream_interval: int = 1) -> tuple[int, ...]:
        """The content chunks vLLM streams: prefill's one token, then one chunk per step carrying its
        accepted tokens and the bonus token, the last cut at ``max_tokens``; with a stream interval
        above one, chunks held until they carry at least that many tokens (the last one as it is)."""
        emitted, out, held = 1, [1], 0
        for _, accepted in self.steps:
            tokens = min(accepted + 1, self.max_tokens - emitted)
            emitted += tokens
            held += tokens
            if held >= stream_interval or emitted == self.max_tokens:
                out.append(held)
                held = 0
            if emitted == self.max_tokens:
                break
        return tuple(out)

    @property
    def ran(self) -> tuple[tuple[bool, int], ...]:
        """The steps the engine ran before max_tokens (vLLM counts the last one's acceptance whole)."""
        emitted = 1
        for i, (_, accepted) in enumerate(self.steps):
            emitted += accepted + 1
            if emitted >= self.max_tokens:
                return self.steps[:i + 1]
        return self.steps


@st.composite
def requests(draw: st.DrawFn, k: int, every_step_drafts: bool) -> Request:
    n = draw(st.integers(4, 40))
    drafted = [True] * n if every_step_drafts else draw(st.lists(st.booleans(), min_size=n, max_size=n))
    accepted = draw(st.lists(st.integers(0, k), min_size=n, max_size=n))
    steps = tuple((d, a if d else 0) for d, a in zip(drafted, accepted, strict=True))
    return Request(steps, max_tokens=draw(st.integers(4, 1 + sum(a + 1 for _, a in steps))))


def counters(batch: list[Request], k: int) -> SpecDecodeStats:
    """The /metrics delta these requests leave: only drafting steps are drafts."""
    drafts = sum(d for r in batch for d, _ in r.ran)
    accepted = sum(a for r in batch for d, a in r.ran if d)
    return SpecDecodeStats(num_drafts=drafts, num_draft_tokens=drafts * k, num_accepted_tokens=accepted,
                           accepted_per_position=[], acceptance_rate=accepted / (drafts * k) if drafts else None,
                           mean_acceptance_length=1 + accepted / drafts if drafts else None, acceptance_per_position=[])


def as_records(batch: list[Request], k: int, stream_interval: int = 1) -> list[RequestRecord]:
    out = []
    for i, r in enumerate(batch):
        drafted = [(d, a) for d, a in r.ran if d]
        out.append(record(r.chunk_tokens(stream_interval), index=i,
                          spec=vllm_spec(len(drafted), sum(a for _, a in drafted), k)))
    return out


K = 3


@given(st.lists(requests(K, every_step_drafts=True), min_size=1, max_size=8))
def test_when_every_step_drafts_the_client_estimate_tracks_the_counters(batch: list[Request]) -> None:
    """The draft model's case: every decode step is a draft, so tokens per step over all steps and
    the counters' length differ only by the steps the estimate leaves out (each request's last)."""
    records = as_records(batch, K)
    stats = counters(batch, K)
    got = request_acceptance(records)
    server = got.request_mean_acceptance_length
    assert server.token_weighted_mean == pytest.approx(stats.mean_acceptance_length)  # the same steps, pooled
    client = got.client_mean_acceptance_length
    if client.token_weighted_mean is None:
        return
    left_out = len(batch)  # at most one step per request: its last
    assert abs(client.token_weighted_mean - (stats.mean_acceptance_length or 0)) <= K * left_out / (
        client.steps + left_out) + 1e-9


@given(st.lists(requests(K, every_step_drafts=False), min_size=1, max_size=8))
def test_when_steps_propose_nothing_the_counters_are_conditional_and_the_client_is_not(batch: list[Request]) -> None:
    """The ngram case: steps without a draft emit one token and are not drafts. The counters' and
    vLLM's per-request lengths count drafting steps only; the client's counts every step."""
    records = as_records(batch, K)
    stats = counters(batch, K)
    got = request_acceptance(records)
    server = got.request_mean_acceptance_length
    assert server.token_weighted_mean == (None if stats.mean_acceptance_length is None
                                          else pytest.approx(stats.mean_acceptance_length))
    middle = [step for r in batch if len(r.ran) >= 2 for step in r.ran[:-1] if len(r.chunk_tokens()) >= 3]
    client = got.client_mean_acceptance_length
    if client.token_weighted_mean is not None:
        assert client.token_weighted_mean == pytest.approx(1 + sum(a for _, a in middle) / len(middle))


@given(st.lists(requests(K, every_step_drafts=True), min_size=1, max_size=8), st.integers(2, 6))
def test_a_stream_interval_above_one_makes_the_estimate_read_high(batch: list[Request], interval: int) -> None:
    """Chunks that carry several steps (a larger stream interval, a proxy merging chunks): every
    middle chunk carries at least ``interval`` tokens, so the estimate cannot fall below it, while
    vLLM's own per-request figure does not depend on the stream."""
    one = request_acceptance(as_records(batch, K))
    merged = request_acceptance(as_records(batch, K, interval))
    assert merged.request_mean_acceptance_length == one.request_mean_acceptance_length
    if merged.client_mean_acceptance_length.token_weighted_mean is not None:
        assert merged.client_mean_acceptance_length.token_weighted_mean >= interval


# --- cells and prompt classes ----------------------------------------------------------------

SLO = SLOSpec(ttft_ms=1000, itl_ms=1000)


def cell(arm: str, k: int | None, load: int, reqs: list[RequestRecord], drafts: int, accepted: int) -> CellResult:
    method = "baseline" if k is None else "draft_model"
    identity = CellIdentity(arm=arm, method=method, k=k, load_mode="concurrency", load_value=load,
                            prompt_class="code", sampling="greedy", repeat=0)
    spec = None if k is None else SpecDecodeStats(
        num_drafts=drafts, num_draft_tokens=drafts * k, num_accepted_tokens=accepted, accepted_per_position=[],
        acceptance_rate=accepted / (drafts * k), mean_acceptance_length=1 + accepted / drafts,
        acceptance_per_position=[])
    return assemble_cell(identity, f"{arm}-{load}", reqs, slo=SLO, duration_s=1.0, requests_planned=len(reqs),
                         ignore_eos=True, max_error_fraction=0.5,
                         energy=EnergyReading(source="none", joules=None, reason="none here"), spec_decode=spec)


def test_cells_carry_both_sources_and_classes_pool_their_cells() -> None:
    c1 = [record((1, 2, 2, 1), index=0, spec=vllm_spec(3, 3))]
    c4 = [record((1, 4, 4, 4, 1), index=0, spec=vllm_spec(4, 12)), record((1, 3, 1), index=1, spec=vllm_spec(2, 3))]
    base = [record((1, 1, 1, 1), index=0)]
    cells = [cell("draft-k3", 3, 1, c1, drafts=3, accepted=3), cell("draft-k3", 3, 4, c4, drafts=6, accepted=15),
             cell("baseline", None, 1, base, drafts=0, accepted=0)]
    first = cells[0].request_acceptance
    assert first is not None and first.client_mean_acceptance_length.mean == 2.0
    assert first.request_mean_acceptance_length.mean == 2.0
    baseline = cells[2].request_acceptance
    assert baseline is not None and baseline.tokens_per_step == 1.0  # one token a step without speculation
    assert pooled_tokens_per_step(cells[:2]) == pytest.approx((4 + 12 + 3) / (2 + 3 + 1))
    assert pooled_tokens_per_step([c.model_copy(update={"request_acceptance": None}) for c in cells]) is None

    [row] = class_acceptance(cells, {c.key: r for c, r in zip(cells, (c1, c4, base), strict=True)})
    assert (row.arm, row.method, row.k, row.prompt_class, row.sampling, row.cells) == (
        "draft-k3", "draft_model", 3, "code", "greedy", 2)
    assert row.counter_mean_acceptance_length == pytest.approx(1 + 18 / 9) == counter_mean_acceptance_length(cells)
    assert row.client_mean_acceptance_length.requests == 3
    assert row.client_mean_acceptance_length.mean == pytest.approx((2 + 4 + 3) / 3)
    assert row.request_mean_acceptance_length.token_weighted_mean == pytest.approx(1 + 18 / 9)
    [counters_only] = class_acceptance(cells, {})  # no stored records: the counters alone
    assert counters_only.client_mean_acceptance_length.requests == 0
    assert counters_only.counter_mean_acceptance_length == row.counter_mean_acceptance_length


@pytest.mark.parametrize(("accepted", "drafts", "expected"), [
    (6, 4, 2.5), (0, 3, 1.0), (5, 0, None), (5, None, None), (None, 4, None), (3, -2, None)])
def test_the_pooled_acceptance_length_is_none_without_a_drafting_step(
        accepted: int | None, drafts: int | None, expected: float | None) -> None:
    assert pooled_acceptance_length(accepted, drafts) == expected
