"""The one builder of ``RequestRecord`` test data: what the client keeps for one request."""

from collections.abc import Sequence
from typing import Any

from specfleet.results.records import RequestRecord

MS = 1_000_000
_DERIVED: Any = object()


def request_record(index: int = 0, chunk_ns: Sequence[int] = (), chunk_tokens: Sequence[int] | None = None, *,
                   send_ns: int = 0, prompt_id: str = _DERIVED, end_ns: int | None = _DERIVED,
                   usage_completion_tokens: int | None = _DERIVED, **fields: Any) -> RequestRecord:
    """Request ``index`` sent at ``send_ns`` whose content chunks arrived at ``chunk_ns`` carrying
    ``chunk_tokens`` (one token each when not given). Unless given: ``prompt_id`` is ``p{index}``,
    ``end_ns`` the last chunk's arrival and ``usage_completion_tokens`` the tokens streamed (both
    None when nothing streamed); any other field is a keyword, else ``RequestRecord``'s default."""
    chunks = tuple(chunk_ns)
    tokens = (1,) * len(chunks) if chunk_tokens is None else tuple(chunk_tokens)
    return RequestRecord(
        index=index, prompt_id=f"p{index}" if prompt_id is _DERIVED else prompt_id, send_ns=send_ns,
        chunk_ns=chunks, chunk_tokens=tokens,
        end_ns=(chunks[-1] if chunks else None) if end_ns is _DERIVED else end_ns,
        usage_completion_tokens=(sum(tokens) if chunks else None) if usage_completion_tokens is _DERIVED
        else usage_completion_tokens,
        **fields)


def paced_record(index: int, gap_ms: int, chunks: int, tokens_per_chunk: int = 1, **fields: Any) -> RequestRecord:
    """Request ``index`` sent at ``index`` seconds: its first chunk 10 ms later, then one every
    ``gap_ms``, each carrying ``tokens_per_chunk`` tokens; ``fields`` as for ``request_record``."""
    send = index * 1000 * MS
    times = tuple(send + 10 * MS + j * gap_ms * MS for j in range(chunks))
    return request_record(index, times, (tokens_per_chunk,) * chunks, send_ns=send, **fields)
