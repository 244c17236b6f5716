"""A small HTTP/1.1 client for streamed POSTs: one asyncio protocol per connection, keep-alive pool.

Why not aiohttp: against a server that writes one SSE event per HTTP chunk (vLLM's API
server), aiohttp's response stream makes about ten Python calls per chunk and wakes the
request's task on every read. Here the transport hands each read straight to the response's
parser inside ``data_received``: chunk framing is undone and the body handed on with the
read's arrival stamp, and the request's task wakes once, when the response ends
(docs/benchmarks.md, "Client capacity").

Covers what a load run needs: ``http``/``https``, a base-URL path prefix, chunked,
``Content-Length`` and close-delimited bodies, keep-alive, and one retry on a fresh
connection when a pooled one was closed by the server before any response byte (an idle
keep-alive timeout). Proxies are never used.
"""

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

BodySink = Callable[[bytes, int], int]
"""Gets each read's body bytes and its arrival (``time.perf_counter_ns``); returns ``MORE``,
``ENOUGH`` (the stream's ``[DONE]``: the rest of the response is read, unseen, so the
connection can be reused) or ``ABORT`` (an error: the connection is closed now)."""
MORE, ENOUGH, ABORT = 0, 1, 2
MAX_HEAD_BYTES = 64 * 1024
READ_BUFFER_BYTES = 256 * 1024
END_WAIT_S = 1.0
"""After a sink has had enough, how long the rest of the response may take to arrive before the
connection is closed instead of reused (vLLM ends the response right after ``[DONE]``)."""


class HttpError(Exception):
    """The connection or the server broke HTTP: the request fails with this message."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host, port and the base URL's path prefix."""

    host: str
    port: int
    tls: bool
    prefix: str
    host_header: str

    @classmethod
    def parse(cls, base_url: str) -> "Origin":
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(host=parts.hostname, port=port, tls=tls, prefix=parts.path.rstrip("/"), host_header=parts.netloc)


class Response:
    """One response, parsed as its bytes arrive: status line and headers, then the body, undone
    from its framing and handed to the sink ``sink_for(status)`` chose. ``finished`` resolves
    when it is over."""

    def __init__(self, sink_for: Callable[[int], BodySink], finished: "asyncio.Future[None]") -> None:
        self.sink_for = sink_for
        self.sink: BodySink | None = None
        self.finished = finished
        self.status = 0
        self.reusable = False
        self.error: str | None = None
        self.received = False
        self._head = b""
        self._in_body = False
        self._chunked = False
        self._left: int | None = None  # Content-Length bytes still to come; None: until close
        self._keep_alive = False
        self._sink_done = False
        self._frame = _Dechunker()
        self._end_timer: asyncio.TimerHandle | None = None

    def feed(self, data: bytes, arrival_ns: int) -> None:
        if self.finished.done():
            return
        self.received = True
        if not self._in_body:
            data = self._feed_head(data)
            if not self._in_body or self.finished.done():
                return
        if self._chunked:
            body, ended = self._frame.feed(data)
        elif self._left is not None:
            body, self._left = data[:self._left], self._left - min(len(data), self._left)
            ended = self._left == 0
        else:
            body, ended = data, False
        if body and not self._sink_done and self.sink is not None:
            try:
                verdict = self.sink(body, arrival_ns)
            except Exception as err:  # a bug in the sink fails this request, not the event loop
                self._fail(f"client error reading the response: {type(err).__name__}: {err}"[:300])
                return
            if verdict == ABORT:
                self._sink_done = True
                self._end(reusable=False)
                return
            if verdict == ENOUGH:
                self._sink_done = True
                if not ended:
                    self._end_timer = asyncio.get_running_loop().call_later(END_WAIT_S, self._give_up)
        if ended:
            self._end(reusable=self._keep_alive)
        elif self._frame.error is not None:
            self._fail(self._frame.error)

    def connection_lost(self) -> None:
        if self.finished.done():
            return
        if self._in_body and (self._sink_done or (not self._chunked and self._left is None)):
            self._end(reusable=False)  # all the caller wanted arrived, or the body ends at close
        else:
            self._fail("the server closed the connection mid-response" if self.received
                       else "the server closed the connection before responding")

    def _feed_head(self, data: bytes) -> bytes:
        """Buffer until the blank line after the headers; return what follows it."""
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self._head = head
            if len(head) > MAX_HEAD_BYTES:
                self._fail("response headers too long")
            return b""
        self._head, rest = b"", head[end + 4:]
        status_line, *lines = head[:end].decode("latin-1").split("\r\n")
        version, _, code = status_line.partition(" ")
        try:
            self.status = int(code[:3])
        except ValueError:
            self._fail(f"bad HTTP status line: {status_line[:80]!r}")
            return b""
        if 100 <= self.status < 200:  # an interim response: the real one follows
            return self._feed_head(rest) if rest else b""
        headers = {name.strip().lower(): value.strip().lower()
                   for name, _, value in (line.partition(":") for line in lines)}
        connection = headers.get("connection", "")
        self._keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        self._chunked = "chunked" in headers.get("transfer-encoding", "")
        if not self._chunked and "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                self._fail(f"bad Content-Length: {headers['content-length'][:40]!r}")
                return b""
        else:
            self._keep_alive = self._keep_alive and self._chunked
        self._in_body = True
        self.sink = self.sink_for(self.status)
        if self._left == 0:
            self._end(reusable=self._keep_alive)
        return rest

    def _give_up(self) -> None:
        self._end(reusable=False)

    def _end(self, *, reusable: bool) -> None:
        if self._end_timer is not None:
            self._end_timer.cancel()
        if not self.finished.done():
            self.reusable = reusable
            self.finished.set_result(None)

    def _fail(self, error: str) -> None:
        self.error = error
        self._end(reusable=False)


