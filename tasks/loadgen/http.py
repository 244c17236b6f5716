"""A small HTTP/1.1 client for streamed POSTs: one asyncio protocol per connection, keep-alive pool;
the responses are parsed by llhttp (``httptools``, the parser uvicorn serves vLLM with).

Why not aiohttp: against a server that writes one SSE event per HTTP chunk (vLLM's API
server), aiohttp's response stream makes about ten Python calls per chunk and wakes the
request's task on every read. Here the transport reads into one preallocated buffer and hands
each read straight to the response's parser: its body goes to the request's sink with the
read's arrival stamp, and the request's task wakes once, when the response ends
(docs/benchmarks.md, "Client capacity").

Covers what a load run needs: ``http``/``https`` (the caller's TLS context, a connect timeout
that covers the handshake), a base-URL path prefix, chunked, ``Content-Length`` and
close-delimited bodies, keep-alive. A POST starts a generation, so it is never sent twice: a
pooled connection is checked before it is written to (closed by the server, bytes nobody asked
for, idle past ``IDLE_LIMIT_S``: a fresh one is opened instead, as urllib3's
``is_connection_dropped`` does), and once the request is written every failure is the request's
error. Proxies are never used.
"""

import asyncio
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

BodySink = Callable[[bytes, int], int]
"""Gets each read's body bytes and its arrival (``time.perf_counter_ns``); returns ``MORE``,
``ENOUGH`` (the stream's ``[DONE]``: the rest of the response is read, unseen, so the
connection can be reused) or ``ABORT`` (an error: the connection is closed now)."""
MORE, ENOUGH, ABORT = 0, 1, 2
READ_BUFFER_BYTES = 256 * 1024
END_WAIT_S = 1.0
"""After a sink has had enough, how long the rest of the response may take to arrive before the
connection is closed instead of reused (vLLM ends the response right after ``[DONE]``)."""
CONNECT_TIMEOUT_S = 10.0
"""How long a new connection (TCP and the TLS handshake) may take, apart from the request's timeout."""
IDLE_LIMIT_S = 4.0
"""A pooled connection idle longer than this is closed, not reused: below uvicorn's (vLLM's) 5 s
keep-alive timeout, so the client does not write into a connection the server is closing."""


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
        host_header = parts.netloc.rpartition("@")[2]  # never the URL's credentials
        return cls(host=parts.hostname, port=port, tls=tls, prefix=parts.path.rstrip("/"), host_header=host_header)


class Response:
    """One response, parsed as its bytes arrive by llhttp (``httptools``, the parser uvicorn uses):
    status and headers, then the body, undone from its framing and handed to the sink
    ``sink_for(status)`` chose, with the read's arrival stamp. ``finished`` resolves when it is over."""

    def __init__(self, sink_for: Callable[[int], BodySink], finished: "asyncio.Future[None]",
                 end_wait_s: float = END_WAIT_S) -> None:
        self.sink_for = sink_for
        self.end_wait_s = end_wait_s
        self.sink: BodySink | None = None
        self.finished = finished
        self.status = 0
        self.reusable = False
        self.error: str | None = None
        self.received = False
        self._parser = httptools.HttpResponseParser(self)
        self._arrival_ns = 0
        self._framed = False  # chunked or sized: the body's end is known without the connection's close
        self._sink_done = False
        self._end_timer: asyncio.TimerHandle | None = None

    def feed(self, data: memoryview, arrival_ns: int) -> None:
        if self.finished.done():
            return
        self.received = True
        self._arrival_ns = arrival_ns
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(f"bad HTTP response: {err}"[:300])

    def connection_lost(self) -> None:
        if self.finished.done():
            return
        if self.sink is not None and (self._sink_done or not self._framed):
            self._end(reusable=False)  # all the caller wanted arrived, or the body ends at close
        else:
            self._fail("the server closed the connection mid-response" if self.received
                       else "the server closed the connection before responding")

    # llhttp's callbacks
    def on_message_begin(self) -> None:
        if self.finished.done():  # bytes after the response, asked for by no request: the connection is spent
            self.reusable = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        if self.finished.done():
            return
        self.status = self._parser.get_status_code()
        if self.status >= 200:  # an interim (1xx) response has no body: the real one follows
            self.sink = self.sink_for(self.status)

    def on_body(self, body: bytes) -> None:
        if self._sink_done or self.sink is None or self.finished.done():
            return
        try:
            verdict = self.sink(body, self._arrival_ns)
        except Exception as err:  # a bug in the sink fails this request, not the event loop
            self._fail(f"client error reading the response: {type(err).__name__}: {err}"[:300])
            return
        if verdict == ABORT:
            self._sink_done = True
            self._end(reusable=False)
        elif verdict == ENOUGH:
            self._sink_done = True
            self._end_timer = asyncio.get_running_loop().call_later(self.end_wait_s, self._give_up)

    def on_message_complete(self) -> None:
        if self.sink is not None:
            self._end(reusable=self._parser.should_keep_alive())

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


