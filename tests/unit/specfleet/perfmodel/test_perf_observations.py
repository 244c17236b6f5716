"""Reading engine steps off request records (``specfleet.perfmodel.observations``)."""

import numpy as np

from specfleet.perfmodel.observations import gap_batches
from specfleet.results.records import RequestRecord

MS = 1_000_000


def _record(index: int, prompt_tokens: int, chunks_ms: list[float]) -> RequestRecord:
    chunk_ns = tuple(int(t * MS) for t in chunks_ms)
    return RequestRecord(index=index, prompt_id=f"p{index}", send_ns=0, chunk_ns=chunk_ns,
                         chunk_tokens=(1,) * len(chunk_ns), end_ns=chunk_ns[-1], prompt_tokens=prompt_tokens,
                         usage_completion_tokens=len(chunk_ns), finish_reason="length", max_tokens=len(chunk_ns))


def test_a_request_prefilled_in_the_same_step_but_read_later_is_in_none_of_its_gaps() -> None:
    """A and B are prefilled together (the client reads B's first chunk 0.3 ms after A's); C joins in
    the step that ends A's second gap. Only C's prompt is a prefill in A's gaps; B's was processed
    before A's first gap (issue 32: the wide sweep's burst of seven prompts landed in a 40 ms gap)."""
    a = _record(0, 100, [500.0, 540.0, 1200.0, 1240.0])
    b = _record(1, 400, [500.3, 540.3, 1200.3, 1240.3])
    c = _record(2, 700, [1200.2, 1240.2])
    got = gap_batches([a, b, c], draft_tokens_per_seq=0.0)
    assert np.array_equal(got[0].prefill_tokens, [0.0, 700.0, 0.0])
    assert np.array_equal(got[1].prefill_tokens, [0.0, 700.0, 0.0])
    assert np.array_equal(got[0].decode_seqs, [2.0, 2.0, 3.0])
