"""The streaming HTTP/1.1 client: chunked framing split anywhere, keep-alive reuse, and the
response shapes a load run can meet (``tasks/loadgen/http.py``)."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from specfleet_tasks.loadgen.http import ENOUGH, MORE, Origin, Response, StreamClient
from specfleet_tasks.loadgen.loop import run_async

Posted = list[tuple[int, bytes, str | None, bool]]

BODY = b"data: one\n\ndata: two\n\n"
CHUNKED = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (b"data: one\n\n", b"data: two\n\n"))
CHUNKED += b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def parse(*reads: bytes) -> tuple[Response, bytes, list[int]]:
    """Feed ``reads`` to one response as separate reads stamped 1, 2, ...: (the response, the
    body its sink got, the stamps the sink saw)."""
    async def main() -> tuple[Response, bytes, list[int]]:
        received: list[bytes] = []
        stamps: list[int] = []

        def sink(data: bytes, arrival_ns: int) -> int:
            received.append(data)
            stamps.append(arrival_ns)
            return MORE

        response = Response(lambda status: sink, asyncio.get_running_loop().create_future())
        for stamp, data in enumerate(reads, start=1):
            response.feed(memoryview(data), stamp)
        return response, b"".join(received), stamps
    return asyncio.run(main())


@pytest.mark.parametrize("cut", range(1, len(HEAD + CHUNKED)))
def test_a_response_split_at_any_byte_gives_the_body_its_end_and_each_reads_stamp(cut: int) -> None:
    data = HEAD + CHUNKED
    response, body, stamps = parse(data[:cut], data[cut:])
    assert (body, response.finished.done(), response.reusable, response.error) == (BODY, True, True, None)
    body_start, body_end = len(HEAD) + len(b"b\r\n"), len(data) - len(b"\r\n0\r\n\r\n")
    assert set(stamps) == ({1} if cut >= body_end else {2} if cut <= body_start else {1, 2})


def test_chunk_extensions_trailers_and_interim_responses_are_skipped_and_bad_framing_fails() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    response, body, _ = parse(interim + HEAD + b"4;name=x\r\nabcd\r\n0\r\nTrailer: 1\r\n\r\n")
    assert (response.status, body, response.finished.done(), response.error) == (200, b"abcd", True, None)
    bad, _, _ = parse(HEAD + b"zz\r\nabcd\r\n")
    assert bad.finished.done() and not bad.reusable
    assert bad.error is not None and bad.error.startswith("bad HTTP response")


def test_origin_keeps_the_path_prefix_and_default_ports() -> None:
    assert Origin.parse("https://example.org/proxy/") == Origin("example.org", 443, True, "/proxy", "example.org")
    assert Origin.parse("http://127.0.0.1:8000").port == 8000
    with pytest.raises(ValueError, match="not an http"):
        Origin.parse("ftp://example.org")


class Server:
    """Answers each POST with ``response`` (raw bytes, split into ``pieces`` writes); counts connections."""

    def __init__(self, response: bytes, pieces: int = 1) -> None:
        self.response, self.pieces, self.connections = response, pieces, 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                step = -(-len(self.response) // self.pieces)
                for start in range(0, len(self.response), step):
                    writer.write(self.response[start:start + step])
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if b"Connection: close" in self.response or b"Content-Length" not in self.response and \
                        b"chunked" not in self.response:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def post(self, times: int, run: Callable[[Coroutine[Any, Any, Posted]], Posted] = asyncio.run) -> Posted:
        """POST ``times`` times in a row through one client: (status, body, error, reusable) each."""
        async def main() -> Posted:
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            client = StreamClient(f"http://127.0.0.1:{port}", {})
            out = []
            async with server:
                for _ in range(times):
                    received: list[bytes] = []

                    def sink(data: bytes, arrival_ns: int, received: list[bytes] = received) -> int:
                        received.append(data)
                        return ENOUGH if b"two" in b"".join(received) else MORE

                    response = await client.post("v1/completions", b"{}", lambda status, sink=sink: sink)
                    out.append((response.status, b"".join(received), response.error, response.reusable))
                await client.aclose()
            return out
        return run(main())


@pytest.mark.parametrize("run", [run_async, asyncio.run], ids=["uvloop", "asyncio"])
def test_chunked_responses_reuse_one_connection_whatever_the_reads(
        run: Callable[[Coroutine[Any, Any, Posted]], Posted]) -> None:
    server = Server(HEAD + CHUNKED, pieces=7)
    assert server.post(3, run) == [(200, BODY, None, True)] * 3
    assert server.connections == 1


def test_loads_run_on_uvloop() -> None:
    async def loop_type() -> type:
        return type(asyncio.get_running_loop())
    assert run_async(loop_type()) is uvloop.Loop


def test_a_response_followed_by_bytes_no_request_asked_for_keeps_its_status_and_spends_the_connection() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY
    server = Server(sized + b"HTTP/1.1 500 Error\r\nContent-Length: 0\r\n\r\n")
    assert server.post(2) == [(200, BODY, None, False)] * 2 and server.connections == 2


def test_content_length_and_close_delimited_bodies() -> None:
    sized = Server(b"HTTP/1.1 500 Error\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    assert sized.post(2) == [(500, BODY, None, True)] * 2 and sized.connections == 1
    until_close = Server(b"HTTP/1.0 200 OK\r\n\r\n" + BODY)
    assert until_close.post(2) == [(200, BODY, None, False)] * 2 and until_close.connections == 2


def test_a_server_that_closes_mid_response_fails_the_request() -> None:
    truncated = Server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\ndata:")
    [(status, _, error, reusable)] = truncated.post(1)
    assert (status, error, reusable) == (200, "the server closed the connection mid-response", False)
