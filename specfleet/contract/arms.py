"""Arms: the baseline and the speculation methods swept over k (vLLM ``speculative_config``)."""

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, JsonValue, PositiveInt, field_validator, model_validator

from specfleet.contract.base import ContractModel
from specfleet.contract.models import refuse_standin

SpecMethod = Literal["draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
Method = Literal["baseline", "draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix"]
KSchedule = tuple[tuple[int, int, int], ...]
"""vLLM's ``num_speculative_tokens_per_batch_size``: inclusive (first batch, last batch, k) ranges
(a tuple: a cell's identity holds it and is hashed)."""

METHODS_NEEDING_MODEL: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3"})
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
ADAPTIVE_VERIFICATION_KEY = "enable_adaptive_verification"
SET_BY_ARM = {"method": "method", "num_speculative_tokens": "k", "model": "model",
              "prompt_lookup_min": "prompt_lookup_min", "prompt_lookup_max": "prompt_lookup_max"}
"""speculative_config keys an arm sets with its own fields: in speculative_extra they would
silently override the matrix."""
REJECTION_METHOD_KEY = "rejection_sample_method"


def turns_on_synthetic(key: str, value: JsonValue) -> bool:
    """Whether a ``speculative_config`` key turns on or shapes vLLM's synthetic acceptance
    (``rejection_sample_method: synthetic``, ``synthetic_acceptance_*``)."""
    return (key == REJECTION_METHOD_KEY and value == "synthetic") or key.startswith("synthetic_")


def parse_schedule(value: object) -> KSchedule:
    """A k schedule as vLLM reads it: a non-empty list of [first, last, k], first from 1, ranges in
    order; a ``ValueError`` saying what is wrong."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"{SCHEDULE_KEY} must be a non-empty list of [first batch, last batch, k] (got {value!r})")
    ranges: list[tuple[int, int, int]] = []
    for entry in value:
        if (not isinstance(entry, list | tuple) or len(entry) != 3
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in entry)):
            raise ValueError(f"{SCHEDULE_KEY}: each entry is [first batch, last batch, k] integers (got {entry!r})")
        first, last, k = entry
        if first < 1 or last < first or k < 0 or (ranges and first <= ranges[-1][1]):
            raise ValueError(f"{SCHEDULE_KEY}: {list(entry)} must start at 1 or after the range before, end at or "
                             "after its start, with k >= 0")
        ranges.append((first, last, k))
    if ranges[0][0] != 1:
        raise ValueError(f"{SCHEDULE_KEY}: the first range must start at batch 1 (got {ranges[0][0]})")
    return tuple(ranges)


def k_at_batch(schedule: Sequence[tuple[int, int, int]], batch: int) -> int:
    """vLLM's lookup: the k of the last range starting at or below ``batch`` (a gap and the batches
    past the last range carry the k before them forward)."""
    return [k for start, _, k in schedule if start <= batch][-1]


def schedule_text(schedule: Sequence[tuple[int, int, int]]) -> str:
    """``k 4 at batch 1, 2 at 2-4, 0 at 5-16``: how every output writes a k schedule."""
    parts = [f"{k} at {first}" if first == last else f"{k} at {first}-{last}" for first, last, k in schedule]
    return "k " + ", ".join(parts).replace(" at ", " at batch ", 1)


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

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="The arm's name in every result.")
    method: Method = Field(description="baseline (exactly one arm), or the speculative_config method.")
    k: list[PositiveInt] = Field(
        default_factory=list, description="num_speculative_tokens values to sweep."
    )
    model: str | None = Field(None, description="Draft or speculator path; defaults to models.draft.")
    prompt_lookup_min: PositiveInt | None = Field(None, description="ngram only: the shortest n-gram matched.")
    prompt_lookup_max: PositiveInt | None = Field(None, description="ngram only: the longest n-gram matched.")
    speculative_extra: dict[str, JsonValue] = Field(
        default_factory=dict, description="Further speculative_config keys, passed through as given (lists and "
        "mappings too); checked against the installed engine's SpeculativeConfig before any server starts. With "
        f"{SCHEDULE_KEY} the arm's k may be left out: it is the schedule's largest.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Server environment for this arm only."
    )
    _no_standin = field_validator("env")(refuse_standin)
    synthetic_acceptance: SyntheticAcceptance | None = Field(
        None, description="Calibration only: the engine accepts drafts at this rate (SYNTHETIC, never decided on).")
    policy_of: str | None = Field(
        None, description="Set by the sweep, never in a config file: the arm whose derived k policy this arm runs "
        "(policy.measure). Its cells are measured at the policy's sampling and the traffic mix's loads only.")

    @model_validator(mode="before")
    @classmethod
    def _k_from_schedule(cls, data: object) -> object:
        """An arm with a k schedule and no k list runs at the schedule's largest k."""
        if isinstance(data, dict) and not data.get("k") and isinstance(data.get("speculative_extra"), dict):
            schedule = data["speculative_extra"].get(SCHEDULE_KEY)
            if isinstance(schedule, list) and schedule and all(isinstance(e, list) and len(e) == 3 for e in schedule):
                largest = max(e[2] for e in schedule)
                if isinstance(largest, int) and largest > 0:
                    return {**data, "k": [largest]}
        return data

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
        set_by_arm = sorted(set(SET_BY_ARM) & set(self.speculative_extra))
        if set_by_arm:
            raise ValueError(f"arm {self.name!r}: speculative_extra.{set_by_arm[0]} is the arm's own "
                             f"{SET_BY_ARM[set_by_arm[0]]}: set it there")
        synthetic_keys = sorted(key for key, value in self.speculative_extra.items() if turns_on_synthetic(key, value))
        if synthetic_keys:
            raise ValueError(f"arm {self.name!r}: speculative_extra.{synthetic_keys[0]} turns on the engine's "
                             "synthetic acceptance, whose cells are labelled SYNTHETIC and never decided on: set it "
                             "with synthetic_acceptance")
        if SCHEDULE_KEY in self.speculative_extra:
            largest = max(k for *_, k in parse_schedule(self.speculative_extra[SCHEDULE_KEY]))
            if any(k < largest for k in self.k):
                raise ValueError(f"arm {self.name!r}: k {self.k} is below its {SCHEDULE_KEY}'s largest k {largest} "
                                 "(vLLM caps the schedule at k)")
        if len(set(self.k)) != len(self.k):
            raise ValueError(f"arm {self.name!r} repeats a k value: {self.k}")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if self.method != "ngram" and (lo or hi):
            raise ValueError("prompt_lookup_min/max apply to the ngram method only")
        if lo and hi and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} exceeds prompt_lookup_max {hi}")
        if self.policy_of is not None and self.schedule is None:
            raise ValueError(f"arm {self.name!r}: a measured k policy runs a {SCHEDULE_KEY}")
        synthetic = self.synthetic_acceptance
        if synthetic is not None:
            if synthetic.acceptance_rates is not None and len(synthetic.acceptance_rates) < max(self.k):
                raise ValueError(f"arm {self.name!r}: synthetic_acceptance.acceptance_rates needs {max(self.k)} "
                                 f"positions (its largest k), got {len(synthetic.acceptance_rates)}")
            length = synthetic.acceptance_length
            if length is not None and length > min(self.k) + 1:
                raise ValueError(f"arm {self.name!r}: synthetic_acceptance.acceptance_length {length} exceeds "
                                 f"k + 1 = {min(self.k) + 1} at its smallest k")
            if REJECTION_METHOD_KEY in self.speculative_extra:
                raise ValueError(f"arm {self.name!r}: set synthetic acceptance with synthetic_acceptance, not "
                                 "speculative_extra")
        return self

    @property
    def synthetic(self) -> bool:
        return self.synthetic_acceptance is not None

    @property
    def schedule(self) -> KSchedule | None:
        """The k per running batch size the arm sets itself, None at a fixed k."""
        value = self.speculative_extra.get(SCHEDULE_KEY)
        return None if value is None else parse_schedule(value)

    @property
    def adaptive_verification(self) -> bool:
        return self.speculative_extra.get(ADAPTIVE_VERIFICATION_KEY) is True

    @property
    def adaptive(self) -> bool:
        """The engine changes what the arm proposes or verifies as it runs: its cells are no fixed-k
        measurement (no k policy, no step-law fit reads them)."""
        return self.schedule is not None or self.adaptive_verification


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
