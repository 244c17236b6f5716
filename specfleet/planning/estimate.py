"""What a sweep will cost before it starts (issue 18): servers, cells, requests, tokens,
predicted wall time, accelerator-hours and cost, per stage and in total.

Every figure here is PREDICTED. Time per cell comes from a step law (``LinearStep``) and
tokens per step, given by a ``Timing``: the performance model's cold-start prior
(``PriorTiming``) before a sweep exists, or a model calibrated on a stored sweep
(``CalibratedTiming``), which also takes each arm's start-up and probe time from that sweep's
own records. Stages are laid out the way the flow runs them: the opening baseline, every
speculative arm side by side (Ray starts each arm as accelerators free up, in config order),
the closing baseline; each baseline stage split over as many identical replicas as arms fit at
once, check cells included (``specfleet.planning.replicas``). The node is held for the whole sweep, so
accelerator-hours count every accelerator of it, busy or idle, and the idle share is reported
per stage.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import Field

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig, arm_plans, cell_identities
from specfleet.contract.base import RecordModel
from specfleet.perfmodel.prediction import PREDICTED_LABEL
from specfleet.perfmodel.step_time import LinearStep
from specfleet.planning.replicas import arm_shares, slots
from specfleet.stats.equivalence import planned_samples_per_prompt

DEFAULT_MAX_NUM_SEQS = 256
PROBE_IN_FLIGHT = 16
"""Requests in flight of the stochastic and quality probes (``tasks/arm/probes.py``)."""
Stage = Literal["opening baseline", "speculative arms", "closing baseline"]


class Timing(Protocol):
    """Where a plan's times come from."""

    @property
    def basis(self) -> str: ...

    def step(self, arm: ArmPlan) -> LinearStep: ...

    def tokens_per_step(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float: ...

    def draft_rate(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        """Share of decode steps that draft (1 for a draft model)."""
        ...

    def prompt_tokens(self, prompt_class: str) -> float: ...

    def request_overhead_ms(self) -> float: ...

    def startup_s(self, arm: ArmPlan) -> float: ...

    def probe_s(self, arm: ArmPlan) -> float | None:
        """Measured probe time of this arm in the calibration sweep; None: model it."""
        ...

    def sweep_overhead_s(self) -> float:
        """Outside the arms: Ray's start, planning, aggregation."""
        ...

    def startup_high_s(self, arm: ArmPlan) -> float:
        """A start-up a budget can count on (not often exceeded)."""
        ...

    def after_stages_s(self) -> float:
        """Of ``sweep_overhead_s``, what comes after the last stage."""
        ...

    def cell_high_scale(self) -> float:
        """The factor a budget multiplies each cell's predicted time by: its upper predictive bound."""
        ...


class StageEstimate(RecordModel):
    name: str
    servers: int
    cells: int
    requests: int
    tokens: int = Field(description="Output tokens the stage's cells, warm-ups and probes generate.")
    wall_s: float
    accelerator_hours: float
    cost_usd: float
    idle_accelerator_hours: float = Field(description="Held while no arm of the stage ran on them.")


class SweepEstimate(RecordModel):
    """The plan of a sweep: PREDICTED figures, with their basis."""

    predicted: Literal[True] = True
    label: str = PREDICTED_LABEL
    config_name: str
    basis: str = Field(description="'prior, not calibrated' or 'calibrated on SWEEP_ID'.")
    wall_s: float
    accelerator_hours: float
    cost_usd: float
    cells: int
    servers: int
    requests: int
    tokens: int
    idle_accelerator_hours: float
    accelerators: int = Field(description="Accelerators the sweep holds for its whole run.")
    stages: list[StageEstimate]
    budget_s: float | None
    fits_budget: bool | None = Field(description="Null without a budget.")
    notes: list[str]


@dataclass(frozen=True)
class ArmEstimate:
    """One server start: its arm, stage and predicted seconds per part."""

    arm: ArmPlan
    stage: Stage
    cells: list[CellIdentity]
    startup_s: float
    probe_s: float
    cell_s: list[float]
    requests: int
    tokens: int

    @property
    def wall_s(self) -> float:
        return self.startup_s + self.probe_s + sum(self.cell_s)


@dataclass(frozen=True)
class SweepTimes:
    """The plan's per-arm and per-cell times (what a budgeted sweep schedules with)."""

    estimate: SweepEstimate
    arms: list[ArmEstimate] = field(default_factory=list)

    def cell_seconds(self) -> dict[CellIdentity, float]:
        return {c: s for a in self.arms for c, s in zip(a.cells, a.cell_s, strict=True)}


def requests_per_cell(config: SweepConfig) -> int:
    """Measured requests per cell; with adaptive stopping its ``max_requests`` (an upper bound)."""
    stopping = config.load.adaptive_stopping
    return stopping.max_requests if stopping is not None else config.load.requests_per_cell


def closed_loop_ms(requests: int, clients: int, overhead_ms: float, engine_ms: float) -> float:
    """Until the last of ``requests`` ends, sent by ``clients`` closed-loop clients, each request
    first through the API server (one server, ``overhead_ms`` each, first come first served) and
    then ``engine_ms`` in the engine: the way ``specfleet.perfmodel.batching`` serialises the overhead.

    The clients start together, so client j reaches the engine j overheads in; each then cycles
    every overhead + engine time, the first ``requests mod clients`` of them once more. When the
    clients come back faster than the server passes them on, the server is the bottleneck and the
    requests leave it one overhead apart. Dividing the overhead by the batch, as a steady batch
    would, undercounts by about (1 - 1/clients) x requests x overhead where the server queues, and
    rounding requests / clients down drops the last, partial wave."""
    if requests <= 0:
        return 0.0
    clients = max(1, min(clients, requests))
    rounds, extra = divmod(requests, clients)
    cycle = overhead_ms + engine_ms
    # client j (1-based) ends j overheads in, plus its rounds after the first
    last_full = clients * overhead_ms + (rounds - 1) * cycle + engine_ms
    last_extra = extra * overhead_ms + rounds * cycle + engine_ms if extra else 0.0
    server_bound = requests * overhead_ms + engine_ms
    return max(last_full, last_extra, server_bound)


def engine_request_ms(timing: Timing, arm: ArmPlan, config: SweepConfig, prompt_class: str, sampling: str,
                      batch: float) -> float:
    """One request's time in the engine at a steady ``batch`` of running sequences: its prefill step,
    then its output at the arm's tokens per step, each step at the batch's cost."""
    pclass = next(p for p in config.prompt_classes if p.name == prompt_class)
    out_tokens = float(pclass.max_output_tokens)
    prompt = timing.prompt_tokens(prompt_class)
    tps = timing.tokens_per_step(arm, prompt_class, sampling)
    steps = 1.0 + max(0.0, out_tokens - 1.0) / tps
    k = float(arm.k or 0)
    draft_tokens = batch * k * timing.draft_rate(arm, prompt_class, sampling)
    law = timing.step(arm)
    step = law(batch, batch * prompt / steps, batch * (prompt + out_tokens / 2.0), draft_tokens)
    return steps * step


def cell_seconds(timing: Timing, config: SweepConfig, arm: ArmPlan, cell: CellIdentity, requests: int) -> float:
    """A cell's warm-up and measured requests at its load (closed loop: ``closed_loop_ms`` at a steady
    batch of the concurrency; Poisson: the arrivals' span plus one request)."""
    limit = config.engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    total = requests + config.load.warmup_requests
    overhead = timing.request_overhead_ms()
    if cell.load_mode == "concurrency":
        clients = min(int(cell.load_value), limit)
        engine = engine_request_ms(timing, arm, config, cell.prompt_class, cell.sampling, float(clients))
        return closed_loop_ms(total, clients, overhead, engine) / 1000.0
    one = overhead + engine_request_ms(timing, arm, config, cell.prompt_class, cell.sampling, 1.0)
    batch = min(float(limit), max(1.0, cell.load_value * one / 1000.0))  # Little's law
    one = overhead + engine_request_ms(timing, arm, config, cell.prompt_class, cell.sampling, batch)
    return max(total / cell.load_value, total * overhead / 1000.0) + one / 1000.0


def probe_seconds(timing: Timing, config: SweepConfig, arm: ArmPlan, scored_items: Mapping[str, int]) -> float:
    """The equivalence probes (greedy, twice on the baseline; the stochastic samples) and the
    quality probe (each class's scored set at greedy and each sampling mode)."""
    measured = timing.probe_s(arm)
    if measured is not None:
        return measured
    eq = config.equivalence
    first_class = eq.prompt_class or config.prompt_classes[0].name
    sampling = config.sampling[0].name
    limit = float(config.engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS)

    def wave_s(sequences: int, tokens: int, in_flight: float, prompt_class: str) -> float:
        if sequences == 0:
            return 0.0
        batch = min(float(sequences), in_flight, limit)
        step = timing.step(arm)(batch, 0.0, batch * (timing.prompt_tokens(prompt_class) + tokens / 2.0),
                                batch * float(arm.k or 0))
        tps = timing.tokens_per_step(arm, prompt_class, sampling)
        engine = (1.0 + tokens / tps) * step
        return closed_loop_ms(sequences, int(batch), timing.request_overhead_ms(), engine) / 1000.0

    greedy = wave_s(eq.prompts, eq.greedy_max_tokens, float(eq.prompts), first_class) * (2 if arm.is_baseline else 1)
    stochastic = 0.0
    if eq.stochastic is not None:
        _, planned = planned_samples_per_prompt(eq.stochastic, eq.prompts)
        stochastic = wave_s(planned * eq.prompts, eq.stochastic.tokens_per_sample, PROBE_IN_FLIGHT, first_class)
    quality = 0.0
    if eq.quality_tolerance is not None:
        from specfleet.gates.quality import quality_samplings

        modes = len(quality_samplings(config))
        for pc in config.prompt_classes:
            quality += modes * wave_s(scored_items.get(pc.name, 0), pc.max_output_tokens, PROBE_IN_FLIGHT, pc.name)
    return greedy + stochastic + quality


def _tokens(config: SweepConfig, cells: Sequence[CellIdentity], requests: int) -> int:
    out = {p.name: p.max_output_tokens for p in config.prompt_classes}
    return sum(out[c.prompt_class] * (requests + config.load.warmup_requests) for c in cells)


def arm_estimates(timing: Timing, config: SweepConfig, scored_items: Mapping[str, int]) -> list[ArmEstimate]:
    """Every server the sweep starts, in the order the flow starts them: a baseline stage's
    replicas side by side, the first of the opening baseline's running the probes."""
    arms = arm_plans(config)
    requests = requests_per_cell(config)
    phases: list[tuple[ArmPlan, Stage, Literal["main", "baseline_end"]]] = [
        (arms[0], "opening baseline", "main"), *((a, "speculative arms", "main") for a in arms[1:]),
        (arms[0], "closing baseline", "baseline_end")]
    out = []
    for arm, stage, phase in phases:
        identities = cell_identities(config, arm, phase)
        for replica, cells in enumerate(arm_shares(config, arm, phase, identities)):
            probed = phase == "main" and replica == 0 and not arm.synthetic
            probe = probe_seconds(timing, config, arm, scored_items) if probed else 0.0
            out.append(ArmEstimate(
                arm=arm, stage=stage, cells=cells, startup_s=timing.startup_s(arm), probe_s=probe,
                cell_s=[cell_seconds(timing, config, arm, c, requests) for c in cells],
                requests=len(cells) * (requests + config.load.warmup_requests),
                tokens=_tokens(config, cells, requests)))
    return out


def stage_wall_s(durations: Sequence[float], parallel: int) -> float:
    """List scheduling in submission order: each arm starts on the first slot to free up."""
    free = [0.0] * parallel
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free) if durations else 0.0


def estimate_sweep(timing: Timing, config: SweepConfig, scored_items: Mapping[str, int],
                   budget_s: float | None = None) -> SweepTimes:
    """The plan: per stage and in total. ``scored_items``: held-out items per prompt class."""
    arms = arm_estimates(timing, config, scored_items)
    parallel, held = slots(config)
    per_arm = config.hardware.tensor_parallel_size if not config.hardware.on_cpu else held // config.hardware.nodes
    price = config.hardware.accelerator_hour_usd
    stages = []
    for name in ("opening baseline", "speculative arms", "closing baseline"):
        members = [a for a in arms if a.stage == name]
        wall = stage_wall_s([a.wall_s for a in members], parallel)
        busy_h = sum(a.wall_s for a in members) * per_arm / 3600.0
        held_h = wall * held / 3600.0
        stages.append(StageEstimate(
            name=name, servers=len(members), cells=sum(len(a.cells) for a in members),
            requests=sum(a.requests for a in members), tokens=sum(a.tokens for a in members), wall_s=wall,
            accelerator_hours=held_h, cost_usd=held_h * price, idle_accelerator_hours=max(0.0, held_h - busy_h)))
    overhead_s = timing.sweep_overhead_s()
    wall_s = sum(s.wall_s for s in stages) + overhead_s
    accel_h = wall_s * held / 3600.0
    notes = [f"{PREDICTED_LABEL}: {timing.basis}"]
    if config.load.adaptive_stopping is not None:
        notes.append(f"adaptive stopping: every cell counted at its max_requests "
                     f"({config.load.adaptive_stopping.max_requests}), an upper bound")
    notes.append(f"{overhead_s:.0f} s outside the arms (Ray start, planning, aggregation) are in the total, "
                 "not in a stage")
    estimate = SweepEstimate(
        config_name=config.name, basis=timing.basis, wall_s=wall_s, accelerator_hours=accel_h,
        cost_usd=accel_h * price, cells=sum(s.cells for s in stages), servers=sum(s.servers for s in stages),
        requests=sum(s.requests for s in stages), tokens=sum(s.tokens for s in stages),
        idle_accelerator_hours=sum(s.idle_accelerator_hours for s in stages) + overhead_s * held / 3600.0,
        accelerators=held, stages=stages, budget_s=budget_s,
        fits_budget=None if budget_s is None else wall_s <= budget_s, notes=notes)
    return SweepTimes(estimate=estimate, arms=arms)


def human_duration(seconds: float) -> str:
    """``7h 05m``, ``6m 40s``, ``42 s``."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        hours, rest = divmod(round(seconds / 60), 60)
        return f"{hours}h {rest:02d}m" if hours < 48 else f"{seconds / 86400:.1f} days"
    if seconds >= 60:
        minutes, secs = divmod(round(seconds), 60)
        return f"{minutes}m {secs:02d}s"
    return f"{math.ceil(seconds)} s"


def headline(estimate: SweepEstimate) -> str:
    """One line: wall time, accelerator-hours and cost, with the basis and the budget."""
    budget = ""
    if estimate.budget_s is not None:
        budget = (f"; fits the {human_duration(estimate.budget_s)} budget" if estimate.fits_budget
                  else f"; does NOT fit the {human_duration(estimate.budget_s)} budget")
    return (f"plan ({estimate.basis}, predicted): {human_duration(estimate.wall_s)} wall, "
            f"{estimate.accelerator_hours:.1f} accelerator-hours, ${estimate.cost_usd:,.2f} for {estimate.cells} "
            f"cells on {estimate.servers} server starts{budget}")
