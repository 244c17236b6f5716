"""A synthetic OpenAI-compatible streaming server, for benchmarking specfleet's *client* only.

It is never a stand-in for vLLM in tests of measurement: it generates no text, has no
scheduler, and its token counts are whatever it is told to emit. It exists to find how
many streams and tokens per second the Python client can ingest, and how far its
timestamps trail the moment a chunk was written.

- Paced (``--ms-per-token > 0``): each stream emits one chunk of ``--tokens-per-chunk``
  tokens every ``ms-per-token * tokens-per-chunk`` ms, on an absolute schedule, and logs
  the CLOCK_MONOTONIC time of every write (``GET /send_log`` returns and clears it,
  keyed by prompt). On Linux the client's ``time.perf_counter_ns`` reads the same clock.
- Unpaced (``--ms-per-token 0``): the whole response is pre-built, and one stepping loop
  writes ``--chunks-per-write`` events (one HTTP chunk) to every open stream per step, then
  lets the event loop run; ``--step-ms`` spaces the steps like an engine's decode steps.
  With ``--chunks-per-write 1`` that is how vLLM's API server streams (each engine step's
  delta is one write on every stream); larger values write blocks of events. A stream whose
  client has not read its last writes is skipped that step.

Chunks follow vLLM's format with ``continuous_usage_stats``: cumulative usage in every
chunk, a trailing usage-only chunk, then ``data: [DONE]``. Binds 127.0.0.1 only; prints
``listening on 127.0.0.1:PORT`` once ready. ``GET /v1/models`` lists the one model,
``synthetic``, so ``specfleet measure`` accepts the server.
"""

import argparse
import asyncio
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

HOST = "127.0.0.1"
TOKEN_TEXT = " tok"
MODEL = "synthetic"
WRITE_BUFFER_LIMIT = 64 * 1024
"""A stream with more unsent bytes than this is skipped for a step (its client is behind)."""
IDLE_STEP_S = 0.0005


@dataclass
class Stepping:
    """One unpaced stream in the stepping loop: what is left to write, and its end."""

    writer: asyncio.StreamWriter
    frames: Iterator[bytes]
    done: "asyncio.Future[None]"


