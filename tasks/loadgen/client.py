"""Streaming requests to vLLM's OpenAI endpoints: one function per API route, one SSE loop.

Errors (HTTP status, connection, per-request timeout, a truncated stream) come back as
records with ``error`` set, keeping the chunks received before the failure.
"""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import orjson

from specfleet.contract.prompts import PromptItem
from specfleet.contract.workload import SamplingSpec
from specfleet.errors import InputError
from specfleet.results.records import RequestRecord
from specfleet_tasks.loadgen.http import ABORT, CONNECT_TIMEOUT_S, ENOUGH, MORE, HttpError, StreamClient
from specfleet_tasks.loadgen.sse import DONE, SSEDecoder, StreamAccumulator, TextOf, chat_text, completion_text

ApiRoute = Literal["completions", "chat"]
"""Which OpenAI API a cell's requests go to: ``/v1/completions`` or ``/v1/chat/completions``."""
ERROR_DETAIL_CHARS = 300
HTTP_OK = 200


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What every request of a cell shares besides the server. ``max_tokens`` caps each prompt's own
    cap; ``timeout_s`` bounds a whole request, ``connect_timeout_s`` a new connection's set-up."""

    route: ApiRoute
    max_tokens: int
    ignore_eos: bool
    sampling: SamplingSpec
    timeout_s: float
    connect_timeout_s: float = CONNECT_TIMEOUT_S

    def max_tokens_for(self, item: PromptItem) -> int:
        return min(item.max_tokens, self.max_tokens) if item.max_tokens else self.max_tokens


class RequestFunc(Protocol):
    async def __call__(self, client: StreamClient, model: str, item: PromptItem,
                       settings: RequestSettings, index: int) -> RequestRecord: ...


def request_body(model: str, settings: RequestSettings, item: PromptItem, index: int) -> dict[str, object]:
    """Fields shared by both routes; ``model`` is the served model name. A sampled (non-greedy)
    request gets seed = seed + index, so every arm draws the same per-request seeds."""
    sampling = settings.sampling
    body: dict[str, object] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": settings.max_tokens_for(item),
        "ignore_eos": settings.ignore_eos,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
    }
    if not sampling.greedy:
        body["seed"] = sampling.seed + index
    return body


async def request_completion(client: StreamClient, model: str, item: PromptItem,
                             settings: RequestSettings, index: int) -> RequestRecord:
    body = request_body(model, settings, item, index) | {"prompt": item.prompt}
    return await stream_request(client, "v1/completions", body, completion_text, item, settings, index)


async def request_chat(client: StreamClient, model: str, item: PromptItem,
                       settings: RequestSettings, index: int) -> RequestRecord:
    body = request_body(model, settings, item, index) | {"messages": item.messages}
    return await stream_request(client, "v1/chat/completions", body, chat_text, item, settings, index)


REQUEST_FUNCS: dict[ApiRoute, RequestFunc] = {"completions": request_completion, "chat": request_chat}


def route_for(prompts: Sequence[PromptItem]) -> ApiRoute:
    """Chat when the prompts are message lists, else completions."""
    return "chat" if prompts and prompts[0].messages is not None else "completions"


def check_prompts(prompts: list[PromptItem], route: ApiRoute) -> None:
    """Fail before sending anything if a prompt does not suit the route."""
    if not prompts:
        raise InputError("no prompts to send")
    needed = "prompt" if route == "completions" else "messages"
    for item in prompts:
        if getattr(item, needed) is None:
            raise InputError(f"prompt {item.id!r} has no {needed!r}, which the {route} endpoint needs")


async def stream_request(client: StreamClient, path: str, body: dict[str, object], text_of: TextOf,
                         item: PromptItem, settings: RequestSettings, index: int) -> RequestRecord:
    """POST ``body`` to ``path`` under the client's base URL and fold the event stream into a
    record (the one SSE loop, run read by read inside the connection's ``data_received``)."""
    accumulator = StreamAccumulator(text_of)
    events = EventSink(accumulator)
    detail = ErrorBody()
    error: str | None = None
    send_ns = time.perf_counter_ns()
    try:
        async with asyncio.timeout(settings.timeout_s):
            response = await client.post(path, orjson.dumps(body), lambda status: events if status == HTTP_OK
                                         else detail)
        if response.status != HTTP_OK and response.status:
            error = f"HTTP {response.status}: {detail.text()}"
        else:
            error = events.error or response.error or (None if events.done else "stream ended without [DONE]")
    except TimeoutError:
        error = f"timed out after {settings.timeout_s:g} s"
    except HttpError as err:
        error = str(err)[:ERROR_DETAIL_CHARS]
    return accumulator.record(index=index, prompt_id=item.id, send_ns=send_ns, end_ns=time.perf_counter_ns(),
                              max_tokens=settings.max_tokens_for(item), error=error)


class EventSink:
    """A 200 stream's body, read by read: SSE framing, JSON per event, the accumulator. Every
    event of one read gets that read's arrival stamp."""

    __slots__ = ("decoder", "feed", "done", "error")

    def __init__(self, accumulator: StreamAccumulator) -> None:
        self.decoder = SSEDecoder()
        self.feed = accumulator.feed
        self.done = False
        self.error: str | None = None

    def __call__(self, data: bytes, arrival_ns: int) -> int:
        feed = self.feed
        for payload in self.decoder.feed(data):
            if payload == DONE:
                self.done = True
                return ENOUGH
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError as err:  # bad UTF-8 included
                self.error = f"malformed stream event: {err}"[:ERROR_DETAIL_CHARS]
                return ABORT
            if isinstance(event, dict):
                feed(event, arrival_ns)
        return MORE


class ErrorBody:
    """The start of an error response's body, for the record's error."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def __call__(self, data: bytes, arrival_ns: int) -> int:
        self.parts.append(data)
        self.size += len(data)
        return ABORT if self.size >= 4 * ERROR_DETAIL_CHARS else MORE

    def text(self) -> str:
        return b"".join(self.parts).decode(errors="replace")[:ERROR_DETAIL_CHARS]
