"""The schema of a predicted cell (``Prediction``): what the performance model
(``specfleet.perfmodel.predict``) makes and what the summary, the report and ``specfleet predict``
show. Types only, so a module can carry predictions beside measurements without reaching the model.
"""

from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel

PREDICTED_LABEL = "PREDICTED, not measured"
"""The label on every predicted figure (the performance model's, the planner's), wherever it is shown."""


class Percentiles(RecordModel):
    p50: float | None
    p95: float | None
    p99: float | None


class Bounds(RecordModel):
    low: float | None
    high: float | None


class PercentileBounds(RecordModel):
    p50: Bounds
    p95: Bounds
    p99: Bounds


class PredictionInterval(RecordModel):
    ttft_ms: PercentileBounds
    itl_ms: PercentileBounds
    itl_per_token_ms: PercentileBounds
    tpot_ms: PercentileBounds
    e2e_ms: PercentileBounds
    output_tokens_per_s: Bounds
    qualified_tokens_per_s: Bounds
    mean_acceptance_length: Bounds | None
    tokens_per_step: Bounds | None
    speedup: Bounds | None
    cost_per_million_usd: Bounds
    basis: str


class Prediction(RecordModel):
    """One cell as the model predicts it. ``predicted`` is always true."""

    predicted: Literal[True] = True
    label: str = PREDICTED_LABEL
    calibrated_on: str
    arm: str
    method: str
    k: int | None
    prompt_class: str
    sampling: str
    load_mode: Literal["concurrency", "rate"]
    load_value: float
    measured_cell: bool = Field(description="The sweep has a usable measured cell with this identity.")
    ttft_ms: Percentiles
    itl_ms: Percentiles = Field(description="ITL per chunk (vLLM's ITL).")
    itl_per_token_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: float | None
    qualified_tokens_per_s: float | None
    slo_met_fraction: float | None
    mean_acceptance_length: float | None = Field(
        description="1 + sum of per-position acceptance: tokens per drafting step (vLLM's 1 + accepted / drafts); "
        "null for the baseline.")
    tokens_per_step: float | None = Field(description="Tokens per decode step over all steps; null for the baseline.")
    speedup: float | None = Field(description="Qualified tokens/s over the baseline's, both predicted at the same "
                                  "class, load and sampling; null for the baseline.")
    cost_per_million_usd: float | None
    baseline_cost_per_million_usd: float | None
    mean_step_ms: float
    mean_decode_seqs: float
    simulated_requests: int
    interval: PredictionInterval
    extrapolates: list[str]
    notes: list[str]
