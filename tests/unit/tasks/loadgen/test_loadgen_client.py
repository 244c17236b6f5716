"""The client and drivers against a canned HTTP/1.1 server on loopback: request bodies, order,
warm-up, errors, and stream bytes split across reads.

Timing is not tested here beyond read order; the lead's tests run real vLLM.
"""

import asyncio
import json
import time
from typing import Any
from unittest import mock

import pytest

from specfleet.contract.prompts import PromptItem
from specfleet.contract.workload import SamplingSpec
from specfleet.errors import InputError
from specfleet.results.records import RequestRecord
from specfleet_tasks.loadgen import (
    ClosedLoop,
    LoadResult,
    PoissonArrivals,
    RequestSettings,
    ServerEndpoint,
    poisson_offsets_ns,
    run_load,
)
from specfleet_tasks.loadgen.http import _Connection
from tests.support.sse_streams import CHAT_STREAM, COMPLETION_STREAM

PROMPTS = [PromptItem(id=f"p{i}", prompt=f"prompt {i}", max_tokens=3 if i == 1 else None) for i in range(3)]
MODEL = "tiny"
SETTINGS = RequestSettings(route="completions", max_tokens=5, ignore_eos=True, sampling=SamplingSpec(), timeout_s=5.0)


class Recorder:
    """A loopback server that answers every request with a canned stream and remembers what was
    sent. A 200 stream goes out chunked, one write per piece of ``pieces`` (split points), each
    piece written only once the client's connection has taken a read since the last (the test's
    signal: ``_Connection.buffer_updated`` wrapped), so that each arrives in its own read; the
    time each piece after the first was written is in ``written_ns``. ``stall_s`` waits first."""

    def __init__(self, stream: bytes = COMPLETION_STREAM, status: int = 200, pieces: tuple[int, ...] = (),
                 stall_s: float = 0.0) -> None:
        self.stream, self.status, self.pieces, self.stall_s = stream, status, pieces, stall_s
        self.paths: list[str] = []
        self.bodies: list[dict[str, object]] = []
        self.headers: list[dict[str, str]] = []
        self.written_ns: list[int] = []
        self._reads = 0
        self._read: asyncio.Event | None = None

    def run(self, *args: Any, prefix: str = "", api_key: str | None = None, **kwargs: Any) -> LoadResult:
        """``run_load(endpoint, *args, **kwargs)`` against this server, ``prefix`` after its address."""
        async def main() -> LoadResult:
            self._read = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                endpoint = ServerEndpoint(f"http://127.0.0.1:{port}{prefix}", MODEL, api_key)
                return await run_load(endpoint, *args, **kwargs)

        original = _Connection.buffer_updated

        def signalling(connection: _Connection, nbytes: int) -> None:
            original(connection, nbytes)
            self._reads += 1
            if self._read is not None:
                self._read.set()

        with mock.patch.object(_Connection, "buffer_updated", signalling):
            return asyncio.run(main())

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = (line.partition(":") for line in head[1:] if line)
                headers = {name.strip().lower(): value.strip() for name, _, value in fields}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.paths.append(head[0].split(" ")[1])
                self.bodies.append(json.loads(body))
                self.headers.append(headers)
                await asyncio.sleep(self.stall_s)
                await self._respond(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            writer.close()

    async def _respond(self, writer: asyncio.StreamWriter) -> None:
        if self.status != 200:
            writer.write(f"HTTP/1.1 {self.status} Error\r\nContent-Length: {len(self.stream)}\r\n\r\n".encode()
                         + self.stream)
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        ends = [*self.pieces, len(self.stream)]
        reads_before = self._reads
        for start, end in zip([0, *self.pieces], ends, strict=True):
            while start and self._reads == reads_before:  # the client has not read the last piece yet
                assert self._read is not None
                self._read.clear()
                await self._read.wait()
            if start:
                self.written_ns.append(time.perf_counter_ns())
            reads_before = self._reads
            piece = self.stream[start:end]
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def test_completion_body_and_record() -> None:
    recorder = Recorder()
    records = recorder.run(PROMPTS, SETTINGS, ClosedLoop(2), requests=2, warmup_requests=0, api_key="sk-secret")
    assert recorder.bodies[0] == {
        "model": "tiny", "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": 5, "ignore_eos": True, "temperature": 0.0, "top_p": 1.0, "prompt": "prompt 0",
    }
    assert recorder.bodies[1]["max_tokens"] == 3  # the prompt's own cap is lower
    assert recorder.paths == ["/v1/completions"] * 2
    assert recorder.headers[0]["authorization"] == "Bearer sk-secret"
    first = records.records[0]
    assert (first.chunk_tokens, first.usage_completion_tokens, first.error) == ((1, 3, 1), 5, None)
    assert records.window_ns is not None
    assert records.duration_s >= 0


def test_sampled_requests_get_per_request_seeds_and_chat_messages() -> None:
    recorder = Recorder(CHAT_STREAM)
    prompts = [PromptItem(id="c", messages=[{"role": "user", "content": "hi"}])]
    settings = RequestSettings(route="chat", max_tokens=4, ignore_eos=False,
                               sampling=SamplingSpec(name="t1", temperature=1.0, seed=10), timeout_s=5.0)
    result = recorder.run(prompts, settings, ClosedLoop(1), requests=2, warmup_requests=0)
    assert [b["seed"] for b in recorder.bodies] == [10, 11]
    assert recorder.bodies[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert recorder.paths[0] == "/v1/chat/completions"
    assert result.records[0].text == "Hi there"


def test_warmup_is_not_recorded_and_prompts_cycle_in_order() -> None:
    recorder = Recorder()
    calls: list[int] = []

    async def before_measured() -> None:
        calls.append(len(recorder.bodies))

    result = recorder.run(PROMPTS, SETTINGS, ClosedLoop(2), requests=5, warmup_requests=2,
                          before_measured=before_measured)
    assert calls == [2]  # called once, after both warm-up requests
    assert [r.prompt_id for r in result.records] == ["p0", "p1", "p2", "p0", "p1"]
    assert [r.index for r in result.records] == [0, 1, 2, 3, 4]


def test_poisson_records_carry_their_schedule() -> None:
    result = Recorder().run(PROMPTS, SETTINGS, PoissonArrivals(rate_per_s=200.0, seed=1), requests=4,
                            warmup_requests=1)
    scheduled = [r.scheduled_ns for r in result.records]
    assert all(s is not None for s in scheduled)
    start = scheduled[0]
    assert [s - start for s in scheduled if s is not None and start is not None] == poisson_offsets_ns(4, 200.0, 1)


@pytest.mark.parametrize(
    ("recorder", "expected"),
    [
        (Recorder(status=500, stream=b'{"error": "engine dead"}'), 'HTTP 500: {"error": "engine dead"}'),
        (Recorder(stream=COMPLETION_STREAM.split(b"data: [DONE]")[0]), "stream ended without [DONE]"),
        (Recorder(stream=b"data: {not json\n\n"), "malformed stream event"),
    ],
)
def test_failures_become_records(recorder: Recorder, expected: str) -> None:
    result = recorder.run(PROMPTS, SETTINGS, ClosedLoop(1), requests=1, warmup_requests=0)
    assert result.records[0].error is not None
    assert result.records[0].error.startswith(expected)


def test_timeout_becomes_a_record() -> None:
    settings = RequestSettings(route="completions", max_tokens=5, ignore_eos=True, sampling=SamplingSpec(),
                               timeout_s=0.05)
    result = Recorder(stall_s=5.0).run(PROMPTS, settings, ClosedLoop(1), requests=1, warmup_requests=0)
    assert result.records[0].error == "timed out after 0.05 s"


def test_prompts_must_suit_the_route() -> None:
    chat = RequestSettings(route="chat", max_tokens=1, ignore_eos=True, sampling=SamplingSpec(), timeout_s=1.0)
    with pytest.raises(InputError, match="prompt 'p0' has no 'messages'"):
        Recorder().run(PROMPTS, chat, ClosedLoop(1), requests=1, warmup_requests=0)


class StopAfter:
    """A ``stop_when`` that says stop at the n-th completed measured request."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def __call__(self, record: RequestRecord) -> bool:
        self.seen += 1
        return self.seen >= self.n


def test_closed_loop_stops_issuing_once_told_and_keeps_requests_in_flight() -> None:
    stop = StopAfter(3)
    result = Recorder().run(PROMPTS, SETTINGS, ClosedLoop(1), requests=10, warmup_requests=1, stop_when=stop)
    assert [r.index for r in result.records] == [0, 1, 2]
    wide = Recorder().run(PROMPTS, SETTINGS, ClosedLoop(4), requests=50, warmup_requests=0, stop_when=StopAfter(3))
    assert 3 <= len(wide.records) <= 3 + 3  # the stopping completion, plus up to 3 in flight
    assert [r.index for r in wide.records] == list(range(len(wide.records)))
    assert all(r.ok for r in wide.records)


def test_open_loop_stops_issuing_once_told() -> None:
    result = Recorder().run(PROMPTS, SETTINGS, PoissonArrivals(rate_per_s=50.0, seed=1), requests=40,
                            warmup_requests=0, stop_when=StopAfter(2))
    assert 2 <= len(result.records) < 40
    assert all(r.scheduled_ns is not None for r in result.records)


def test_events_split_across_reads_take_the_arrival_of_the_read_that_completes_them() -> None:
    first_end = COMPLETION_STREAM.index(b"\n\n") + 2
    # Read 1 ends mid-way through event 1; read 2 completes it and ends inside event 2's "data:";
    # read 3 brings events 2 and 3 whole.
    recorder = Recorder(pieces=(first_end - 40, first_end + 3))
    record = recorder.run(PROMPTS, SETTINGS, ClosedLoop(1), requests=1, warmup_requests=0).records[0]
    assert (record.error, record.chunk_tokens, record.text) == (None, (1, 3, 1), " The cat sat down")
    second_write_ns, third_write_ns = recorder.written_ns
    assert second_write_ns < record.chunk_ns[0] < third_write_ns < record.chunk_ns[1] == record.chunk_ns[2]


@pytest.mark.parametrize(
    ("bad_event", "pieces"),
    [
        (b"data: {not json\n\n", ()),
        (b'data: {"choices": [{"text": "\xff"}]}\n\n', ()),  # not UTF-8
        (b"data: {not json\n\n", (30,)),  # the bad event arrives in a later read
    ],
)
def test_malformed_event_becomes_an_error_record_keeping_earlier_chunks(bad_event: bytes,
                                                                        pieces: tuple[int, ...]) -> None:
    first = COMPLETION_STREAM[:COMPLETION_STREAM.index(b"\n\n") + 2]
    stream = first + bad_event + b"data: [DONE]\n\n"
    recorder = Recorder(stream, pieces=tuple(len(first) + p for p in pieces))
    record = recorder.run(PROMPTS, SETTINGS, ClosedLoop(1), requests=1, warmup_requests=0).records[0]
    assert record.error is not None and record.error.startswith("malformed stream event")
    assert (record.chunk_tokens, record.text) == ((1,), " The")


@pytest.mark.parametrize("prefix", ["/proxy", "/proxy/"])
def test_paths_join_a_base_url_prefix(prefix: str) -> None:
    recorder = Recorder()
    result = recorder.run(PROMPTS, SETTINGS, ClosedLoop(1), requests=1, warmup_requests=0, prefix=prefix)
    assert result.records[0].ok
    assert recorder.paths == ["/proxy/v1/completions"]
    assert "authorization" not in recorder.headers[0]  # no key, no header


def test_connection_refused_becomes_a_record() -> None:
    async def main() -> LoadResult:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await run_load(ServerEndpoint(f"http://127.0.0.1:{port}", MODEL), PROMPTS, SETTINGS, ClosedLoop(1),
                              requests=1, warmup_requests=0)

    record = asyncio.run(main()).records[0]
    assert record.error is not None and record.error.startswith("cannot connect to 127.0.0.1")
    assert (record.chunk_ns, record.end_ns is not None) == ((), True)
