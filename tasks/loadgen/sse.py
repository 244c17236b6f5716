"""Server-sent events framing and the one stream accumulator both endpoints share.

Pure: bytes and parsed events in, a ``RequestRecord`` out. The HTTP loop lives in
``client.py``.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from specfleet.measure.metrics import TRAILING_TOKENS_KEY
from specfleet.results.records import SPEC_KEY_PREFIX, UNCOUNTED_CHUNKS_KEY, RequestRecord

DONE = b"[DONE]"

TextOf = Callable[[Mapping[str, object]], tuple[str, bool]]
"""From one choice object: (visible text to append, whether the chunk bears content)."""


class SSEDecoder:
    """Incremental SSE framing: feed raw bytes, get the ``data`` payload of each complete event."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        if not self._buffer and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and chunk.count(b"\n") == 2:
            return [chunk[6:-2]]  # one whole single-line event: a read of a server that writes one per chunk
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        whole = _whole_data_events(buffer)
        if whole is not None:
            self._buffer = b""
            return whole
        *events, self._buffer = buffer.split(b"\n\n")
        payloads: list[bytes] = []
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:  # one data line
                payloads.append(event[6:])
                continue
            data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                payloads.append(b"\n".join(data))
        return payloads


def _whole_data_events(buffer: bytes) -> list[bytes] | None:
    """The payloads when ``buffer`` is only whole single-line ``data: `` events (vLLM's framing,
    read at an event boundary), found with one split; None for anything else. The newline count
    proves that no payload holds another line."""
    if not (buffer.startswith(b"data: ") and buffer.endswith(b"\n\n")):
        return None
    payloads = buffer[6:-2].split(b"\n\ndata: ")
    return payloads if buffer.count(b"\n") == 2 * len(payloads) else None


def completion_text(choice: Mapping[str, object]) -> tuple[str, bool]:
    """/v1/completions: ``choices[0].text``."""
    text = choice.get("text")
    return (text, True) if isinstance(text, str) and text else ("", False)


def chat_text(choice: Mapping[str, object]) -> tuple[str, bool]:
    """/v1/chat/completions: ``delta.content``; a reasoning delta bears content but is not text."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return "", False
    content = delta.get("content")
    if isinstance(content, str) and content:
        return content, True
    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
    return "", isinstance(reasoning, str) and bool(reasoning)


@dataclass(slots=True)
class StreamAccumulator:
    """Folds parsed stream events into the fields of one ``RequestRecord``.

    Tokens come from the cumulative ``usage.completion_tokens`` of each chunk: a
    content-bearing chunk carries the tokens counted since the previous one (so tokens
    of skipped empty chunks travel with the next content). Without usage, 1 per chunk, and the
    record counts those chunks (``UNCOUNTED_CHUNKS_KEY``).
    """

    text_of: TextOf
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    counted_tokens: int = 0
    latest_cumulative: int = 0
    usage_completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, float] = field(default_factory=dict)
    uncounted_chunks: int = 0

    def feed(self, event: Mapping[str, object], arrival_ns: int) -> None:
        if "error" in event:
            self.error = f"server error in stream: {_error_message(event['error'])}"
            return
        usage = event.get("usage")
        cumulative = None
        if isinstance(usage, dict):
            cumulative = usage.get("completion_tokens")
            if not isinstance(cumulative, int):
                cumulative = None
            prompt_tokens = usage.get("prompt_tokens")
            if isinstance(prompt_tokens, int):
                self.prompt_tokens = prompt_tokens
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            # The trailing usage-only chunk: the final count and any per-request metrics.
            if cumulative is not None:
                self.usage_completion_tokens = cumulative
            metrics = event.get("metrics")
            if isinstance(metrics, dict):
                self.extra.update(_metric_extras(metrics))
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            return
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str):
            self.finish_reason = finish_reason
        text, bears_content = self.text_of(choice)
        if cumulative is None:
            if not bears_content:
                return
            tokens = 1
            self.uncounted_chunks += 1
            self.counted_tokens += 1
            self.latest_cumulative = max(self.latest_cumulative, self.counted_tokens)
        else:
            self.latest_cumulative = cumulative
            if not bears_content:
                return
            tokens = cumulative - self.counted_tokens
            self.counted_tokens = cumulative
        self.chunk_ns.append(arrival_ns)
        self.chunk_tokens.append(tokens)
        if text:
            self.text_parts.append(text)

    def record(self, *, index: int, prompt_id: str, send_ns: int, end_ns: int,
               max_tokens: int, error: str | None) -> RequestRecord:
        extra = dict(self.extra)
        trailing = self.latest_cumulative - self.counted_tokens
        if trailing > 0:
            extra[TRAILING_TOKENS_KEY] = float(trailing)
        if self.uncounted_chunks:
            extra[UNCOUNTED_CHUNKS_KEY] = float(self.uncounted_chunks)
        return RequestRecord(
            index=index, prompt_id=prompt_id, send_ns=send_ns,
            chunk_ns=tuple(self.chunk_ns), chunk_tokens=tuple(self.chunk_tokens), end_ns=end_ns,
            prompt_tokens=self.prompt_tokens, usage_completion_tokens=self.usage_completion_tokens,
            finish_reason=self.finish_reason, text="".join(self.text_parts),
            error=error or self.error, max_tokens=max_tokens, extra=extra,
        )


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(error)[:300]


def _metric_extras(metrics: Mapping[str, object]) -> dict[str, float]:
    """vLLM's per-request metrics, scalars only: ``server_<name>`` for timings, ``spec_<name>`` for
    the speculative-decoding summary (``--per-request-spec-decode-metrics``; typed by
    ``RequestRecord.request_spec_decode``)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if name == "speculative_decoding" and isinstance(value, dict):
            out.update({SPEC_KEY_PREFIX + k: float(v) for k, v in value.items() if _is_number(v)})
        elif _is_number(value):
            out[f"server_{name}"] = float(value)
    return out


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
