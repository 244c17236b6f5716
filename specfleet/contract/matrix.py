"""Expand a ``SweepConfig`` into arms (one server each) and cells (one measured window each)."""

import hashlib
import json
from typing import Literal

from pydantic import Field

from specfleet.contract.arms import KSchedule, schedule_text, speculative_config
from specfleet.contract.base import RecordModel
from specfleet.contract.sweep import SweepConfig

LoadMode = Literal["concurrency", "rate"]


class ArmPlan(RecordModel):
    """One server: the baseline or one (method, k)."""

    arm: str = Field(description="Readable arm id, e.g. 'baseline' or 'draft-k3'.")
    spec_name: str
    method: str
    k: int | None
    speculative_config: dict[str, object] | None
    env: dict[str, str] = Field(default_factory=dict)
    synthetic: bool = Field(False, description="Synthetic acceptance (calibration only, never decided on).")
    schedule: KSchedule | None = Field(None, description="k per running batch size (vLLM's "
                                       "num_speculative_tokens_per_batch_size); k is then the largest.")
    adaptive_verification: bool = Field(False, description="vLLM's enable_adaptive_verification.")
    policy_of: str | None = Field(None, description="The speculative arm whose derived k policy this server runs.")

    @property
    def is_baseline(self) -> bool:
        return self.k is None

    @property
    def adaptive(self) -> bool:
        """Not one fixed k: no k policy and no step-law fit reads its cells."""
        return self.schedule is not None or self.adaptive_verification


SYNTHETIC_LABEL = "SYNTHETIC acceptance, not decided on"
"""How a cell measured at synthetic acceptance is labelled wherever it appears."""


def load_label(load_mode: str, load_value: float) -> str:
    """A load as every output writes it: ``c4`` for closed-loop concurrency 4, ``r2.5/s`` for an
    open-loop rate of 2.5 requests per second."""
    return f"c{int(load_value)}" if load_mode == "concurrency" else f"r{load_value:g}/s"


class CellIdentity(RecordModel):
    """The contract identity of a cell. Its hash with the sweep fingerprint is the cell key."""

    arm: str
    method: str
    k: int | None
    load_mode: LoadMode
    load_value: float
    prompt_class: str
    sampling: str
    repeat: int
    phase: Literal["main", "baseline_end"] = "main"
    replica_check: bool = False
    """A baseline cell measured a second time, on another replica (``specfleet.planning.replicas``).
    At its default it is left out of the key and the label, so keys of earlier sweeps hold."""
    synthetic: bool = False
    """Measured at synthetic acceptance (``ArmSpec.synthetic_acceptance``): a calibration cell, never
    decided on. At its default it is left out of the key, so keys of earlier sweeps hold."""
    schedule: KSchedule | None = None
    """The server's k per running batch size (an adaptive arm, or a measured k policy); None at a
    fixed k. At its default it is left out of the key and the label."""
    adaptive_verification: bool = False
    """The server ran vLLM's adaptive verification. At its default it is left out of the key and the label."""

    @property
    def adaptive(self) -> bool:
        return self.schedule is not None or self.adaptive_verification

    @property
    def num_speculative_tokens(self) -> int:
        """vLLM's name for k; the baseline (k None) proposes 0 tokens per step."""
        return 0 if self.k is None else self.k

    @property
    def concurrency(self) -> int | None:
        return int(self.load_value) if self.load_mode == "concurrency" else None

    @property
    def label(self) -> str:
        load = load_label(self.load_mode, self.load_value)
        tail = f"r{self.repeat}" + ("-end" if self.phase == "baseline_end" else "")
        tail += "-check" if self.replica_check else ""
        tail += f" / {SYNTHETIC_LABEL}" if self.synthetic else ""
        tail += f" / {schedule_text(self.schedule)}" if self.schedule is not None else ""
        tail += " / adaptive verification" if self.adaptive_verification else ""
        return f"{self.arm} / {self.prompt_class} / {load} / {self.sampling} / {tail}"

    def key(self, fingerprint_digest: str) -> str:
        defaults = {name for name in ("replica_check", "synthetic", "schedule", "adaptive_verification")
                    if not getattr(self, name)}
        identity = self.model_dump(mode="json", exclude=defaults or None)
        payload = json.dumps([identity, fingerprint_digest], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def arm_plans(config: SweepConfig) -> list[ArmPlan]:
    """The baseline first, then each speculative arm at each k, in config order."""
    default_model = config.models.draft.path if config.models.draft else None
    plans: list[ArmPlan] = []
    for spec in config.arms:
        if spec.method == "baseline":
            plans.insert(0, ArmPlan(arm=spec.name, spec_name=spec.name, method="baseline", k=None,
                                    speculative_config=None, env=dict(spec.env)))
            continue
        for k in spec.k:
            plans.append(ArmPlan(
                arm=spec.name if spec.policy_of else f"{spec.name}-k{k}", spec_name=spec.name, method=spec.method, k=k,
                speculative_config=speculative_config(spec, k, default_model), env=dict(spec.env),
                synthetic=spec.synthetic, schedule=spec.schedule, adaptive_verification=spec.adaptive_verification,
                policy_of=spec.policy_of,
            ))
    return plans


def cell_identities(
    config: SweepConfig, arm: ArmPlan, phase: Literal["main", "baseline_end"] = "main"
) -> list[CellIdentity]:
    """Cells of one arm: load level x prompt class x sampling x repeat. A measured k policy's arm
    runs at its policy's sampling and the concurrency levels the traffic mix serves only."""
    loads: list[tuple[LoadMode, float]] = [("concurrency", float(c)) for c in config.load.concurrency]
    loads += [("rate", r) for r in config.load.rates_per_s]
    samplings = config.sampling
    if arm.policy_of is not None:
        shares = config.traffic.concurrency if config.traffic is not None else None
        loads = [(mode, value) for mode, value in loads if mode == "concurrency"
                 and (not shares or shares.get(int(value), 0.0) > 0)]
        samplings = [s for s in config.sampling if s.name == config.policy_sampling]
    return [
        CellIdentity(arm=arm.arm, method=arm.method, k=arm.k, load_mode=mode, load_value=value,
                     prompt_class=pc.name, sampling=s.name, repeat=rep, phase=phase, synthetic=arm.synthetic,
                     schedule=arm.schedule, adaptive_verification=arm.adaptive_verification)
        for mode, value in loads
        for pc in config.prompt_classes
        for s in samplings
        for rep in range(config.load.repeats)
    ]
