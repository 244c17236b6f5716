"""The prefix-cache reset before each cell, against a small real HTTP server answering as vLLM
does: ``{"success": true}``, ``{"success": false}`` while KV blocks are held by requests in
flight, and 404 where its dev endpoints are off."""

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from specfleet_tasks.arm.cell import NO_RESET_ENDPOINT, PrefixCacheReset, reset_prefix_cache


@dataclass
class FakeVllm:
    """A server whose requests in flight drop by one each time ``/metrics`` is read, from
    ``in_flight``; it refuses a reset while any is in flight, or always with ``stuck``."""

    in_flight: int = 0
    stuck: bool = False
    dev_endpoints: bool = True
    resets: list[bool] = field(default_factory=list)
    scrapes: int = 0

    def metrics(self) -> str:
        self.scrapes += 1
        text = (f"vllm:num_requests_running{{engine=\"0\"}} {max(self.in_flight - 1, 0)}\n"
                f"vllm:num_requests_waiting{{engine=\"0\"}} {min(self.in_flight, 1)}\n")
        if not self.stuck:
            self.in_flight = max(self.in_flight - 1, 0)
        return text

    def reset(self) -> bool:
        self.resets.append(self.in_flight == 0 and not self.stuck)
        return self.resets[-1]


def _handler(state: FakeVllm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, state.metrics(), "text/plain")
            else:
                self._send(404, "{}")

        def do_POST(self) -> None:
            if self.path == "/reset_prefix_cache" and state.dev_endpoints:
                self._send(200, json.dumps({"success": state.reset()}))
            else:
                self._send(404, json.dumps({"detail": "Not Found"}))

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


Serve = Callable[[FakeVllm], str]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[ThreadingHTTPServer] = []

    def start(state: FakeVllm) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _reset(url: str, drain_timeout_s: float = 60.0) -> PrefixCacheReset:
    async def main() -> PrefixCacheReset:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            return await reset_prefix_cache(client, drain_timeout_s=drain_timeout_s, poll_s=0.01)

    return asyncio.run(main())


def test_an_idle_server_resets_at_once(serve: Serve) -> None:
    state = FakeVllm()
    assert _reset(serve(state)) == PrefixCacheReset()
    assert state.resets == [True] and state.scrapes == 0


def test_a_refused_reset_waits_for_requests_in_flight_to_drain_and_tries_again(serve: Serve) -> None:
    state = FakeVllm(in_flight=3)
    assert _reset(serve(state)) == PrefixCacheReset()
    assert state.resets == [False, True]  # tried again only once the gauges read none in flight
    assert state.scrapes == 4 and state.in_flight == 0  # the gauges read 3, 2, 1, then 0 in flight


def test_a_reset_refused_past_the_bound_marks_the_cell(serve: Serve) -> None:
    state = FakeVllm(in_flight=2, stuck=True)
    outcome = _reset(serve(state), drain_timeout_s=0.2)
    assert outcome.distrusted and outcome.reason is not None
    assert "success false" in outcome.reason and "requests in flight at the end: 2" in outcome.reason
    assert state.resets[0] is False and not any(state.resets)


def test_without_the_dev_endpoint_the_cell_says_the_cache_was_not_reset(serve: Serve) -> None:
    state = FakeVllm(dev_endpoints=False)
    assert _reset(serve(state)) == PrefixCacheReset(NO_RESET_ENDPOINT, distrusted=False)
    assert state.scrapes == 0
