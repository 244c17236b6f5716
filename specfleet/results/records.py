"""One plain record per measured request; every metric is computed from these (vLLM bench style)."""

from dataclasses import dataclass, field, fields

UNCOUNTED_CHUNKS_KEY = "chunks_without_usage"
"""``RequestRecord.extra`` key: content chunks that carried no cumulative usage count, so the
parser counted one token each; tokens per chunk then say nothing about engine steps."""
SPEC_KEY_PREFIX = "spec_"
"""``RequestRecord.extra`` keys of vLLM's per-request ``metrics.speculative_decoding``."""


def pooled_acceptance_length(accepted: float | None, drafts: float | None) -> float | None:
    """``1 + accepted / drafts``: tokens per drafting step, the bonus token included (vLLM's mean
    acceptance length, conditional on drafting), from counts pooled over whatever was summed. None
    (never 0, never 1) when no step drafted: ``drafts`` 0, negative or missing, or nothing accepted known."""
    if accepted is None or drafts is None or drafts <= 0:
        return None
    return 1.0 + accepted / drafts


@dataclass(frozen=True, slots=True)
class RequestSpecDecode:
    """vLLM's own speculative-decoding summary of one request: ``metrics.speculative_decoding`` in
    the final usage chunk of a server started with ``--per-request-spec-decode-metrics``.

    Like the ``/metrics`` counters it counts only the steps that verified a draft
    (``num_spec_steps``), so its mean acceptance length is conditional on drafting.
    """

    num_spec_steps: int
    num_accepted_draft_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafting steps (bonus token included); None when no step drafted (vLLM
        sends 1.0 then, a length nothing measured)."""
        return pooled_acceptance_length(self.num_accepted_draft_tokens, self.num_spec_steps)

    @property
    def draft_acceptance_rate(self) -> float | None:
        """Accepted / proposed draft tokens; None when nothing was proposed (vLLM sends 0.0 then)."""
        if self.num_draft_tokens <= 0:
            return None
        return self.num_accepted_draft_tokens / self.num_draft_tokens


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
    def request_spec_decode(self) -> RequestSpecDecode | None:
        """vLLM's per-request figures; None when the server sent none (started without the flag,
        no speculation, or a stream stored before they were kept)."""
        counts: dict[str, int] = {}
        for f in fields(RequestSpecDecode):
            value = self.extra.get(SPEC_KEY_PREFIX + f.name)
            if value is None:  # one count missing: the summary is missing, never a 0 in its place
                return None
            counts[f.name] = int(value)
        return RequestSpecDecode(**counts)

    @property
    def request_mean_acceptance_length(self) -> float | None:
        """vLLM's per-request mean acceptance length (conditional on drafting); None when absent."""
        spec = self.request_spec_decode
        return spec.mean_acceptance_length if spec is not None else None

    @property
    def request_draft_acceptance_rate(self) -> float | None:
        spec = self.request_spec_decode
        return spec.draft_acceptance_rate if spec is not None else None

    @property
    def ttft_ns(self) -> int | None:
        return self.chunk_ns[0] - self.send_ns if self.chunk_ns else None

    @property
    def e2e_ns(self) -> int | None:
        """Send to last content-bearing chunk (a trailing usage-only chunk does not count)."""
        return self.chunk_ns[-1] - self.send_ns if self.chunk_ns else None

    @property
    def tpot_ns(self) -> float | None:
        """(E2E - TTFT) / (tokens - 1), for requests with more than one output token. None when the
        whole stream arrived in one read (its last chunk at its first's time): the client did not
        time its tokens apart, and 0 ms would be the reader's figure, not the engine's."""
        tokens = self.streamed_tokens
        if tokens < 2 or not self.chunk_ns or self.chunk_ns[-1] == self.chunk_ns[0]:
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