@dataclass
class ServerState:
    ms_per_token: float
    tokens_per_chunk: int
    chunks_per_write: int
    step_ms: float = 0.0
    send_log_ns: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    prebuilt: dict[tuple[bool, int, int], list[bytes]] = field(default_factory=dict)
    stepping: list[Stepping] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _chunk_events(chat: bool, prompt_tokens: int, max_tokens: int, tokens_per_chunk: int) -> list[bytes]:
    """vLLM-shaped events for one response, in order, ending with ``[DONE]``."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    base: dict[str, object] = {"id": "synthetic", "object": kind, "created": 0, "model": MODEL}

    def usage(done: int) -> dict[str, int]:
        return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + done,
                "completion_tokens": done}

    events: list[bytes] = []
    if chat:
        first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        events.append(_event(base | {"choices": [first], "usage": usage(0)}))
    done = 0
    while done < max_tokens:
        step = min(tokens_per_chunk, max_tokens - done)
        done += step
        finish = "length" if done == max_tokens else None
        text = TOKEN_TEXT * step
        choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                  else {"index": 0, "text": text, "finish_reason": finish})
        events.append(_event(base | {"choices": [choice], "usage": usage(done)}))
    events.append(_event(base | {"choices": [], "usage": usage(done)}))
    events.append(b"data: [DONE]\n\n")
    return events


def _framed(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _stream(writer: asyncio.StreamWriter, state: ServerState, body: dict[str, object],
                  chat: bool) -> None:
    requested = body.get("max_tokens")
    max_tokens = requested if isinstance(requested, int) and requested > 0 else 16
    prompt = _prompt_key(body, chat)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
    if state.ms_per_token <= 0:
        await _write_unpaced(writer, state, chat, len(prompt.split()), max_tokens)
    else:
        await _write_paced(writer, state, prompt, _chunk_events(chat, len(prompt.split()), max_tokens,
                                                                 state.tokens_per_chunk), chat)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _write_unpaced(writer: asyncio.StreamWriter, state: ServerState, chat: bool,
                         prompt_tokens: int, max_tokens: int) -> None:
    key = (chat, prompt_tokens, max_tokens)
    if key not in state.prebuilt:
        events = _chunk_events(chat, prompt_tokens, max_tokens, state.tokens_per_chunk)
        step = state.chunks_per_write
        state.prebuilt[key] = [_framed(b"".join(events[i:i + step])) for i in range(0, len(events), step)]
    done = asyncio.get_running_loop().create_future()
    state.stepping.append(Stepping(writer, iter(state.prebuilt[key]), done))
    state.wake.set()
    await done


async def _step(state: ServerState) -> None:
    """The unpaced streams' one writer: per step, the next frame of every stream, then the
    event loop runs (reads, new requests) before the next step, which starts ``step_ms`` after
    the last one began (at once when it is late)."""
    step_ns = int(state.step_ms * 1_000_000)
    due_ns = time.monotonic_ns()
    while True:
        if not state.stepping:
            state.wake.clear()
            await state.wake.wait()
            due_ns = time.monotonic_ns()
        if step_ns:
            wait_ns = due_ns - time.monotonic_ns()
            if wait_ns > 0:
                await asyncio.sleep(wait_ns / 1e9)
            due_ns = max(due_ns + step_ns, time.monotonic_ns())
        open_streams: list[Stepping] = []
        wrote = False
        for stream in state.stepping:
            transport = stream.writer.transport
            if transport.is_closing():
                stream.done.set_result(None)
                continue
            open_streams.append(stream)
            if transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                continue
            frame = next(stream.frames, None)
            if frame is None:
                stream.done.set_result(None)
                open_streams.pop()
                continue
            stream.writer.write(frame)
            wrote = True
        state.stepping = open_streams
        if not step_ns:
            await asyncio.sleep(0 if wrote else IDLE_STEP_S)


async def _write_paced(writer: asyncio.StreamWriter, state: ServerState, prompt: str,
                       events: list[bytes], chat: bool) -> None:
    """Content chunks on an absolute schedule, each write's time logged under the prompt."""
    interval_ns = int(state.ms_per_token * state.tokens_per_chunk * 1_000_000)
    log = state.send_log_ns[prompt]
    if chat:
        writer.write(_framed(events[0]))
    start_ns = time.monotonic_ns()
    for i, event in enumerate(events[1 if chat else 0:-2], start=1):
        delay_ns = start_ns + i * interval_ns - time.monotonic_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)
        log.append(time.monotonic_ns())
        writer.write(_framed(event))
        await writer.drain()
    writer.write(_framed(b"".join(events[-2:])))


def _prompt_key(body: dict[str, object], chat: bool) -> str:
    if not chat:
        return str(body.get("prompt", ""))
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else {}
    return str(last.get("content", "")) if isinstance(last, dict) else ""


def _respond_json(writer: asyncio.StreamWriter, status: str, payload: object) -> None:
    data = json.dumps(payload).encode()
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: keep-alive\r\n\r\n".encode() + data)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: ServerState) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            fields = (h.partition(":") for h in header_lines if h)
            headers = {k.strip().lower(): v.strip() for k, _, v in fields}
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                await _stream(writer, state, json.loads(raw), chat=path.endswith("chat/completions"))
            elif method == "GET" and path == "/v1/models":
                _respond_json(writer, "200 OK", {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            elif method == "GET" and path == "/send_log":
                _respond_json(writer, "200 OK", dict(state.send_log_ns))
                state.send_log_ns.clear()
            else:
                _respond_json(writer, "404 Not Found", {"error": {"message": f"no route {method} {path}"}})
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed the connection
    finally:
        writer.close()


async def serve(state: ServerState, port: int) -> None:
    stepper = asyncio.create_task(_step(state))
    server = await asyncio.start_server(lambda r, w: _handle(r, w, state), HOST, port, backlog=4096)
    bound_port = server.sockets[0].getsockname()[1]
    print(f"listening on {HOST}:{bound_port}", flush=True)
    async with server:
        await server.serve_forever()
    del stepper  # held until here so the task is not collected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    parser.add_argument("--ms-per-token", type=float, default=10.0, help="0 = unpaced")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--chunks-per-write", type=int, default=64, help="unpaced mode only")
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="unpaced mode only: a step (one write per stream) every STEP_MS; 0 = back to back")
    args = parser.parse_args()
    state = ServerState(args.ms_per_token, args.tokens_per_chunk, args.chunks_per_write, args.step_ms)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(state, args.port))


if __name__ == "__main__":
    main()
