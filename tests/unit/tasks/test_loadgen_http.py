"""The streaming HTTP/1.1 client: chunked framing split anywhere, keep-alive reuse, and the
response shapes a load run can meet (``tasks/loadgen/http.py``)."""

import asyncio

import pytest

from tasks.loadgen.http import ENOUGH, MORE, Origin, StreamClient, _Dechunker

BODY = b"data: one\n\ndata: two\n\n"
CHUNKED = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (b"data: one\n\n", b"data: two\n\n"))
CHUNKED += b"0\r\n\r\n"


@pytest.mark.parametrize("cut", range(1, len(CHUNKED)))
def test_chunked_framing_split_at_any_byte_gives_the_body_and_its_end(cut: int) -> None:
    dechunker = _Dechunker()
    first, ended_early = dechunker.feed(CHUNKED[:cut])
    rest, ended = dechunker.feed(CHUNKED[cut:])
    assert (first + rest, ended_early, ended, dechunker.error) == (BODY, False, True, None)


def test_chunk_extensions_and_trailers_are_skipped_and_bad_sizes_refused() -> None:
    dechunker = _Dechunker()
    assert dechunker.feed(b"4;name=x\r\nabcd\r\n0\r\nTrailer: 1\r\n\r\n") == (b"abcd", True)
    bad = _Dechunker()
    assert bad.feed(b"zz\r\nabcd\r\n")[1] is False
    assert bad.error is not None and "chunk size" in bad.error


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

    def post(self, times: int) -> list[tuple[int, bytes, str | None, bool]]:
        """POST ``times`` times in a row through one client: (status, body, error, reusable) each."""
        async def main() -> list[tuple[int, bytes, str | None, bool]]:
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
        return asyncio.run(main())


def test_chunked_responses_reuse_one_connection_whatever_the_reads() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = Server(head + CHUNKED, pieces=7)
    assert server.post(3) == [(200, BODY, None, True)] * 3
    assert server.connections == 1


def test_content_length_and_close_delimited_bodies() -> None:
    sized = Server(b"HTTP/1.1 500 Error\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    assert sized.post(2) == [(500, BODY, None, True)] * 2 and sized.connections == 1
    until_close = Server(b"HTTP/1.0 200 OK\r\n\r\n" + BODY)
    assert until_close.post(2) == [(200, BODY, None, False)] * 2 and until_close.connections == 2


def test_a_server_that_closes_mid_response_fails_the_request() -> None:
    truncated = Server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\ndata:")
    [(status, _, error, reusable)] = truncated.post(1)
    assert (status, error, reusable) == (200, "the server closed the connection mid-response", False)
