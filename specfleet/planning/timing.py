"""The two sources of a plan's times (``specfleet.planning.estimate.Timing``): the performance
model's cold-start prior, and a model calibrated on a stored sweep with that sweep's own
start-up and probe records."""

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from specfleet.contract import ArmPlan
from specfleet.perfmodel.acceptance import AcceptanceProfile
from specfleet.perfmodel.calibrate import Calibration
from specfleet.perfmodel.prior import PRIOR_LABEL, ModelShape, Roofline, prior_startup_s, prior_step
from specfleet.perfmodel.step_time import LinearStep, StepBatch
from specfleet.results import ArmTiming

HIGH_QUANTILE = 97.5
"""The percentile of the step law's bootstrap a budget counts each cell at (``cell_high_scale``)."""
ROBUST_STARTUPS = 3
"""Start-ups of an arm's models recorded on this machine from which a calibrated plan counts their
median rather than the calibration sweep's own mean (``CalibratedTiming.startup_s``)."""
NO_ACCEPTANCE_NOTE = ("no acceptance measured: one token per step assumed (nothing accepted), an upper bound on "
                      "time")


@dataclass(frozen=True)
class PriorTiming:
    """Roofline step laws and stated start-up defaults; one token per step for speculative arms
    (acceptance is unknown before a sweep: the plan's time is then an upper bound)."""

    target: ModelShape
    drafts: Mapping[str, ModelShape]
    """Draft model per arm spec name (``draft_model`` arms)."""
    roofline: Callable[[], Roofline]
    """The accelerator's roofline, asked for only when a prior figure is used (on the CPU build it is
    measured: a plan calibrated on a stored sweep that covers every arm never needs it)."""
    prompt_tokens_by_class: Mapping[str, float]
    recorded_startups_s: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Per arm (``ArmPlan.arm``), start-ups of servers of the same models recorded on this machine."""
    engine_import: Callable[[], float | None] = lambda: None
    """Seconds one process takes to import the engine's API server on the serving host, asked for only
    when an arm has no recorded start-up; None where it cannot be timed (the stated default counts)."""
    basis: str = PRIOR_LABEL
    notes: tuple[str, ...] = (NO_ACCEPTANCE_NOTE,)
    """What the plan should say about these times."""

    @cached_property
    def hardware(self) -> Roofline:
        return self.roofline()

    def step(self, arm: ArmPlan) -> LinearStep:
        return prior_step(self.target, self.drafts.get(arm.spec_name), arm.method, arm.k or 0, self.hardware)

    def tokens_per_step(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        return 1.0

    def draft_rate(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        return 1.0

    def prompt_tokens(self, prompt_class: str) -> float:
        return self.prompt_tokens_by_class[prompt_class]

    def request_overhead_ms(self) -> float:
        return self.hardware.engine.step_overhead_ms

    @cached_property
    def import_s(self) -> float | None:
        return self.engine_import()

    def startup_s(self, arm: ArmPlan) -> float:
        """The median recorded start-up of the arm's models on this machine, else the prior's from the
        engine's import time on this host, else the stated default."""
        recorded = self.recorded_startups_s.get(arm.arm)
        if recorded:
            return float(statistics.median(recorded))
        draft = self.drafts.get(arm.spec_name)
        return prior_startup_s([self.target, *([draft] if draft is not None else [])], self.hardware, self.import_s)

    def probe_s(self, arm: ArmPlan) -> float | None:
        return None

    def sweep_overhead_s(self) -> float:
        return self.hardware.engine.sweep_overhead_s

    def startup_high_s(self, arm: ArmPlan) -> float:
        """The slowest recorded start-up of the arm's models; else a first start on this machine (one
        that compiles kernels: ``first_start_ratio`` over the estimate from the import), else the default."""
        recorded = self.recorded_startups_s.get(arm.arm)
        if recorded:
            return max(recorded)
        ratio = self.hardware.engine.first_start_ratio if self.import_s is not None else 1.0
        return ratio * self.startup_s(arm)

    def startup_estimate_note(self) -> str | None:
        """What the plan says of a start-up estimated from the engine's import (None unless one was)."""
        if "import_s" not in self.__dict__ or self.import_s is None:  # never asked for: every arm recorded
            return None
        engine = self.hardware.engine
        return (f"server start-up with no start of the arm's models recorded here: {engine.startup_per_import} x "
                f"{self.import_s:.1f} s, this machine's import of the engine's API server (a stated ratio, "
                f"docs/performance-model.md); a budget counts a first start, {engine.first_start_ratio}x that")

    def after_stages_s(self) -> float:
        return self.sweep_overhead_s()

    def cell_high_scale(self) -> float:
        """1: the prior has no fit to bound; its one token per speculative step is an upper bound on time."""
        return 1.0


@dataclass(frozen=True)
class ArmRecord:
    """One arm's timing as the calibration sweep recorded it."""

    arm: str
    method: str
    phase: str
    timing: ArmTiming