class _Connection(asyncio.BufferedProtocol):
    """One connection. Buffered: the transport reads into one preallocated buffer, not a fresh
    256 KiB ``bytes`` per read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.lost = False
        self.idle_since = 0.0
        self._buffer = memoryview(bytearray(READ_BUFFER_BYTES))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        arrival_ns = time.perf_counter_ns()
        if self.response is not None:
            self.response.feed(self._buffer[:nbytes], arrival_ns)
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
    driver bounds how many requests are in flight). ``ssl_context`` verifies an ``https`` origin
    (default: the system store)."""

    def __init__(self, base_url: str, headers: dict[str, str], *, ssl_context: ssl.SSLContext | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, end_wait_s: float = END_WAIT_S,
                 idle_limit_s: float = IDLE_LIMIT_S) -> None:
        self.origin = Origin.parse(base_url)
        self._ssl = (ssl_context or ssl.create_default_context()) if self.origin.tls else None
        self.connect_timeout_s, self.end_wait_s, self.idle_limit_s = connect_timeout_s, end_wait_s, idle_limit_s
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._head = (f"Host: {self.origin.host_header}\r\nUser-Agent: specfleet\r\nAccept: */*\r\n"
                      f"Content-Type: application/json\r\n{extra}").encode("latin-1")
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def post(self, path: str, body: bytes, sink_for: Callable[[int], BodySink]) -> Response:
        """POST ``body`` (JSON) to ``path`` under the base URL; the response's body goes, as it
        arrives, to the sink ``sink_for(status)`` gives. Returns the response once it is over
        (``error`` set when HTTP broke; the request was sent once and is never sent again); raises
        ``HttpError`` when no connection could be made."""
        request = (f"POST {self.origin.prefix}/{path} HTTP/1.1\r\n".encode("latin-1") + self._head
                   + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
        connection = await self._connection()
        if connection.lost:  # closed before a byte of the request was written: nothing reached the server
            self._open.discard(connection)
            connection = await self._connection(fresh=True)
        return await self._exchange(connection, request, sink_for)

    async def _exchange(self, connection: _Connection, request: bytes,
                        sink_for: Callable[[int], BodySink]) -> Response:
        response = Response(sink_for, asyncio.get_running_loop().create_future(), self.end_wait_s)
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
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()
                self._open.discard(connection)
        return response

    def _reusable(self, connection: _Connection) -> bool:
        """Whether a pooled connection can carry a request: open, idle within the limit, and with
        nothing to read (a readable idle socket has the server's close or bytes nobody asked for)."""
        if connection.lost or connection.transport is None or \
                time.monotonic() - connection.idle_since > self.idle_limit_s:
            return False
        sock = connection.transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    async def _connection(self, fresh: bool = False) -> _Connection:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if self._reusable(connection):
                return connection
            connection.close()
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        origin = self.origin
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    _Connection, origin.host, origin.port, ssl=self._ssl,
                    server_hostname=origin.host if self._ssl else None)
        except TimeoutError:
            raise HttpError(f"cannot connect to {origin.host_header}: no connection within "
                            f"{self.connect_timeout_s:g} s (the connect timeout)") from None
        except ssl.SSLCertVerificationError as err:
            raise HttpError(f"cannot connect to {origin.host_header}: TLS certificate not trusted "
                            f"({err.verify_message})") from err
        except OSError as err:
            raise HttpError(f"cannot connect to {origin.host_header}: {type(err).__name__}: {err}") from err
        self._open.add(connection)
        return connection

    async def aclose(self) -> None:
        """Close every connection, and let the event loop finish closing them."""
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)
