"""Arms: the baseline and the speculation methods swept over k (vLLM ``speculative_config``)."""

from typing import Literal

from pydantic import Field, PositiveInt, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from specfleet.contract.base import ContractModel

SpecMethod = Literal["draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
Method = Literal["baseline", "draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
ScalarValue = StrictBool | StrictInt | StrictFloat | StrictStr

METHODS_NEEDING_MODEL: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3"})


class SyntheticAcceptance(ContractModel):
    """vLLM's synthetic rejection sampling (``speculative_config`` ``rejection_sample_method:
    synthetic``, vLLM 0.32): the engine accepts drafts at a set rate whatever they propose, so a
    cell measures the step's cost against k, batch and acceptance apart from the draft's quality
    (docs/performance-model.md, "The synthetic calibration sweep"). Its outputs are not the target's:
    its cells are SYNTHETIC wherever they appear and never enter a decision. Exactly one of:"""

    acceptance_length: float | None = Field(
        None, ge=1.0, description="Mean acceptance length, bonus token included (vLLM's synthetic_acceptance_length).")
    acceptance_rates: list[float] | None = Field(
        None, min_length=1, description="Per position, the share of drafts whose accepted prefix reaches it "
        "(vLLM's synthetic_acceptance_rates, unconditional and non-increasing); at each k the first k are used.")

    @model_validator(mode="after")
    def _one(self) -> "SyntheticAcceptance":
        if (self.acceptance_length is None) == (self.acceptance_rates is None):
            raise ValueError("give exactly one of acceptance_length or acceptance_rates")
        rates = self.acceptance_rates or []
        if any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"acceptance_rates must each be in [0, 1] (got {rates})")
        if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
            raise ValueError(f"acceptance_rates must be non-increasing (got {rates})")
        return self

    def speculative_keys(self, k: int) -> dict[str, object]:
        """The ``speculative_config`` keys at one k."""
        if self.acceptance_rates is not None:
            return {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": self.acceptance_rates[:k]}
        return {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": self.acceptance_length}


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
    synthetic_acceptance: SyntheticAcceptance | None = Field(
        None, description="Calibration only: the engine accepts drafts at this rate (SYNTHETIC, never decided on).")

    @model_validator(mode="after")
    def _consistent(self) -> "ArmSpec":
        if self.method == "baseline":
            if self.k:
                raise ValueError("the baseline arm takes no k list (it does not speculate)")
            if (self.model or self.prompt_lookup_min or self.prompt_lookup_max or self.speculative_extra
                    or self.synthetic_acceptance):
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
        synthetic = self.synthetic_acceptance
        if synthetic is not None:
            if synthetic.acceptance_rates is not None and len(synthetic.acceptance_rates) < max(self.k):
                raise ValueError(f"arm {self.name!r}: synthetic_acceptance.acceptance_rates needs {max(self.k)} "
                                 f"positions (its largest k), got {len(synthetic.acceptance_rates)}")
            length = synthetic.acceptance_length
            if length is not None and length > min(self.k) + 1:
                raise ValueError(f"arm {self.name!r}: synthetic_acceptance.acceptance_length {length} exceeds "
                                 f"k + 1 = {min(self.k) + 1} at its smallest k")
            clash = {"rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length"}
            if clash & set(self.speculative_extra):
                raise ValueError(f"arm {self.name!r}: set synthetic acceptance with synthetic_acceptance, not "
                                 "speculative_extra")
        return self

    @property
    def synthetic(self) -> bool:
        return self.synthetic_acceptance is not None


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
    if arm.synthetic_acceptance is not None:
        config.update(arm.synthetic_acceptance.speculative_keys(k))
    return config
