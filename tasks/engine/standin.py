"""The stand-in engine: a real server process that speaks the part of vLLM's HTTP surface specfleet
uses, for tests of orchestration only (``tasks/engine/engines.py`` says how a test selects it).

It runs no model. Each request's tokens are words chosen by a hash of its prompt (and seed when
sampled), so the same prompt gives the same text on every arm and greedy equivalence holds. A
speculative arm (``--speculative-config``) drafts ``num_speculative_tokens`` per step (or the k
of ``num_speculative_tokens_per_batch_size`` for the running batch) and accepts each position with
the set ``acceptance``, drawn from a hash of the prompt and step, so counters, chunks and
per-request summaries agree. Steps take ``step_ms``.

Surface: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` and
``/v1/chat/completions`` (streamed with ``continuous_usage_stats``, or whole), ``GET /metrics``
(request, token and spec-decode counters, ``vllm:cache_config_info``, ``process_start_time_seconds``;
every answer carries a ``Date`` header, as vLLM's do), ``POST
/reset_prefix_cache``, ``--help`` (lists ``--per-request-spec-decode-metrics``), the API key in
``VLLM_API_KEY``, TLS with ``--ssl-certfile``/``--ssl-keyfile``. An argument vLLM's server would
take but this one does not know ends it with exit code 2, as vLLM's parser does.

Settings come from ``SPECFLEET_STANDIN_ENGINE``: ``1`` for the defaults, or ``key=value`` pairs
separated by commas (``step_ms=20,acceptance=0.7,startup_s=0``). Imports only the standard
library: it answers ``/health`` about a second after it is started.
"""

import argparse
import asyncio
import hashlib
import json
import os
import ssl
import sys
import time
from dataclasses import dataclass, field
from email.utils import formatdate

SETTINGS_ENV = "SPECFLEET_STANDIN_ENGINE"  # specfleet.contract.models.STANDIN_ENGINE_ENV, not imported: start-up
WORDS = tuple(f" w{i}" for i in range(97))
KV_BLOCK_SIZE = 16
KV_BLOCKS = 4096


@dataclass(frozen=True)
class Settings:
    step_ms: float = 20.0
    acceptance: float = 0.7
    startup_s: float = 0.0


def read_settings(raw: str) -> Settings:
    """``1``/``on`` for the defaults, else ``key=value`` pairs separated by commas."""
    if raw.strip().lower() in ("", "1", "on", "true"):
        return Settings()
    pairs = dict(part.split("=", 1) for part in raw.split(",") if part.strip())
    return Settings(**{key.strip(): float(value) for key, value in pairs.items()})


@dataclass
class Counters:
    """What ``/metrics`` reports, as vLLM names it."""

    success: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    running: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)


@dataclass
class Engine:
    settings: Settings
    model: str
    speculative: dict[str, object] | None
    per_request_metrics: bool
    api_key: str | None
    counters: Counters = field(default_factory=Counters)
    started_at_s: float = field(default_factory=time.time)
    """Reported as Prometheus's process collector does (``process_start_time_seconds``)."""

    def k_now(self) -> int:
        """Draft length for the running batch: the schedule's k where one is set, else the config's."""
        spec = self.speculative or {}
        k = int(str(spec.get("num_speculative_tokens") or 0))
        schedule = spec.get("num_speculative_tokens_per_batch_size")
        ranges: list[list[int]] = schedule if isinstance(schedule, list) else []
        for start, end, scheduled in ranges:
            if int(start) <= self.counters.running <= int(end):
                return min(k, int(scheduled))
        return k

    def metrics_text(self) -> str:
        c, name = self.counters, f'model_name="{self.model}"'
        lines = [
            "# TYPE vllm:request_success counter", f'vllm:request_success_total{{finished_reason="length",{name}}} '
            f"{float(c.success)}",
            "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{name}}} {float(c.prompt_tokens)}",
            "# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{name}}} "
            f"{float(c.generation_tokens)}",
            "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {self.started_at_s}",
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{name}}} {float(c.running)}",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{KV_BLOCK_SIZE}",num_gpu_blocks="{KV_BLOCKS}",'
            f'kv_cache_size_tokens="{KV_BLOCK_SIZE * KV_BLOCKS}",'
            f'kv_cache_memory_bytes="{KV_BLOCK_SIZE * KV_BLOCKS * 64}"}} 1.0',
        ]
        if self.speculative is not None:
            engine = f'engine="0",{name}'
            for metric, value in (("num_drafts", c.drafts), ("num_draft_tokens", c.draft_tokens),
                                  ("num_accepted_tokens", c.accepted)):
                lines += [f"# TYPE vllm:spec_decode_{metric} counter",
                          f"vllm:spec_decode_{metric}_total{{{engine}}} {float(value)}"]
            lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{engine},position="{i}"}} {float(n)}'
                      for i, n in enumerate(c.per_pos)]
        return "\n".join(lines) + "\n"


