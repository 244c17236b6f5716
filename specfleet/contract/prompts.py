"""Prompt items parsed from JSONL or ShareGPT text (pure: the caller reads the file).

Every error is an ``InputError`` naming ``file:line`` (or the entry) and what was expected.
"""

import json
from dataclasses import dataclass

from specfleet.errors import InputError

ChatMessage = dict[str, str]

SHAREGPT_ROLES: dict[str, str] = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant", "assistant": "assistant",
    "system": "system",
}


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One prompt: ``prompt`` for /v1/completions or ``messages`` for /v1/chat/completions.

    ``max_tokens`` is this prompt's own output cap, if the file gives one.
    """

    id: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int | None = None


JSONL_SHAPE = '{"id": ..., "prompt": "..."} or {"id": ..., "messages": [{"role": ..., "content": ...}]}'


def parse_prompts_jsonl(text: str, source: str) -> list[PromptItem]:
    """One JSON object per non-blank line; ``id`` defaults to the line number."""
    items: list[PromptItem] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: not valid JSON ({err.msg}, column {err.colno}); "
                             f"expected one object per line like {JSONL_SHAPE}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object like {JSONL_SHAPE}, got {type(obj).__name__}")
        items.append(_jsonl_item(obj, where, default_id=str(lineno)))
    return _checked(items, source, "one JSON object per line")


def _jsonl_item(obj: dict[str, object], where: str, default_id: str) -> PromptItem:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise InputError(f"{where}: expected exactly one of 'prompt' (a string) or 'messages' (a list)")
    if prompt is not None and not (isinstance(prompt, str) and prompt):
        raise InputError(f"{where}: 'prompt' must be a non-empty string (got {_short(prompt)})")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and not (type(max_tokens) is int and max_tokens >= 1):
        raise InputError(f"{where}: 'max_tokens' must be a positive integer (got {_short(max_tokens)})")
    return PromptItem(
        id=_item_id(obj.get("id"), where, default_id),
        prompt=prompt,
        messages=_messages(messages, where) if messages is not None else None,
        max_tokens=max_tokens,
    )


def _messages(value: object, where: str) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}} objects")
    out: list[ChatMessage] = []
    for i, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not (isinstance(role, str) and role and isinstance(content, str)):
            raise InputError(f"{where}: messages[{i}] must be {{'role': str, 'content': str}} "
                             f"(got {_short(message)})")
        out.append({"role": role, "content": content})
    return out


def parse_sharegpt(text: str, source: str) -> list[PromptItem]:
    """ShareGPT conversations as chat prompts: the turns up to the last human one.

    Accepts a JSON list or JSONL of ``{"id", "conversations": [{"from", "value"}]}``.
    Conversations without a human turn are skipped (the public dump has some).
    """
    stripped = text.lstrip()
    entries: list[tuple[str, object]]
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{source}:{err.lineno}: not valid JSON ({err.msg}); "
                             "expected a list of ShareGPT conversations") from None
        entries = [(f"{source}: entry [{i}]", entry) for i, entry in enumerate(data)]
    else:
        entries = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    entries.append((f"{source}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as err:
                    raise InputError(f"{source}:{lineno}: not valid JSON ({err.msg}); "
                                     "expected one ShareGPT conversation per line") from None
    items = [item for n, (where, entry) in enumerate(entries)
             if (item := _sharegpt_item(entry, where, default_id=str(n))) is not None]
    return _checked(items, source, "ShareGPT conversations with at least one human turn")


def _sharegpt_item(entry: object, where: str, default_id: str) -> PromptItem | None:
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or not isinstance(turns, list):
        raise InputError(f"{where}: expected {{'id': ..., 'conversations': [{{'from': ..., 'value': ...}}]}}")
    messages: list[ChatMessage] = []
    for i, turn in enumerate(turns):
        speaker = turn.get("from") if isinstance(turn, dict) else None
        value = turn.get("value") if isinstance(turn, dict) else None
        role = SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None or not isinstance(value, str):
            raise InputError(f"{where}: conversations[{i}] must be {{'from': one of "
                             f"{sorted(SHAREGPT_ROLES)}, 'value': str}} (got {_short(turn)})")
        messages.append({"role": role, "content": value})
    last_human = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_human is None:
        return None
    return PromptItem(id=_item_id(entry.get("id"), where, default_id), messages=messages[: last_human + 1])


def _item_id(value: object, where: str, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
        return str(value)
    raise InputError(f"{where}: 'id' must be a non-empty string or an integer (got {_short(value)})")


def _checked(items: list[PromptItem], source: str, expected: str) -> list[PromptItem]:
    if not items:
        raise InputError(f"{source}: no prompts found (expected {expected})")
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise InputError(f"{source}: prompt id {item.id!r} appears twice (ids must be unique)")
        seen.add(item.id)
    return items


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
