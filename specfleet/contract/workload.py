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
    min_requests: int = Field(ge=2, description="Requests a cell measures before the rule may stop it.")
    max_requests: PositiveInt = Field(description="Requests after which a cell stops however wide its intervals.")
    check_every: PositiveInt = Field(8, description="Completed requests between two checks of the rule.")

    @model_validator(mode="after")
    def _bounds(self) -> "AdaptiveStoppingSpec":
        if self.min_requests > self.max_requests:
            raise ValueError(f"min_requests {self.min_requests} is over max_requests {self.max_requests}")
        return self


class LoadSpec(ContractModel):
    """Closed-loop concurrency levels and/or open-loop Poisson rates (seed: "Load")."""

    concurrency: list[PositiveInt] = Field(
        default_factory=list, description="Closed-loop load levels: clients in flight.")
    rates_per_s: list[PositiveFloat] = Field(
        default_factory=list, description="Open-loop load levels: Poisson arrivals per second.")
    warmup_requests: NonNegativeInt = Field(
        2, description="Requests sent before each cell's measured window, not counted.")
    requests_per_cell: PositiveInt = Field(32, description="Measured requests per cell (without adaptive stopping).")
    repeats: PositiveInt = Field(1, description="Times each cell is measured (separate windows on the same server).")
    request_timeout_s: PositiveFloat = Field(300.0, description="A request still streaming after this fails.")
    ignore_eos: bool = Field(
        True, description="Fix output length per prompt so every arm generates the same tokens."
    )
    arrival_seed: int = Field(0, description="Seed of the open-loop arrival times (the same schedule for every arm).")
    max_error_fraction: float = Field(
        0.05, ge=0, le=1, description="A cell with more failed requests is invalid."
    )
    client_lag_limit_ms: PositiveFloat = Field(
        50.0, description="A cell whose client event loop lagged more (p99) is invalid: the client, not the "
        "server, set its timestamps."
    )
    adaptive_stopping: AdaptiveStoppingSpec | None = Field(
        None, description="Unset: every cell measures requests_per_cell requests (the fixed budget); under a "
        "sweep budget, a relative half-width of 10 % with min_requests a quarter of requests_per_cell (at least 2) "
        "and max_requests requests_per_cell, so a budget shortens cells and never lengthens one."
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

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="The class's name in every result.")
    source: PromptSource = Field(
        "bundled", description="bundled (configs/prompts/ by name), jsonl, or a sharegpt JSON file.")
    path: str | None = Field(
        None, description="File for jsonl/sharegpt; bundled set name for bundled (default: name)."
    )
    max_input_tokens: PositiveInt | None = Field(None, description="Prompts longer than this are left out.")
    max_output_tokens: PositiveInt = Field(64, description="max_tokens of every request of the class.")
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
    name: str = Field("greedy", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="The setting's name.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 is greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling's probability mass.")
    seed: int = Field(0, description="Per-request sampling seed.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class SLOSpec(ContractModel):
    """Targets stated before the run. A request's tokens count only if it met both."""

    ttft_ms: PositiveFloat = Field(description="Time-to-first-token target, per request.")
    itl_ms: PositiveFloat = Field(description="Inter-token latency target, at the percentile within each request.")
    percentile: float = Field(95.0, gt=0, le=100, description="Percentile each target binds.")
    itl_statistic: ItlStatistic = Field(
        "per_chunk", description="Which ITL series the ITL target binds (docs/measurement.md, 'Latency series')."
    )