@dataclass(frozen=True)
class CalibratedTiming:
    """The step law and acceptance of a calibrated model; start-up, probes and the time outside
    the arms from the sweep's records. Arms or classes the sweep lacks fall back to ``prior``."""

    calibration: Calibration
    records: Sequence[ArmRecord]
    outside_arms_s: float | None
    """The calibration sweep's wall time less its stages' (Ray's start, planning, aggregation), when it
    recorded its wall time."""
    prior: PriorTiming
    after_stages_recorded_s: float | None = None
    """The calibration sweep's seconds after its last stage, when it recorded them."""
    history: Sequence[ArmRecord] = ()
    """Arm records of other recent sweeps of the config: more start-ups for ``startup_high_s``."""
    history_after_stages_s: Sequence[float] = ()
    """Their recorded seconds after the last stage: more for ``after_stages_s``."""
    notes: list[str] = field(default_factory=list)

    @property
    def basis(self) -> str:
        return f"calibrated on {self.calibration.sweep_id}"

    def step(self, arm: ArmPlan) -> LinearStep:
        if arm.method not in self.calibration.law.methods:
            self._note(f"arm {arm.arm}: its method was not measured in {self.calibration.sweep_id}; step time from "
                       f"the {PRIOR_LABEL}")
            return self.prior.step(arm)
        return self.calibration.law.linear(arm.method, arm.k or 0)

    def _profile(self, arm: ArmPlan, prompt_class: str, sampling: str) -> AcceptanceProfile | None:
        return self.calibration.acceptance.get((arm.spec_name, prompt_class, sampling))

    def tokens_per_step(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        if arm.is_baseline:
            return 1.0
        profile = self._profile(arm, prompt_class, sampling)
        if profile is None:
            why = self.calibration.acceptance_missing.get((arm.spec_name, prompt_class, sampling))
            self._note(f"arm {arm.spec_name} on {prompt_class} ({sampling}): {NO_ACCEPTANCE_NOTE}"
                       + (f" ({why})" if why else ""))
            return 1.0
        return float(profile.tokens_per_step(arm.k or 0))

    def draft_rate(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        profile = self._profile(arm, prompt_class, sampling)
        return 1.0 if profile is None else float(profile.rate(k=arm.k))

    def prompt_tokens(self, prompt_class: str) -> float:
        shapes = self.calibration.workloads.get(prompt_class)
        if not shapes:
            return self.prior.prompt_tokens(prompt_class)
        return sum(s.prompt_tokens for s in shapes) / len(shapes)

    def request_overhead_ms(self) -> float:
        return self.calibration.overhead_ms

    def _timings(self, arm: ArmPlan, records: Sequence[ArmRecord]) -> list[ArmTiming]:
        for match in (lambda r: r.arm == arm.arm, lambda r: r.method == arm.method, lambda r: True):
            found = [r.timing for r in records if match(r) and r.timing.server_starts]
            if found:
                return found
        return []

    def startup_s(self, arm: ArmPlan) -> float:
        """The median of this machine's recorded start-ups of the arm's models when it holds at least
        ``ROBUST_STARTUPS`` (the calibration sweep's own among them), else the sweep's mean per start
        for the arm (its method, any arm), else the prior's. A machine's first server compiles its
        kernels (the demo's baseline on a fresh 2-core machine: 56 s, later starts of the target 34-38
        s), and the mean of a first sweep that held it put the next demo sweep's plan 10.5 % over, the
        median 4.6 %; the budget still counts on the slowest (``startup_high_s``)."""
        recorded = self.prior.recorded_startups_s.get(arm.arm, ())
        if len(recorded) >= ROBUST_STARTUPS:
            return float(statistics.median(recorded))
        found = self._timings(arm, self.records)
        if not found:
            return self.prior.startup_s(arm)
        return sum(t.startup_s / t.server_starts for t in found) / len(found)

    def startup_high_s(self, arm: ArmPlan) -> float:
        """The slowest start-up recorded for the arm (else its method, else any arm) in this sweep
        and the ``history``: what a budget counts on, since a start-up longer than planned runs
        the sweep past its deadline (the demo's baseline started in 46 to 75 s on one machine)."""
        found = self._timings(arm, [*self.records, *self.history])
        if not found:
            return self.prior.startup_s(arm)
        return max(t.startup_s / t.server_starts for t in found)

    def after_stages_s(self) -> float:
        """After the last stage (Ray's stop, logging, aggregation): the longest recorded here and in
        the history (a budgeted sweep's aggregation also predicts the cells it left out: 15 s
        against 5 s for a complete demo sweep), else all the time outside the arms."""
        recorded = [*([] if self.after_stages_recorded_s is None else [self.after_stages_recorded_s]),
                    *self.history_after_stages_s]
        return max(recorded) if recorded else self.sweep_overhead_s()

    def cell_high_scale(self) -> float:
        """The step law's 97.5th bootstrap percentile relative to its point (the slowest over the measured
        methods, k and concurrency), widened by half the sweep's largest baseline spread: the slow end of
        a prediction's interval (``specfleet.perfmodel.predict``), never below 1."""
        cal = self.calibration
        batches = [StepBatch(method=method, k=k, decode_seqs=float(c)) for method, ks in self._method_ks().items()
                   for k in ks for c in cal.concurrency or (1,)]
        scales = [float(np.percentile(cal.law.replicate_scales([b]), HIGH_QUANTILE)) for b in batches]
        return max(1.0, *scales) * (1.0 + (cal.noise_floor or 0.0) / 2.0)

    def _method_ks(self) -> dict[str, tuple[int, ...]]:
        cal = self.calibration
        by_method: dict[str, set[int]] = {"baseline": {0}} if "baseline" in cal.law.methods else {}
        for arm in cal.config.arms:
            if arm.method != "baseline" and arm.method in cal.law.methods:
                by_method.setdefault(arm.method, set()).update(cal.measured_k.get(arm.name, ()))
        return {m: tuple(sorted(ks)) for m, ks in by_method.items() if ks}

    def probe_s(self, arm: ArmPlan) -> float | None:
        probes = [r.timing.probe_s for r in self.records if r.arm == arm.arm and r.phase == "main"
                  and r.timing.probe_s > 0]
        return probes[0] if probes else None

    def sweep_overhead_s(self) -> float:
        return self.prior.sweep_overhead_s() if self.outside_arms_s is None else self.outside_arms_s

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)
