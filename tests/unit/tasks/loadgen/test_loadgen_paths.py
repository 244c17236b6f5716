"""The load client on the paths a real deployment takes (``tasks/loadgen/http.py``, ``endpoint.py``):
TLS with a private CA, credentials in the URL, servers that close, stall or never answer, and a
request cancelled mid-stream. Each runs against a real server on loopback: the aiohttp pacing
server of the client benchmark behind TLS, or a scripted asyncio server that does what a
misbehaving one does, and asserts what the client did on the wire (how many requests the
server got, the record's error, no connection left open)."""

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trustme
from typer.testing import CliRunner

from specfleet.contract.prompts import PromptItem
from specfleet.contract.workload import SamplingSpec
from specfleet.errors import InputError
from specfleet_cli.main import app
from specfleet_tasks.canary.context import CanaryLoad, canary_setup
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.loadgen import ClosedLoop, LoadResult, RequestSettings, ServerEndpoint, run_load
from specfleet_tasks.loadgen.endpoint import tls_failure
from specfleet_tasks.loadgen.http import ENOUGH, MORE, HttpError, StreamClient
from tests.support.sse_streams import COMPLETION_STREAM

ROOT = Path(__file__).parents[4]
PACING_SERVER = ROOT / "benchmarks" / "aiohttp_stream_server.py"
PROMPTS = [PromptItem(id=f"p{i}", prompt=f"prompt {i}") for i in range(4)]
SETTINGS = RequestSettings(route="completions", max_tokens=4, ignore_eos=True, sampling=SamplingSpec(), timeout_s=10.0)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
runner = CliRunner()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


# --- TLS: the benchmark's aiohttp server with a certificate from a CA made here ---------------

