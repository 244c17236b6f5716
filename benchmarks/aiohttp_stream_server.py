"""A second pacing server for the client benchmark, written apart from ``synthetic_stream_server.py``:
a plain aiohttp application (its HTTP stack, chunked transfer encoding, its own event loop
scheduling), so a client's timestamp accuracy is not judged on one server's write pattern only.

It is never a stand-in for vLLM in tests of measurement: it generates no text and has no
scheduler. ``POST /v1/completions`` and ``/v1/chat/completions`` stream ``max_tokens`` tokens, one
OpenAI-shaped SSE event per token, each ``--ms-per-token`` after the previous one on an absolute
schedule, written with ``StreamResponse.write`` (one HTTP chunk each); the CLOCK_MONOTONIC time of
every write is logged under the request's prompt, and ``GET /send_log`` returns and clears the
log. ``GET /v1/models`` lists the one model, ``synthetic``; ``GET /health`` answers 200. With
``--certfile`` and ``--keyfile`` it serves HTTPS (the load client's TLS tests). Binds 127.0.0.1;
prints ``listening on 127.0.0.1:PORT`` once ready.

    python -m benchmarks.aiohttp_stream_server [--port 0] [--ms-per-token 10] [--certfile F --keyfile F]
"""

import argparse
import asyncio
import contextlib
import json
import ssl
import time

from aiohttp import web

HOST = "127.0.0.1"
MODEL = "synthetic"
SEND_LOG = web.AppKey("send_log", dict[str, list[int]])
MS_PER_TOKEN = web.AppKey("ms_per_token", float)


def sse(payload: dict[str, object]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def token_event(chat: bool, prompt_tokens: int, emitted: int, last: bool) -> dict[str, object]:
    """The event carrying token ``emitted`` (1-based), with vLLM's continuous usage."""
    finish = "length" if last else None
    choice: dict[str, object] = ({"index": 0, "delta": {"content": " tok"}, "finish_reason": finish} if chat
                                 else {"index": 0, "text": " tok", "finish_reason": finish})
    return {"id": "paced", "object": "chat.completion.chunk" if chat else "text_completion", "model": MODEL,
            "choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": emitted,
                                           "total_tokens": prompt_tokens + emitted}}


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    chat = request.path.endswith("/chat/completions")
    prompt = str(body["messages"][-1]["content"] if chat else body["prompt"])
    tokens = int(body.get("max_tokens") or 16)
    interval_ns = int(request.app[MS_PER_TOKEN] * 1_000_000)
    log = request.app[SEND_LOG].setdefault(prompt, [])
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    start_ns = time.monotonic_ns()
    for emitted in range(1, tokens + 1):
        delay_ns = start_ns + emitted * interval_ns - time.monotonic_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)
        log.append(time.monotonic_ns())
        await response.write(sse(token_event(chat, len(prompt.split()), emitted, emitted == tokens)))
    usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": tokens,
             "total_tokens": len(prompt.split()) + tokens}
    await response.write(sse({"id": "paced", "model": MODEL, "choices": [], "usage": usage}) + b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def send_log(request: web.Request) -> web.Response:
    logged = request.app[SEND_LOG].copy()
    request.app[SEND_LOG].clear()
    return web.json_response(logged)


def application(ms_per_token: float) -> web.Application:
    app = web.Application()
    app[SEND_LOG] = {}
    app[MS_PER_TOKEN] = ms_per_token
    app.add_routes([web.post("/v1/completions", generate), web.post("/v1/chat/completions", generate),
                    web.get("/v1/models", models), web.get("/health", health),
                    web.get("/send_log", send_log)])
    return app


async def serve(ms_per_token: float, port: int, tls: ssl.SSLContext | None) -> None:
    runner = web.AppRunner(application(ms_per_token), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, ssl_context=tls, backlog=4096)
    await site.start()
    bound_port = runner.addresses[0][1]
    print(f"listening on {HOST}:{bound_port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    parser.add_argument("--ms-per-token", type=float, default=10.0)
    parser.add_argument("--certfile", help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--keyfile", help="the certificate's private key (PEM)")
    args = parser.parse_args()
    tls = None
    if args.certfile:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.certfile, args.keyfile)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.ms_per_token, args.port, tls))


if __name__ == "__main__":
    main()
