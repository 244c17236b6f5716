"""The whole benchmark contract, one typed ``SweepConfig``, and the matrix it expands into."""

from pydantic import Field, ValidationInfo, field_validator, model_validator

from specfleet.contract.arms import ArmSpec
from specfleet.contract.base import ContractModel
from specfleet.contract.budget import BudgetSpec
from specfleet.contract.checks import AnalysisSpec, EquivalenceSpec
from specfleet.contract.models import EngineSpec, HardwareSpec, ModelsSpec
from specfleet.contract.policy import PolicySpec
from specfleet.contract.traffic import TrafficSpec, check_traffic
from specfleet.contract.workload import LoadSpec, PromptClassSpec, SamplingSpec, SLOSpec


class SweepConfig(ContractModel):
    """The seed's benchmark contract: every field a pilot needs to be comparable and repeatable."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="Experiment name.")
    description: str = Field("", description="Free text, shown in reports.")
    models: ModelsSpec = Field(description="The target and the default draft; hashes are computed at run time.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="How every arm's server is started.")
    arms: list[ArmSpec] = Field(
        min_length=2, description="At least two, exactly one with method baseline; each speculative arm at each k.")
    load: LoadSpec = Field(description="The load levels every arm is measured at, and the cells' size.")
    prompt_classes: list[PromptClassSpec] = Field(min_length=1, description="The prompt classes, each its own cells.")
    sampling: list[SamplingSpec] = Field(
        default_factory=lambda: [SamplingSpec()], min_length=1, description="Sampling settings; default one greedy.")
    slo: SLOSpec = Field(description="The SLO a request must meet for its tokens to count.")
    hardware: HardwareSpec = Field(description="The accelerator, its price and the cluster's layout.")
    equivalence: EquivalenceSpec = Field(
        default_factory=EquivalenceSpec, description="The greedy, stochastic and quality gates.")
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec, description="How the measurements are decided on.")
    traffic: TrafficSpec | None = Field(
        None, description="Production traffic mix the verdict is weighted by; unset: equal class shares and "
        "the measured loads weighted equally (specfleet.verdicts.traffic_mix.effective_mix)."
    )
    budget: BudgetSpec | None = Field(
        None, description="Run within a wall-clock budget (specfleet sweep --budget overrides it); unset: every "
        "cell is measured, however long it takes."
    )
    policy: PolicySpec | None = Field(
        None, description="Measure the k policy the sweep derives on its own server; unset: the policy's verdict is "
        "composed from the fixed-k cells only.")

    @field_validator("traffic")
    @classmethod
    def _traffic_in_matrix(cls, traffic: TrafficSpec | None, info: ValidationInfo) -> TrafficSpec | None:
        """Cross-check against ``prompt_classes``, ``load`` and ``sampling`` (when those validated)."""
        if traffic is not None and all(name in info.data for name in ("prompt_classes", "load", "sampling")):
            check_traffic(traffic, info.data["prompt_classes"], info.data["load"], info.data["sampling"])
        return traffic

    @model_validator(mode="after")
    def _matrix_is_sound(self) -> "SweepConfig":
        baselines = [a.name for a in self.arms if a.method == "baseline"]
        if len(baselines) != 1:
            raise ValueError(f"exactly one arm must have method 'baseline' (found {len(baselines)})")
        _unique("arms", [a.name for a in self.arms])
        _unique("prompt_classes", [p.name for p in self.prompt_classes])
        _unique("sampling", [s.name for s in self.sampling])
        for arm in self.arms:
            if arm.method in ("draft_model", "eagle", "eagle3") and not (arm.model or self.models.draft):
                raise ValueError(f"arm {arm.name!r} ({arm.method}) needs a model or models.draft")
        probe = self.equivalence.prompt_class
        if probe is not None and probe not in {p.name for p in self.prompt_classes}:
            raise ValueError(f"equivalence.prompt_class {probe!r} is not a prompt class")
        if self.policy is not None and self.policy.measure:
            if not self.load.concurrency:
                raise ValueError("policy.measure needs load.concurrency: a k policy is chosen per concurrency level")
            wanted = self.policy.sampling
            if wanted is not None and wanted not in {s.name for s in self.sampling}:
                raise ValueError(f"policy.sampling {wanted!r} is not a sampling of the config")
        return self

    @property
    def baseline(self) -> ArmSpec:
        return next(a for a in self.arms if a.method == "baseline")

    @property
    def measures_policy(self) -> bool:
        return self.policy is not None and self.policy.measure

    @property
    def policy_sampling(self) -> str:
        """The sampling whose k policy a measured policy arm runs."""
        return (self.policy.sampling if self.policy is not None else None) or self.sampling[0].name


def _unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{field}: name {name!r} appears twice")
        seen.add(name)