@dataclass(frozen=True)
class TlsServer:
    url: str
    ca_bundle: Path
    process: "subprocess.Popen[str]"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    issued.private_key_pem.write_to_path(str(folder / "key.pem"))
    process = subprocess.Popen([sys.executable, str(PACING_SERVER), "--ms-per-token", "1",
                                "--certfile", str(folder / "cert.pem"), "--keyfile", str(folder / "key.pem")],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("listening on "), line
        yield TlsServer("https://" + line.removeprefix("listening on ").strip(), folder / "ca.pem", process)
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_tls_streams_with_the_private_ca_and_fails_naming_the_certificate_without_it(tls_server: TlsServer) -> None:
    def load(endpoint: ServerEndpoint) -> LoadResult:
        return asyncio.run(run_load(endpoint, PROMPTS, SETTINGS, ClosedLoop(2), requests=6, warmup_requests=1))

    trusted = load(ServerEndpoint.from_url(tls_server.url, "synthetic", ca_bundle=tls_server.ca_bundle))
    assert [(r.ok, r.usage_completion_tokens) for r in trusted.records] == [(True, 4)] * 6
    untrusted = load(ServerEndpoint.from_url(tls_server.url, "synthetic"))
    errors = {r.error for r in untrusted.records}
    assert len(errors) == 1
    assert next(iter(errors)).startswith(f"cannot connect to {tls_server.url.removeprefix('https://')}: "
                                         "TLS certificate not trusted (")
    unverified = load(ServerEndpoint.from_url(tls_server.url, "synthetic", insecure=True))
    assert all(r.ok for r in unverified.records)


def test_measure_over_tls_needs_the_ca_bundle_and_says_how_it_verified(tls_server: TlsServer, tmp_path: Path) -> None:
    command = ["measure", "--endpoint", tls_server.url, "--model", "synthetic", "--prompts", "code",
               "--concurrency", "2", "--requests", "4", "--warmup", "0", "--max-tokens", "4", "--json"]
    refused = runner.invoke(app, command)
    assert refused.exit_code == 2
    [line] = refused.stderr.strip().splitlines()
    assert f"--endpoint {tls_server.url}: TLS certificate not trusted (" in line
    assert line.endswith("give its CA with --ca-bundle FILE")
    measured = runner.invoke(app, [*command, "--ca-bundle", str(tls_server.ca_bundle)])
    assert measured.exit_code == 0, measured.stderr
    result = json.loads(measured.stdout)
    assert (result["completed"], result["failed"], result["tls_verification"]) == (4, 0, "ca bundle")
    insecure = json.loads(runner.invoke(app, [*command, "--insecure"]).stdout)
    assert (insecure["completed"], insecure["tls_verification"]) == (4, "off (--insecure)")
    bad_bundle = tmp_path / "not-a-ca.pem"
    bad_bundle.write_text("hello\n")
    refused = runner.invoke(app, [*command, "--ca-bundle", str(bad_bundle)])
    assert refused.exit_code == 2 and f"--ca-bundle {bad_bundle}: not a PEM certificate bundle" in refused.stderr


def test_canary_replicas_over_tls_take_the_ca_bundle_and_the_urls_credentials(tls_server: TlsServer,
                                                                            tmp_path: Path) -> None:
    load = CanaryLoad(1, None, 2, 0, 4, 0.0)
    with_credentials = tls_server.url.replace("https://", "https://ops:hunter2@")
    replicas, _ = canary_setup(with_credentials, tls_server.url, None, None, ["code"], load, None, None, tmp_path,
                               None, None, ca_bundle=tls_server.ca_bundle, baseline_twin=tls_server.url)
    assert {name: (r.base_url, r.model, r.tls_verification) for name, r in replicas.items()} == dict.fromkeys(
        ("baseline", "candidate", "twin"), (tls_server.url, "synthetic", "ca bundle"))
    assert replicas["baseline"].headers() == {"Authorization": "Basic b3BzOmh1bnRlcjI="}
    assert replicas["candidate"].headers() == {} == replicas["twin"].headers()
    with pytest.raises(InputError, match=r"^--baseline-twin http://127\.0\.0\.1:9: unreachable"):
        canary_setup(with_credentials, tls_server.url, None, None, ["code"], load, None, None, tmp_path, None, None,
                     ca_bundle=tls_server.ca_bundle, baseline_twin="http://127.0.0.1:9")
    with pytest.raises(InputError, match=r"^--baseline https://127\.0\.0\.1:\d+: TLS certificate not trusted"):
        canary_setup(with_credentials, tls_server.url, None, None, ["code"], load, None, None, tmp_path, None, None)


def test_an_arm_server_given_a_certificate_is_checked_over_https_with_the_configs_ca(tls_server: TlsServer,
                                                                                   tmp_path: Path) -> None:
    port = int(tls_server.url.rsplit(":", 1)[1])
    args = ["--ssl-certfile", "cert.pem", "--ssl-keyfile", "key.pem"]
    server = ArmServer(args, {}, "127.0.0.1", port, tmp_path / "server.log", 10, ca_bundle=tls_server.ca_bundle)
    assert server.base_url == tls_server.url and server.endpoint("m").tls_verification == "ca bundle"
    server.process, server._launched = tls_server.process, time.monotonic()  # the TLS server plays vLLM
    try:
        server.wait_healthy()
        assert server.startup_s is not None
    finally:
        server.process = None  # the module's server: not this test's to stop
    unverified = ArmServer(args, {}, "127.0.0.1", port, tmp_path / "server.log", 10)
    with pytest.raises(httpx.ConnectError) as refused, unverified.endpoint("").client(2.0) as client:
        client.get("/health")
    assert (tls_failure(refused.value) or "").startswith("TLS certificate not trusted (")


# --- A scripted server: what it received, connection by connection ---------------------------

@dataclass
class Seen:
    """One connection on the server's side: the request bodies it read, and whether the client closed it."""

    bodies: list[bytes] = field(default_factory=list)
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)


Script = Callable[[int, int, asyncio.StreamWriter], Awaitable[bool]]
"""(connection number, request number on it, writer) -> keep the connection open? An open one is
read again, so a script that stops writing stalls the response and the server sees the client's close."""


