"""One plain record per measured request; every metric is computed from these (vLLM bench style)."""

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What the client saw for one request. Times are ``time.perf_counter_ns()`` values.

    ``chunk_ns[i]`` is the arrival of the i-th content-bearing stream chunk and
    ``chunk_tokens[i]`` the number of output tokens it carried (from the stream's
    cumulative usage count: under speculation one chunk can carry up to k+1 tokens).
    A failed request keeps what arrived before the failure and its ``error``.
    """

    index: int
    prompt_id: str
    send_ns: int
    chunk_ns: tuple[int, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    end_ns: int | None = None
    scheduled_ns: int | None = None
    prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    error: str | None = None
    max_tokens: int | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def streamed_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft_ns(self) -> int | None:
        return self.chunk_ns[0] - self.send_ns if self.chunk_ns else None

    @property
    def e2e_ns(self) -> int | None:
        """Send to last content-bearing chunk (a trailing usage-only chunk does not count)."""
        return self.chunk_ns[-1] - self.send_ns if self.chunk_ns else None

    @property
    def tpot_ns(self) -> float | None:
        """(E2E - TTFT) / (tokens - 1), for requests with more than one output token."""
        tokens = self.streamed_tokens
        if tokens < 2 or not self.chunk_ns:
            return None
        return (self.chunk_ns[-1] - self.chunk_ns[0]) / (tokens - 1)

    @property
    def itl_per_chunk_ns(self) -> list[int]:
        """Gaps between consecutive content-bearing chunks: the stall a reader sees."""
        return [b - a for a, b in zip(self.chunk_ns, self.chunk_ns[1:], strict=False)]

    @property
    def itl_per_token_ns(self) -> list[float]:
        """Each chunk gap spread evenly over the tokens that chunk carried: the rate view."""
        gaps = self.itl_per_chunk_ns
        out: list[float] = []
        for gap, tokens in zip(gaps, self.chunk_tokens[1:], strict=True):
            out.extend([gap / tokens] * tokens if tokens > 0 else [])
        return out
