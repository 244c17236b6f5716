"""The quality probe's requests against a canned loopback server: route, sampling and output cap
per item, answers as text, a refused item kept with its error, a dead server raising."""

import asyncio
import json

import httpx
import pytest

from specfleet.contract import SamplingSpec
from specfleet.gates.scored_set import parse_scored_set
from specfleet_tasks.arm.probes import answer_probe
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.loadgen import ServerEndpoint

ITEMS = parse_scored_set(
    '{"id": "c1", "prompt": "def f(x):", "reference": "return", "scorer": "contains", "max_tokens": 9}\n'
    '{"id": "m1", "messages": [{"role": "user", "content": "Hi"}], "reference": "Hello", "scorer": "exact"}\n'
    '{"id": "c2", "prompt": "too long", "reference": "x", "scorer": "exact"}\n', "scored.jsonl")


class Canned:
    """Answers completions with " return x" and chat with "Hello"; refuses the prompt "too long"."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, object]]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        headers = dict(line.lower().split(": ", 1) for line in head.split("\r\n")[1:] if line)
        length = int(headers["content-length"])
        body = json.loads(await reader.readexactly(length))
        path = head.split()[1]
        self.requests.append((path, body))
        if body.get("prompt") == "too long":
            status, payload = "400 Bad Request", {"error": {"message": "prompt too long"}}
        elif path == "/v1/chat/completions":
            status, payload = "200 OK", {"choices": [{"message": {"role": "assistant", "content": "Hello"}}]}
        else:
            status, payload = "200 OK", {"choices": [{"text": " return x"}]}
        data = json.dumps(payload).encode()
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     "Connection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()

    def probe(self, sampling: SamplingSpec) -> tuple[dict[str, str | None], dict[str, str]]:
        async def main() -> tuple[dict[str, str | None], dict[str, str]]:
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                endpoint = ServerEndpoint(f"http://127.0.0.1:{port}", "tiny")
                return await answer_probe(endpoint, [i.as_prompt() for i in ITEMS], 32, sampling)
        return asyncio.run(main())


def test_each_item_is_asked_on_its_route_with_the_sampling_mode_and_its_own_cap() -> None:
    canned = Canned()
    answers, errors = canned.probe(SamplingSpec(name="t07", temperature=0.7, top_p=0.9, seed=5))
    assert answers == {"c1": " return x", "m1": "Hello", "c2": None}
    assert errors == {"c2": 'HTTP 400: {"error": {"message": "prompt too long"}}'}
    bodies = {body.get("prompt", "chat"): (path, body) for path, body in canned.requests}
    path, chat = bodies["chat"]
    assert path == "/v1/chat/completions" and chat["messages"] == [{"role": "user", "content": "Hi"}]
    path, body = bodies["def f(x):"]
    assert path == "/v1/completions"
    assert body == {"model": "tiny", "prompt": "def f(x):", "temperature": 0.7, "top_p": 0.9, "seed": 5,
                    "max_tokens": 9}  # the model ends an answer: no ignore_eos
    assert chat["max_tokens"] == 32  # no cap of its own: the class's


def test_a_server_that_is_gone_raises_as_the_other_probes_do() -> None:
    endpoint = ServerEndpoint(f"http://127.0.0.1:{free_port('127.0.0.1')}", "tiny")
    with pytest.raises(httpx.ConnectError):
        asyncio.run(answer_probe(endpoint, [ITEMS[0].as_prompt()], 8, SamplingSpec()))
