"""The shared SSE loop over byte strings in the exact format vLLM 0.32 emits.

The events (``tests/support/sse_streams.py``, and the error event below) were produced with vLLM's
own protocol classes (``CompletionStreamResponse`` / ``ChatCompletionStreamResponse`` dumped as its
serving code does, ``continuous_usage_stats`` on; token counts chosen per test); the framing
is its ``data: ...\\n\\n``. The chat finish chunk counts a stop token that has no text.
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.measure.metrics import TRAILING_TOKENS_KEY
from specfleet.results.records import UNCOUNTED_CHUNKS_KEY, RequestRecord
from specfleet_tasks.loadgen.sse import DONE, SSEDecoder, StreamAccumulator, TextOf, chat_text, completion_text
from tests.support.sse_streams import CHAT_STREAM, COMPLETION_STREAM

ERROR_STREAM = (
    COMPLETION_STREAM.split(b"\n\n")[0] + b"\n\n"
    + b'data: {"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}\n\n'
    + b"data: [DONE]\n\n"
)


def replay(stream: bytes, text_of: TextOf, reads: list[int]) -> RequestRecord:
    """Feed ``stream`` in reads of the given sizes; read i arrives at (i + 1) * 1000 ns."""
    decoder, accumulator = SSEDecoder(), StreamAccumulator(text_of)
    position, done = 0, False
    for i, size in enumerate([*reads, len(stream)]):
        for payload in decoder.feed(stream[position:position + size]):
            if payload == DONE:
                done = True
            else:
                accumulator.feed(json.loads(payload), (i + 1) * 1000)
        position += size
    assert done
    return accumulator.record(index=0, prompt_id="p", send_ns=0, end_ns=10**6, max_tokens=5, error=None)


def event_ends(stream: bytes) -> list[int]:
    """Read sizes that deliver exactly one event per read."""
    ends = [i + 2 for i in range(len(stream)) if stream.startswith(b"\n\n", i)]
    return [b - a for a, b in zip([0, *ends], ends, strict=False)]


def test_completion_stream_tokens_from_cumulative_usage() -> None:
    record = replay(COMPLETION_STREAM, completion_text, event_ends(COMPLETION_STREAM))
    assert record.chunk_ns == (1000, 2000, 3000)
    assert record.chunk_tokens == (1, 3, 1)  # the second chunk carried three tokens
    assert (record.usage_completion_tokens, record.prompt_tokens) == (5, 5)
    assert (record.text, record.finish_reason, record.error) == (" The cat sat down", "length", None)
    assert record.extra == {
        "server_time_to_first_token_ms": 12.5, "spec_mean_acceptance_length": 2.0,
        "spec_draft_acceptance_rate": 0.5, "spec_num_spec_steps": 2.0, "spec_num_accepted_draft_tokens": 3.0,
        "spec_num_draft_tokens": 6.0, "spec_num_spec_tokens": 3.0,
    }
    spec = record.request_spec_decode  # typed: vLLM's per-request figures
    assert spec is not None and (spec.num_spec_steps, spec.num_accepted_draft_tokens) == (2, 3)
    assert record.request_mean_acceptance_length == 2.5 and record.request_draft_acceptance_rate == 0.5


def test_chat_stream_skips_role_chunk_and_keeps_trailing_tokens_apart() -> None:
    record = replay(CHAT_STREAM, chat_text, event_ends(CHAT_STREAM))
    assert record.chunk_ns == (2000, 3000)  # the role chunk carries no content
    assert record.chunk_tokens == (1, 2)
    assert (record.text, record.finish_reason, record.usage_completion_tokens) == ("Hi there", "stop", 4)
    assert record.extra == {TRAILING_TOKENS_KEY: 1.0}  # the finish chunk counted a token with no text


@pytest.mark.parametrize("size", [1, 7, 64, 1000])
def test_any_read_boundaries_give_the_same_record(size: int) -> None:
    reads = [size] * (len(COMPLETION_STREAM) // size)
    record = replay(COMPLETION_STREAM, completion_text, reads)
    assert (record.chunk_tokens, record.text) == ((1, 3, 1), " The cat sat down")


def test_events_in_one_read_share_its_arrival_time() -> None:
    record = replay(COMPLETION_STREAM, completion_text, [len(COMPLETION_STREAM)])
    assert record.chunk_ns == (1000, 1000, 1000)


def test_crlf_framing_and_multi_line_data() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b": comment\r\nevent: x\r\ndata: {\"a\":\r") == []
    assert decoder.feed(b"\ndata: 1}\r\n\r\ndata:[DONE]\r\n\r\n") == [b'{"a":\n1}', DONE]


def test_tokens_of_empty_chunks_travel_with_the_next_content() -> None:
    accumulator = StreamAccumulator(completion_text)
    for at_ns, (text, cumulative) in enumerate([("a", 1), ("", 3), ("b", 4)]):
        accumulator.feed({"choices": [{"text": text}], "usage": {"completion_tokens": cumulative}}, at_ns)
    accumulator.feed({"choices": [{"text": "c"}]}, 9)  # no usage at all: one token
    record = accumulator.record(index=0, prompt_id="p", send_ns=0, end_ns=10, max_tokens=5, error=None)
    assert (record.chunk_ns, record.chunk_tokens) == ((0, 2, 9), (1, 3, 1))
    assert record.extra == {UNCOUNTED_CHUNKS_KEY: 1.0}  # the chunk counted as one token is marked


def test_error_event_keeps_what_arrived_before_it() -> None:
    record = replay(ERROR_STREAM, completion_text, event_ends(ERROR_STREAM))
    assert record.error == "server error in stream: boom"
    assert (record.chunk_tokens, record.text) == ((1,), " The")


SINGLE_LINE_PAYLOAD = st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b)


@given(payloads=st.lists(SINGLE_LINE_PAYLOAD, max_size=6), cuts=st.lists(st.integers(0, 400), max_size=5))
def test_whole_and_split_reads_of_single_line_events_give_every_payload(payloads: list[bytes],
                                                                        cuts: list[int]) -> None:
    """vLLM's framing takes the one-split path when a read holds whole events; any other read
    boundary takes the general path. Both give the same payloads."""
    stream = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    assert SSEDecoder().feed(stream) == payloads
    decoder, got, position = SSEDecoder(), [], 0
    for end in [*sorted(c for c in cuts if c < len(stream)), len(stream)]:
        got += decoder.feed(stream[position:end])
        position = end
    assert got == payloads


def test_reads_that_are_not_only_single_line_data_events_take_the_general_path() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n\n: ping\n\ndata: 2\ndata: 3\n\ndata:4\n\n") == [b"1", b"2\n3", b"4"]
    assert decoder.feed(b"data: 5\n\n\ndata: 6\n\n") == [b"5", b"6"]
    assert decoder.feed(b"data: 7\n\ndata: 8") == [b"7"]
    assert decoder.feed(b"\n\n") == [b"8"]
