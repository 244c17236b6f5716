"""Load, prompt classes, sampling and SLOs: what every arm is measured under."""

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from specfleet.contract.base import ContractModel

PromptSource = Literal["bundled", "jsonl", "sharegpt"]
ItlStatistic = Literal["per_chunk", "per_token"]


class AdaptiveStoppingSpec(ContractModel):
    """Stop a cell once its decision statistics are precise enough (``specfleet.stats.stopping``).

    Checked after ``min_requests`` measured requests completed and every ``check_every``
    completions after that; never more than ``max_requests`` measured requests.
    """

    relative_half_width: float = Field(
        gt=0, lt=1, description="Target half-width of the confidence interval over the estimate, for both "
        "SLO-qualified tokens/s and the ITL percentile the SLO binds."
    )
    min_requests: int = Field(ge=2)
    max_requests: PositiveInt
    check_every: PositiveInt = 8

    @model_validator(mode="after")
    def _bounds(self) -> "AdaptiveStoppingSpec":
        if self.min_requests > self.max_requests:
            raise ValueError(f"min_requests {self.min_requests} is over max_requests {self.max_requests}")
        return self


class LoadSpec(ContractModel):
    """Closed-loop concurrency levels and/or open-loop Poisson rates (seed: "Load")."""

    concurrency: list[PositiveInt] = Field(default_factory=list)
    rates_per_s: list[PositiveFloat] = Field(default_factory=list)
    warmup_requests: NonNegativeInt = 2
    requests_per_cell: PositiveInt = 32
    repeats: PositiveInt = 1
    request_timeout_s: PositiveFloat = 300.0
    ignore_eos: bool = Field(
        True, description="Fix output length per prompt so every arm generates the same tokens."
    )
    arrival_seed: int = 0
    max_error_fraction: float = Field(
        0.05, ge=0, le=1, description="A cell with more failed requests is invalid."
    )
    client_lag_limit_ms: PositiveFloat = Field(
        50.0, description="A cell whose client event loop lagged more (p99) is invalid: the client, not the "
        "server, set its timestamps."
    )
    adaptive_stopping: AdaptiveStoppingSpec | None = Field(
        None, description="Unset: every cell measures requests_per_cell requests (the fixed budget)."
    )

    @model_validator(mode="after")
    def _some_load(self) -> "LoadSpec":
        if not self.concurrency and not self.rates_per_s:
            raise ValueError("give at least one concurrency level or arrival rate")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError(f"concurrency repeats a level: {self.concurrency}")
        return self


class PromptClassSpec(ContractModel):
    """A named prompt source with length caps (seed: "Telemetry and slices")."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    source: PromptSource = "bundled"
    path: str | None = Field(
        None, description="File for jsonl/sharegpt; bundled set name for bundled (default: name)."
    )
    max_input_tokens: PositiveInt | None = None
    max_output_tokens: PositiveInt = 64
    scored_set: str | None = Field(
        None, min_length=1, description="Held-out scored set of the quality gate (JSONL, specfleet.gates.scored_set); "
        "a relative path resolves against the config file's folder, as path does. Unset: the quality gate "
        "cannot run for this class (specfleet.stats.quality.quality_not_run)."
    )

    @model_validator(mode="after")
    def _path_for_files(self) -> "PromptClassSpec":
        if self.source != "bundled" and not self.path:
            raise ValueError(f"prompt class {self.name!r}: source {self.source} needs a path")
        return self


class SamplingSpec(ContractModel):
    name: str = Field("greedy", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class SLOSpec(ContractModel):
    """Targets stated before the run. A request's tokens count only if it met both."""

    ttft_ms: PositiveFloat
    itl_ms: PositiveFloat
    percentile: float = Field(95.0, gt=0, le=100, description="Percentile each target binds.")
    itl_statistic: ItlStatistic = Field(
        "per_chunk", description="Which ITL series the ITL target binds (docs/measurement.md, 'Latency series')."
    )
