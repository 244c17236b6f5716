"""``CellResult``: everything one measured cell reports, with its contract identity."""

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import CellIdentity

CellStatus = Literal["ok", "invalid", "failed"]
StopReason = Literal["fixed_budget", "precise", "max_requests"]
"""Why a cell stopped issuing requests: its fixed budget ran out, adaptive stopping found its
statistics precise enough, or adaptive stopping reached ``max_requests`` first."""

SERVER_DIED = "the server died during the cell"


def judge_cell(reasons: Sequence[str], *, server_failed: bool) -> tuple[CellStatus, list[str]]:
    """The one rule for a cell's status, with the reasons as stored.

    "failed" when its server died during the cell (``--resume`` measures it again; its reasons
    then start with ``SERVER_DIED``); "invalid" with any other reason to distrust it; else "ok".
    """
    if server_failed:
        return "failed", [SERVER_DIED, *(reason for reason in reasons if reason != SERVER_DIED)]
    return ("invalid" if reasons else "ok"), list(reasons)


class PercentileEstimate(RecordModel):
    """A percentile with its distribution-free (order-statistic) confidence interval."""

    value: float
    ci_low: float | None = Field(description="None when the sample is too small for an interval.")
    ci_high: float | None
    enough_samples: bool = Field(description="False when n is too small for this percentile to mean much.")


class DistributionSummary(RecordModel):
    """Summary of one series in milliseconds. Empty series give count 0 and None figures."""

    unit: str = "ms"
    count: int
    mean: float | None
    p50: PercentileEstimate | None
    p95: PercentileEstimate | None
    p99: PercentileEstimate | None


class SpecDecodeStats(RecordModel):
    """Deltas of vLLM's spec-decode counters over the measured window, summed over engines.

    ``acceptance_rate`` is the telemetry fraction r = accepted / draft tokens. It is not the
    modelled per-position alpha of the seed's formula and must never be fed into it.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int]
    acceptance_rate: float | None
    mean_acceptance_length: float | None = Field(description="1 + accepted / drafts (bonus token included).")
    acceptance_per_position: list[float]


class AcceptanceDistribution(RecordModel):
    """One per-request acceptance figure across a cell's successful requests (docs/measurement.md,
    "Per-request acceptance"). Each request contributes tokens over engine steps; its figure is
    their ratio. Figures are None (never 0) when no request has one; ``missing`` says why."""

    requests: int = Field(description="Successful requests with the figure.")
    requests_without: int = Field(description="Successful requests without it (``missing`` says why).")
    missing: str | None = Field(None, description="Why requests have no figure; None when all have one.")
    mean: float | None = Field(description="Request-weighted: the mean of the requests' figures.")
    p10: float | None
    p50: float | None
    p90: float | None
    tokens: int = Field(description="Tokens summed over the requests with the figure.")
    steps: int = Field(description="Engine steps summed over the same requests.")
    token_weighted_mean: float | None = Field(
        description="tokens / steps, pooled as the /metrics counters pool: a long completion weighs more "
        "(each request weighted by its steps, the token-weighted harmonic mean of the figures).")
    weighting_gap: float | None = Field(description="mean - token_weighted_mean: how far the two weightings differ.")


class RequestAcceptance(RecordModel):
    """A cell's acceptance length per request, from the two per-request sources, named apart from
    the counters' ``SpecDecodeStats.mean_acceptance_length`` (1 + accepted / drafts)."""

    client_mean_acceptance_length: AcceptanceDistribution = Field(
        description="The client's estimate: tokens per content chunk between the first (prefill) and the last "
        "(cut by max_tokens). One chunk is one engine step at vLLM's default stream interval, so this is tokens "
        "per engine step over all steps, drafting or not: what speedup follows.")
    request_mean_acceptance_length: AcceptanceDistribution = Field(
        description="vLLM's per-request figure (--per-request-spec-decode-metrics): 1 + accepted / steps that "
        "verified a draft, conditional on drafting like the counters.")

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens per engine step over all steps (the client's token-weighted estimate)."""
        return self.client_mean_acceptance_length.token_weighted_mean


class KVCacheInfo(RecordModel):
    """From the gauge ``vllm:cache_config_info``; fields the engine did not expose are None."""

    kv_cache_size_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_cache_memory_bytes: int | None = None


class EnergyReading(RecordModel):
    """Energy over the measured window. ``joules`` is None (never 0) when nothing could be read."""

    source: Literal["nvml", "rapl", "none"]
    joules: float | None
    reason: str | None = Field(None, description="Why there is no reading, when source is 'none'.")
    j_per_output_token: float | None = None
    j_per_qualified_token: float | None = None


class Throughput(RecordModel):
    duration_s: float
    output_tokens: int
    qualified_output_tokens: int
    output_tokens_per_s: float | None
    qualified_tokens_per_s: float | None = Field(
        description="SLO-qualified accepted output tokens per second: tokens of requests that met the SLO."
    )
    request_goodput_per_s: float | None = Field(description="Requests per second that met the SLO.")
    requests_per_s: float | None


class CellResult(RecordModel):
    identity: CellIdentity
    key: str
    status: CellStatus
    reasons: list[str] = Field(default_factory=list)
    requests_planned: int
    completed: int
    failed: int
    slo_met: int
    ttft_ms: DistributionSummary
    itl_per_chunk_ms: DistributionSummary
    itl_per_token_ms: DistributionSummary
    chunks_read_together_fraction: float | None = Field(
        None, description="Share of chunk gaps that are 0 ms (chunks the client got in one read); high means "
        "ITL per chunk reads low. None without gaps, or in cells stored before it was recorded."
    )
    tpot_ms: DistributionSummary
    e2e_ms: DistributionSummary
    throughput: Throughput
    spec_decode: SpecDecodeStats | None = None
    spec_decode_unavailable: str | None = None
    request_acceptance: RequestAcceptance | None = Field(
        None, description="Acceptance length per request, client estimate and vLLM's own; None in cells stored "
        "before it was recorded.")
    kv_cache: KVCacheInfo | None = None
    energy: EnergyReading
    client_lag_p99_ms: float | None = Field(
        None, description="p99 lateness of the client's event loop; high means the client, not the server, was slow."
    )
    stop_reason: StopReason = "fixed_budget"
    measured_requests: int | None = Field(None, description="Measured requests sent; None in cells stored "
                                          "before it was recorded.")
    records_file: str | None = Field(None, description="Per-request Parquet, relative to the results dir.")
    prefix_cache_not_reset: str | None = Field(
        None, description="Why the server's prefix cache was not cleared before the cell, which may then have "
        "started on the previous cell's cached prefixes; None when it was cleared, or in cells stored before "
        "it was recorded.")
    engine_version: str | None = None
    started_at: str | None = None
    server: str | None = Field(
        None, description="The server life that measured the cell (its name and start time): windows of one "
        "server share its offset in the run-to-run noise (specfleet.stats.variance). None in cells stored "
        "before it was recorded, or measured against an endpoint specfleet did not start.")

    @property
    def usable(self) -> bool:
        return self.status == "ok"

    def with_reasons(self, extra: Sequence[str], *, server_failed: bool = False) -> "CellResult":
        """The cell with reasons found after it was assembled, judged again by ``judge_cell``;
        a failed cell stays failed."""
        status, reasons = judge_cell([*self.reasons, *extra], server_failed=server_failed or self.status == "failed")
        return self.model_copy(update={"status": status, "reasons": reasons})