def _draw(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:8], "big")


def _prompt_text(body: dict[str, object], chat: bool) -> str:
    if chat:
        return json.dumps(body.get("messages"), sort_keys=True)
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


@dataclass
class Reply:
    """One request's generation, step by step: each step's new tokens, and its draft counts."""

    engine: Engine
    prompt: str
    seed: object
    max_tokens: int
    done: int = 0
    steps: int = 0
    spec_steps: int = 0
    drafted: int = 0
    accepted: int = 0

    def step(self) -> list[int]:
        """The next engine step's token ids: the prefill's one token, then the accepted drafts and a bonus token."""
        k = self.engine.k_now() if self.done else 0
        n = 0
        if k:
            while n < k and _draw(self.prompt, self.seed, self.steps, n) % 10_000 < \
                    self.engine.settings.acceptance * 10_000:
                n += 1
            n = min(n, self.max_tokens - self.done - 1)
            self._count_draft(k, n)
        ids = [_draw(self.prompt, self.seed, self.done + i) % len(WORDS) for i in range(n + 1)]
        self.done += n + 1
        self.steps += 1
        return ids

    def _count_draft(self, k: int, accepted: int) -> None:
        c = self.engine.counters
        self.spec_steps, self.drafted, self.accepted = self.spec_steps + 1, self.drafted + k, self.accepted + accepted
        c.drafts, c.draft_tokens, c.accepted = c.drafts + 1, c.draft_tokens + k, c.accepted + accepted
        c.per_pos += [0] * (k - len(c.per_pos))
        for position in range(accepted):
            c.per_pos[position] += 1

    def spec_summary(self) -> dict[str, object]:
        return {"num_spec_steps": self.spec_steps, "num_accepted_draft_tokens": self.accepted,
                "num_draft_tokens": self.drafted, "num_spec_tokens": self.engine.k_now()}


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(payload: dict[str, object]) -> bytes:
    return _frame(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")


def _head(status: str, kind: str, length: int | None = None) -> bytes:
    size = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    date = formatdate(usegmt=True)
    return (f"HTTP/1.1 {status}\r\nDate: {date}\r\nContent-Type: {kind}\r\n{size}\r\nConnection: keep-alive"
            "\r\n\r\n").encode()


def _respond(writer: asyncio.StreamWriter, status: str, payload: object, kind: str = "application/json") -> None:
    data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
    writer.write(_head(status, kind, len(data)) + data)


async def _generate(engine: Engine, writer: asyncio.StreamWriter, body: dict[str, object], chat: bool) -> None:
    prompt = _prompt_text(body, chat)
    temperature = body.get("temperature", 1.0)
    greedy = isinstance(temperature, int | float) and temperature == 0
    seed = "greedy" if greedy else body.get("seed", time.monotonic_ns())
    requested = body.get("max_tokens") or body.get("max_completion_tokens") or 16
    reply = Reply(engine, prompt, seed, int(requested) if isinstance(requested, int | float) else 16)
    prompt_tokens = max(1, len(prompt.split()))
    kind = "chat.completion.chunk" if chat else "text_completion"
    base: dict[str, object] = {"id": f"standin-{time.monotonic_ns()}", "object": kind, "created": int(time.time()),
                               "model": engine.model}
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    continuous = isinstance(options, dict) and bool(options.get("continuous_usage_stats"))
    engine.counters.running += 1
    if stream:
        writer.write(_head("200 OK", "text/event-stream"))
    token_ids: list[int] = []
    try:
        if stream and chat:
            writer.write(_event(base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        while reply.done < reply.max_tokens:
            await asyncio.sleep(engine.settings.step_ms / 1000)
            ids = reply.step()
            token_ids += ids
            text = "".join(WORDS[i] for i in ids)
            if stream:
                finish = "length" if reply.done >= reply.max_tokens else None
                choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                          else {"index": 0, "text": text, "finish_reason": finish})
                usage = _usage(prompt_tokens, reply.done) if continuous else None
                writer.write(_event(base | {"choices": [choice]} | ({"usage": usage} if usage else {})))
                await writer.drain()
    finally:
        engine.counters.running -= 1
    engine.counters.success += 1
    engine.counters.prompt_tokens += prompt_tokens
    engine.counters.generation_tokens += reply.done
    metrics = ({"speculative_decoding": reply.spec_summary()}
               if engine.per_request_metrics and engine.speculative is not None else None)
    if stream:
        last = base | {"choices": [], "usage": _usage(prompt_tokens, reply.done)} | (
            {"metrics": metrics} if metrics else {})
        writer.write(_event(last) + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return
    text = "".join(WORDS[i] for i in token_ids)
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if chat
              else {"index": 0, "text": text, "finish_reason": "length"})
    if body.get("return_token_ids"):
        choice["token_ids"] = token_ids
    whole = base | {"object": "chat.completion" if chat else "text_completion", "choices": [choice],
                    "usage": _usage(prompt_tokens, reply.done)} | ({"metrics": metrics} if metrics else {})
    _respond(writer, "200 OK", whole)


def _usage(prompt_tokens: int, done: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    """One HTTP/1.1 request: method, path, headers (lower-case names) and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    fields = (h.partition(":") for h in header_lines if h)
    headers = {k.strip().lower(): v.strip() for k, _, v in fields}
    return method, path, headers, await reader.readexactly(int(headers.get("content-length", "0")))


async def _handle(engine: Engine, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            method, path, headers, raw = await read_request(reader)
            await _route(engine, writer, method, path.split("?", 1)[0], headers, raw)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass  # the client closed the connection
    finally:
        writer.close()


async def _route(engine: Engine, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str],
                 raw: bytes) -> None:
    if path.startswith("/v1/") and engine.api_key and headers.get("authorization") != f"Bearer {engine.api_key}":
        _respond(writer, "401 Unauthorized", {"error": "Unauthorized"})
    elif method == "GET" and path == "/health":
        _respond(writer, "200 OK", "", "text/plain")
    elif method == "GET" and path == "/v1/models":
        _respond(writer, "200 OK", {"object": "list", "data": [{"id": engine.model, "object": "model",
                                                                "owned_by": "specfleet-standin"}]})
    elif method == "GET" and path == "/metrics":
        _respond(writer, "200 OK", engine.metrics_text(), "text/plain; version=0.0.4")
    elif method == "POST" and path == "/reset_prefix_cache":
        _respond(writer, "200 OK", "", "text/plain")
    elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
        body = json.loads(raw or b"{}")
        if body.get("model") not in (None, engine.model):
            _respond(writer, "404 Not Found", {"error": {"message": f"The model `{body.get('model')}` does not "
                                                                    "exist.", "code": 404}})
            return
        await _generate(engine, writer, body, chat=path.endswith("chat/completions"))
    else:
        _respond(writer, "404 Not Found", {"detail": "Not Found"})


def _parser() -> argparse.ArgumentParser:
    """vLLM's server flags that specfleet passes; any other is refused as vLLM refuses an unknown one."""
    parser = argparse.ArgumentParser(prog="api_server.py", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--speculative-config")
    parser.add_argument("--per-request-spec-decode-metrics", choices=["detailed", "none", "summary"], default="none")
    parser.add_argument("--ssl-certfile")
    parser.add_argument("--ssl-keyfile")
    for name in ("--dtype", "--seed", "--tokenizer", "--revision", "--quantization", "--max-model-len",
                 "--max-num-seqs", "--gpu-memory-utilization", "--stream-interval", "--max-num-batched-tokens",
                 "--block-size", "--tensor-parallel-size"):
        parser.add_argument(name)
    for name in ("--enforce-eager", "--disable-log-requests", "--enable-prefix-caching",
                 "--no-enable-prefix-caching", "--disable-log-stats"):
        parser.add_argument(name, action="store_true")
    return parser


async def serve(engine: Engine, host: str, port: int, tls: ssl.SSLContext | None) -> None:
    server = await asyncio.start_server(lambda r, w: _handle(engine, r, w), host, port, ssl=tls, backlog=1024)
    print(f"stand-in engine (not vLLM) serving {engine.model} on {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    started_at_s = time.time()
    args = _parser().parse_args()
    settings = read_settings(os.environ.get(SETTINGS_ENV, ""))
    time.sleep(settings.startup_s)
    tls = None
    if args.ssl_certfile:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.ssl_certfile, args.ssl_keyfile)
    engine = Engine(settings, args.served_model_name or args.model,
                    json.loads(args.speculative_config) if args.speculative_config else None,
                    args.per_request_spec_decode_metrics != "none", os.environ.get("VLLM_API_KEY") or None,
                    started_at_s=started_at_s)
    try:
        asyncio.run(serve(engine, args.host, args.port, tls))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
