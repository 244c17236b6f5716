"""The production traffic mix a sweep's verdict is weighted by (seed: "Production gates": the
entry gate holds "at the production concurrency distribution, on at least three prompt classes")."""

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from specfleet.contract.base import ContractModel
from specfleet.contract.workload import LoadSpec, PromptClassSpec

SHARE_TOLERANCE = 1e-3
"""Absolute tolerance on a share list's sum: shares printed to three decimals still pass."""

ShareBasis = Literal["tokens", "requests"]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class TrafficSpec(ContractModel):
    """Shares of the fleet's traffic per prompt class and per load level.

    Both share lists count ``share_basis`` (output tokens or requests) and are taken as
    independent: the class mix is the same at every load level.
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

    @model_validator(mode="after")
    def _shares_sum_to_one(self) -> "TrafficSpec":
        if (self.concurrency is None) == (self.rates_per_s is None):
            raise ValueError("give exactly one load distribution: concurrency or rates_per_s")
        for field, shares in (("prompt_classes", self.prompt_classes), ("load", self.load_shares)):
            total = sum(shares.values())
            if abs(total - 1.0) > SHARE_TOLERANCE:
                name = field if field == "prompt_classes" else self.load_mode_field
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


def check_traffic(traffic: TrafficSpec, prompt_classes: list[PromptClassSpec], load: LoadSpec) -> None:
    """A class or load the matrix does not contain: ``ValueError`` naming the field."""
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
