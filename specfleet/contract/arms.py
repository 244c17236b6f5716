"""Arms: the baseline and the speculation methods swept over k (vLLM ``speculative_config``)."""

from typing import Literal

from pydantic import Field, PositiveInt, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from specfleet.contract.base import ContractModel

SpecMethod = Literal["draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
Method = Literal["baseline", "draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
ScalarValue = StrictBool | StrictInt | StrictFloat | StrictStr

METHODS_NEEDING_MODEL: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3"})


class ArmSpec(ContractModel):
    """One speculation setting. The matrix expands it into one server per k."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    method: Method
    k: list[PositiveInt] = Field(
        default_factory=list, description="num_speculative_tokens values to sweep."
    )
    model: str | None = Field(None, description="Draft or speculator path; defaults to models.draft.")
    prompt_lookup_min: PositiveInt | None = None
    prompt_lookup_max: PositiveInt | None = None
    speculative_extra: dict[str, ScalarValue] = Field(
        default_factory=dict, description="Further speculative_config keys, passed through."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Server environment for this arm only."
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ArmSpec":
        if self.method == "baseline":
            if self.k:
                raise ValueError("the baseline arm takes no k list (it does not speculate)")
            if self.model or self.prompt_lookup_min or self.prompt_lookup_max or self.speculative_extra:
                raise ValueError("the baseline arm takes no speculative settings")
            return self
        if not self.k:
            raise ValueError(f"arm {self.name!r} ({self.method}) needs a non-empty k list")
        if len(set(self.k)) != len(self.k):
            raise ValueError(f"arm {self.name!r} repeats a k value: {self.k}")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if self.method != "ngram" and (lo or hi):
            raise ValueError("prompt_lookup_min/max apply to the ngram method only")
        if lo and hi and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} exceeds prompt_lookup_max {hi}")
        return self


def speculative_config(arm: ArmSpec, k: int, default_model: str | None) -> dict[str, object] | None:
    """The vLLM ``speculative_config`` for one arm at one k; None for the baseline."""
    if arm.method == "baseline":
        return None
    config: dict[str, object] = {"method": arm.method, "num_speculative_tokens": k}
    model = arm.model or default_model
    if arm.method in METHODS_NEEDING_MODEL:
        if model is None:
            raise ValueError(f"arm {arm.name!r} ({arm.method}) needs a model and models.draft is unset")
        config["model"] = model
    elif arm.model:
        config["model"] = arm.model
    if arm.prompt_lookup_min is not None:
        config["prompt_lookup_min"] = arm.prompt_lookup_min
    if arm.prompt_lookup_max is not None:
        config["prompt_lookup_max"] = arm.prompt_lookup_max
    config.update(arm.speculative_extra)
    return config
