"""The production traffic mix a sweep's verdict is weighted by (seed: "Production gates": the
entry gate holds "at the production concurrency distribution, on at least three prompt classes")."""

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from specfleet.contract.base import ContractModel
from specfleet.contract.workload import LoadSpec, PromptClassSpec, SamplingSpec

SHARE_TOLERANCE = 1e-3
"""Absolute tolerance on a share list's sum: shares printed to three decimals still pass."""

ShareBasis = Literal["tokens", "requests"]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class TrafficSpec(ContractModel):
    """Shares of the fleet's traffic per prompt class, per load level and per sampling mode.

    The class and load share lists count ``share_basis`` (output tokens or requests) and are taken
    as independent: the class mix is the same at every load level.
    """

    share_basis: ShareBasis = Field(
        description="What every share counts: 'tokens' (output tokens served) or 'requests'."
    )
    prompt_classes: dict[str, Share] = Field(
        min_length=1, description=f"Share per prompt class; sums to 1 within {SHARE_TOLERANCE:g} (absolute)."
    )
    concurrency: dict[PositiveInt, Share] | None = Field(
        None, description=f"Share per concurrency level; sums to 1 within {SHARE_TOLERANCE:g} (absolute)."
    )
    rates_per_s: dict[PositiveFloat, Share] | None = Field(
        None, description=f"Share per arrival rate; sums to 1 within {SHARE_TOLERANCE:g} (absolute)."
    )
    sampling: dict[str, Share] | None = Field(
        None, description="Share of requests per sampling mode (names of the config's `sampling` entries); sums to "
        f"1 within {SHARE_TOLERANCE:g} (absolute). Unset: the fleet may serve any mode, so every gate applies to "
        "every verdict; greedy modes only: a failed stochastic test restricts the arm to greedy requests instead "
        "of rejecting its greedy verdicts."
    )

    @model_validator(mode="after")
    def _shares_sum_to_one(self) -> "TrafficSpec":
        if (self.concurrency is None) == (self.rates_per_s is None):
            raise ValueError("give exactly one load distribution: concurrency or rates_per_s")
        lists = {"prompt_classes": list(self.prompt_classes.values()),
                 self.load_mode_field: list(self.load_shares.values())}
        if self.sampling is not None:
            lists["sampling"] = list(self.sampling.values())
        for name, shares in lists.items():
            total = sum(shares)
            if abs(total - 1.0) > SHARE_TOLERANCE:
                raise ValueError(f"{name}: shares sum to {total:g}, not 1 (tolerance {SHARE_TOLERANCE:g})")
        return self

    @property
    def load_mode_field(self) -> Literal["concurrency", "rates_per_s"]:
        return "concurrency" if self.concurrency is not None else "rates_per_s"

    @property
    def load_shares(self) -> dict[float, float]:
        """Share per load value (concurrency level or rate), whichever distribution is given."""
        shares = self.concurrency if self.concurrency is not None else self.rates_per_s
        return {float(load): share for load, share in (shares or {}).items()}


    def greedy_only(self, samplings: list[SamplingSpec]) -> bool:
        """The traffic declares its sampling modes and every one with a share is greedy: a gate that
        validates sampled decoding only (the stochastic test) then decides no verdict the fleet serves."""
        greedy = {s.name for s in samplings if s.greedy}
        return self.sampling is not None and all(name in greedy for name, share in self.sampling.items() if share > 0)


def check_traffic(traffic: TrafficSpec, prompt_classes: list[PromptClassSpec], load: LoadSpec,
                  samplings: list[SamplingSpec]) -> None:
    """A class, load or sampling mode the matrix does not contain: ``ValueError`` naming the field."""
    names = [p.name for p in prompt_classes]
    for name in traffic.prompt_classes:
        if name not in names:
            raise ValueError(f"prompt_classes.{name}: not a prompt class of the sweep ({', '.join(names)})")
    field = traffic.load_mode_field
    measured = [float(v) for v in (load.concurrency if field == "concurrency" else load.rates_per_s)]
    for value in traffic.load_shares:
        if value not in measured:
            levels = ", ".join(f"{v:g}" for v in measured) or "none"
            raise ValueError(f"{field}.{value:g}: not a load of the sweep (load.{field}: {levels})")
    modes = [s.name for s in samplings]
    for name in traffic.sampling or {}:
        if name not in modes:
            raise ValueError(f"sampling.{name}: not a sampling mode of the sweep ({', '.join(modes)})")