class ScriptedServer:
    """Reads whole requests; answers each as ``script`` says; records everything it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections: list[Seen] = []
        self.hosts: list[str] = []
        self.authorizations: list[str | None] = []

    @property
    def requests(self) -> int:
        return sum(len(c.bodies) for c in self.connections)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen = Seen()
        self.connections.append(seen)
        number = len(self.connections)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = {n.strip().lower(): v.strip() for n, _, v in (h.partition(":") for h in head[1:] if h)}
                seen.bodies.append(await reader.readexactly(int(headers["content-length"])))
                self.hosts.append(headers["host"])
                self.authorizations.append(headers.get("authorization"))
                if not await self.script(number, len(seen.bodies), writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            seen.client_closed.set()
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()


async def stream_whole(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + chunk(COMPLETION_STREAM) + b"0\r\n\r\n")
    await writer.drain()


async def answer(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
    await stream_whole(writer)
    return True


def sink_until_done(received: list[bytes]) -> Callable[[int], Callable[[bytes, int], int]]:
    def sink(data: bytes, arrival_ns: int) -> int:
        received.append(data)
        return ENOUGH if b"[DONE]" in b"".join(received) else MORE
    return lambda status: sink


async def post(client: StreamClient) -> tuple[int, str | None]:
    response = await client.post("v1/completions", b"{}", sink_until_done([]))
    return response.status, response.error


def test_a_pooled_connection_the_server_closed_while_idle_is_replaced_before_the_request_is_written() -> None:
    """The server's close arrives while the client's event loop is not running (so only the
    pooled connection's own check can see it), just before the next request."""
    idle: list[asyncio.StreamWriter] = []

    async def answer_and_keep(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        await stream_whole(writer)
        idle.append(writer)
        return True

    async def main() -> tuple[list[tuple[int, str | None]], ScriptedServer, StreamClient]:
        server = ScriptedServer(answer_and_keep)
        async with server as address:
            client = StreamClient(f"http://{address}", {})
            first = await post(client)
            idle[0].get_extra_info("socket").shutdown(socket.SHUT_WR)  # the FIN, sent now
            second = await post(client)
            await client.aclose()
        return [first, second], server, client

    outcomes, server, client = asyncio.run(main())
    assert [len(c.bodies) for c in server.connections] == [1, 1]  # the second went on a new connection
    assert outcomes == [(200, None), (200, None)]
    assert client.open_connections == 0


def test_a_request_the_server_read_before_closing_fails_and_is_never_sent_again() -> None:
    async def read_then_close(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        if connection == 1 and request == 2:
            return False  # read the request (a generation may have started), then close without a byte
        await stream_whole(writer)
        return True

    async def main() -> tuple[list[tuple[int, str | None]], ScriptedServer, StreamClient]:
        server = ScriptedServer(read_then_close)
        async with server as address:
            client = StreamClient(f"http://{address}", {})
            outcomes = [await post(client), await post(client)]
        return outcomes, server, client

    outcomes, server, client = asyncio.run(main())
    assert server.requests == 2 and len(server.connections) == 1  # no second copy of the POST
    assert outcomes == [(200, None), (0, "the server closed the connection before responding")]
    assert client.open_connections == 0


def test_a_server_that_stalls_after_done_is_given_up_on_and_its_connection_closed() -> None:
    async def stall_after_done(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD + chunk(COMPLETION_STREAM))  # [DONE], but the body never ends
        await writer.drain()
        return True  # and writes nothing more: the server goes back to reading, and sees the client's close

    async def main() -> tuple[tuple[int, str | None], int]:
        server = ScriptedServer(stall_after_done)
        async with server as address:
            client = StreamClient(f"http://{address}", {}, end_wait_s=0.05)
            outcome = await post(client)
            await asyncio.wait_for(server.connections[0].client_closed.wait(), 10)  # fails if never closed
            return outcome, client.open_connections

    assert asyncio.run(main()) == ((200, None), 0)


def test_a_server_that_stalls_mid_response_times_out_keeping_what_arrived() -> None:
    first_event = COMPLETION_STREAM[:COMPLETION_STREAM.index(b"\n\n") + 2]

    async def stall_mid_response(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD + chunk(first_event))
        await writer.drain()
        return True  # and writes nothing more: the server goes back to reading, and sees the client's close

    async def main() -> tuple[LoadResult, bool]:
        server = ScriptedServer(stall_mid_response)
        async with server as address:
            settings = RequestSettings(route="completions", max_tokens=4, ignore_eos=True, sampling=SamplingSpec(),
                                       timeout_s=0.3)
            result = await run_load(ServerEndpoint(f"http://{address}", "m"), PROMPTS, settings, ClosedLoop(1),
                                    requests=1, warmup_requests=0)
            await asyncio.wait_for(server.connections[0].client_closed.wait(), 10)
            return result, server.requests == 1

    result, once = asyncio.run(main())
    [record] = result.records
    assert (record.error, record.chunk_tokens, once) == ("timed out after 0.3 s", (1,), True)


def test_a_request_cancelled_mid_stream_closes_its_connection() -> None:
    first_read = asyncio.Event()

    async def stream_slowly(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD + chunk(COMPLETION_STREAM[:20]))
        await writer.drain()
        return True  # and writes nothing more: the server goes back to reading, and sees the client's close

    def sink(data: bytes, arrival_ns: int) -> int:
        first_read.set()
        return MORE

    async def main() -> tuple[bool, int, int]:
        server = ScriptedServer(stream_slowly)
        async with server as address:
            client = StreamClient(f"http://{address}", {})
            request = asyncio.create_task(client.post("v1/completions", b"{}", lambda status: sink))
            await first_read.wait()
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            await asyncio.wait_for(server.connections[0].client_closed.wait(), 10)
            return request.cancelled(), client.open_connections, server.requests

    assert asyncio.run(main()) == (True, 0, 1)


def test_a_handshake_that_never_completes_hits_the_connect_timeout() -> None:
    async def silent(connection: int, request: int, writer: asyncio.StreamWriter) -> bool:
        return True  # never reached: the client's TLS hello is not an HTTP request

    async def main() -> tuple[str, int]:
        server = ScriptedServer(silent)
        async with server as address:
            client = StreamClient(f"https://{address}", {}, connect_timeout_s=0.2)
            with pytest.raises(HttpError) as raised:
                await post(client)
            return str(raised.value), client.open_connections

    message, open_after = asyncio.run(main())
    assert message.endswith(": no connection within 0.2 s (the connect timeout)") and open_after == 0


# --- Credentials in the URL -------------------------------------------------------------------

def test_the_host_header_never_carries_the_urls_credentials() -> None:
    async def main() -> tuple[ScriptedServer, str]:
        server = ScriptedServer(answer)
        async with server as address:
            client = StreamClient(f"http://user:s3cret@{address}/", {})
            await post(client)
            await client.aclose()
        return server, address

    server, address = asyncio.run(main())
    assert server.hosts == [address]


def test_credentials_in_the_url_become_a_basic_authorization_header() -> None:
    async def main() -> tuple[ScriptedServer, str, LoadResult]:
        server = ScriptedServer(answer)
        async with server as address:
            endpoint = ServerEndpoint.from_url(f"http://us%40er:p%3Ass@{address}/prefix", "m")
            result = await run_load(endpoint, PROMPTS, SETTINGS, ClosedLoop(1), requests=1, warmup_requests=0)
        return server, address, result

    server, address, result = asyncio.run(main())
    assert result.records[0].ok
    assert server.authorizations == ["Basic dXNAZXI6cDpzcw=="]  # base64("us@er:p:ss")
    endpoint = ServerEndpoint.from_url(f"http://us%40er:p%3Ass@{address}/prefix", "m")
    assert endpoint.base_url == f"http://{address}/prefix"
    assert "p%3Ass" not in repr(endpoint) and "dXNAZXI6cDpzcw" not in repr(endpoint)
    with pytest.raises(InputError, match=r"--endpoint http://127\.0\.0\.1:\d+/prefix: the URL holds credentials "
                                         "and an API key is given too"):
        ServerEndpoint.from_url(f"http://user:pw@{address}/prefix", "m", api_key="sk-1")
    with pytest.raises(InputError, match=r"^--baseline http://127\.0\.0\.1:abc: Port could not be cast"):
        ServerEndpoint.from_url("http://user:pw@127.0.0.1:abc", "m", flag="--baseline")


def test_measure_never_shows_or_stores_the_urls_credentials(tls_server: TlsServer, tmp_path: Path) -> None:
    url = tls_server.url.replace("https://", "https://admin:hunter2@")
    out = tmp_path / "out"
    command = ["measure", "--endpoint", url, "--model", "synthetic", "--prompts", "code", "--concurrency", "1",
               "--requests", "2", "--warmup", "0", "--max-tokens", "4", "--out", str(out)]
    measured = runner.invoke(app, [*command, "--ca-bundle", str(tls_server.ca_bundle), "--json"])
    assert measured.exit_code == 0, measured.stderr
    assert json.loads(measured.stdout)["completed"] == 2
    refused = runner.invoke(app, command)  # no CA: the error line names the URL without its credentials
    assert refused.exit_code == 2 and "TLS certificate not trusted" in refused.stderr
    shown = measured.stdout + measured.stderr + refused.stdout + refused.stderr
    assert "hunter2" not in shown and "admin" not in shown
    stored = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    assert stored and not any(b"hunter2" in data or b"YWRtaW46aHVudGVyMg" in data for data in stored)