class _Dechunker:
    """HTTP/1.1 chunked transfer coding, undone incrementally; a malformed frame sets ``error``."""

    def __init__(self) -> None:
        self._buffer = b""
        self._left = 0  # data bytes of the current chunk still to come
        self._crlf = False  # the CRLF after a chunk's data is still to come
        self._trailer = False
        self.error: str | None = None

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """The body bytes in ``data`` and whether the body ended (the last chunk and trailers)."""
        if not (self._buffer or self._left or self._crlf or self._trailer):
            single = _single_chunk(data)
            if single is not None:
                return single, False
        buffer = self._buffer + data if self._buffer else data
        self._buffer = b""
        parts: list[bytes] = []
        position, size = 0, len(buffer)
        while position < size:
            if self._left:
                take = min(self._left, size - position)
                parts.append(buffer[position:position + take])
                position += take
                self._left -= take
                self._crlf = self._left == 0
                continue
            if self._crlf:
                if size - position < 2:
                    break
                if buffer[position:position + 2] != b"\r\n":
                    self.error = "bad chunked framing: no CRLF after a chunk"
                    return b"".join(parts), False
                position += 2
                self._crlf = False
                continue
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                break
            line = buffer[position:line_end]
            position = line_end + 2
            if self._trailer:
                if not line:
                    return b"".join(parts), True
                continue  # a trailer field
            try:
                self._left = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self.error = f"bad chunked framing: chunk size {line[:20]!r}"
                return b"".join(parts), False
            self._trailer = self._left == 0
        self._buffer = buffer[position:]
        return (parts[0] if len(parts) == 1 else b"".join(parts)), False


def _single_chunk(data: bytes) -> bytes | None:
    """The data of ``data`` when it is exactly one whole non-empty chunk (a server that writes
    each event as its own chunk, read as it was written), else None."""
    line_end = data.find(b"\r\n")
    if line_end <= 0 or not data.endswith(b"\r\n"):
        return None
    try:
        size = int(data[:line_end], 16)
    except ValueError:
        return None  # chunk extensions, or not framing at all: the general path decides
    return data[line_end + 2:-2] if size and line_end + size + 4 == len(data) else None


class _Connection(asyncio.BufferedProtocol):
    """One connection. Buffered: the transport reads into one preallocated buffer, not a fresh
    256 KiB ``bytes`` per read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.lost = False
        self._buffer = memoryview(bytearray(READ_BUFFER_BYTES))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        arrival_ns = time.perf_counter_ns()
        if self.response is not None:
            self.response.feed(self._buffer[:nbytes].tobytes(), arrival_ns)
        elif self.transport is not None:
            self.transport.close()  # bytes outside any response: nothing after them can be trusted

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.response is not None:
            self.response.connection_lost()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class StreamClient:
    """Streamed POSTs to one origin over a pool of keep-alive connections (no limit: the load
    driver bounds how many requests are in flight)."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.origin = Origin.parse(base_url)
        self._ssl = ssl.create_default_context() if self.origin.tls else None
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._head = (f"Host: {self.origin.host_header}\r\nUser-Agent: specfleet\r\nAccept: */*\r\n"
                      f"Content-Type: application/json\r\n{extra}").encode("latin-1")
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def post(self, path: str, body: bytes, sink_for: Callable[[int], BodySink]) -> Response:
        """POST ``body`` (JSON) to ``path`` under the base URL; the response's body goes, as it
        arrives, to the sink ``sink_for(status)`` gives. Returns the response once it is over
        (``error`` set when HTTP broke); raises ``HttpError`` when no connection could be made."""
        request = (f"POST {self.origin.prefix}/{path} HTTP/1.1\r\n".encode("latin-1") + self._head
                   + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
        connection, reused = await self._connection()
        response = await self._exchange(connection, request, sink_for)
        if reused and not response.received and response.error is not None:
            connection, _ = await self._connection(fresh=True)  # the server had closed the idle connection
            response = await self._exchange(connection, request, sink_for)
        return response

    async def _exchange(self, connection: _Connection, request: bytes,
                        sink_for: Callable[[int], BodySink]) -> Response:
        response = Response(sink_for, asyncio.get_running_loop().create_future())
        connection.response = response
        assert connection.transport is not None
        connection.transport.write(request)
        if connection.lost:
            response.connection_lost()
        try:
            await response.finished
        finally:
            connection.response = None
            if response.finished.done() and response.reusable and not connection.lost:
                self._idle.append(connection)
            else:
                connection.close()
                self._open.discard(connection)
        return response

    async def _connection(self, fresh: bool = False) -> tuple[_Connection, bool]:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.lost:
                return connection, True
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        origin = self.origin
        try:
            _, connection = await loop.create_connection(
                _Connection, origin.host, origin.port, ssl=self._ssl,
                server_hostname=origin.host if self._ssl else None)
        except OSError as err:
            raise HttpError(f"cannot connect to {origin.host_header}: {type(err).__name__}: {err}") from err
        self._open.add(connection)
        return connection, False

    async def aclose(self) -> None:
        """Close every connection, and let the event loop finish closing them."""
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)
