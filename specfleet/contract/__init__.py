"""The benchmark contract (seed: "Benchmark contract"): typed config, matrix and loading."""

from specfleet.contract.arms import ArmSpec, speculative_config
from specfleet.contract.budget import BudgetSpec
from specfleet.contract.checks import AnalysisSpec, EquivalenceSpec, StochasticTestSpec
from specfleet.contract.loading import parse_sweep_config
from specfleet.contract.matrix import ArmPlan, CellIdentity, arm_plans, cell_identities, load_label
from specfleet.contract.models import EngineSpec, HardwareSpec, ModelRef, ModelsSpec
from specfleet.contract.sweep import SweepConfig
from specfleet.contract.traffic import TrafficSpec
from specfleet.contract.workload import LoadSpec, PromptClassSpec, SamplingSpec, SLOSpec

__all__ = [
    "AnalysisSpec", "ArmPlan", "ArmSpec", "BudgetSpec", "CellIdentity", "EngineSpec", "EquivalenceSpec",
    "HardwareSpec", "LoadSpec", "ModelRef", "ModelsSpec", "PromptClassSpec", "SLOSpec",
    "SamplingSpec", "StochasticTestSpec", "SweepConfig", "TrafficSpec", "arm_plans", "cell_identities",
    "load_label", "parse_sweep_config", "speculative_config",
]
