"""``specfleet plan``'s power: the planned design, this machine's recorded noise (or the stated
prior) and the earlier sweeps whose noise the next one pools; then ``specfleet.planning.power``
does the arithmetic. ``--detect`` searches designs (repeats, requests per cell, baseline server
lives, each speculative arm's server lives), cheapest first by the plan's own time and cost, for
one that decides a given saving."""

import itertools
from pathlib import Path

from specfleet.contract import SweepConfig
from specfleet.planning.power import (
    DesignProposal,
    NoiseBasis,
    PlannedServer,
    PowerPlan,
    RecordedNoise,
    noise_basis,
    plan_power,
)
from specfleet.planning.replicas import baseline_replicas
from specfleet.verdicts.power import POWER
from specfleet_tasks.engine.noise_records import recorded_noise
from specfleet_tasks.plan.estimate import PlanInputs
from specfleet_tasks.plan.sweep_plan import planned_cells
from specfleet_tasks.store.sweep import stored_sweeps

REPEATS = (1, 2, 3)
REQUESTS_SCALE = (1, 2, 4)
LIVES = (2, 3, 4, 6, 8)
ARM_LIVES = (1, 2, 3, 4)
MAX_SEARCHED = 16
"""Designs whose power is computed at most (cheapest first): each is one family's max-T draws."""


def planned_servers(config: SweepConfig) -> list[PlannedServer]:
    return [(arm, phase, replica, [ident for ident, _ in cells])
            for arm, phase, replica, cells in planned_cells(config, "plan")]


def history_sweeps(config: SweepConfig, results_dir: Path) -> int:
    """Earlier finished sweeps of the config the next one pools into its noise: as many as stored,
    at most ``analysis.noise_history``."""
    if config.analysis.noise_history == 0:
        return 0
    finished = [s for s in stored_sweeps(results_dir, config.name) if s.aggregated]
    return min(config.analysis.noise_history, len(finished))


def sweep_power(config: SweepConfig, results_dir: Path, power: float = POWER) -> PowerPlan:
    basis = noise_basis(recorded_noise(config), config.load.requests_per_cell)
    return plan_power(config, planned_servers(config), basis, history_sweeps(config, results_dir), power)


def _variant(config: SweepConfig, repeats: int, requests: int, lives: int, arm_lives: int) -> SweepConfig:
    return config.model_copy(update={
        "load": config.load.model_copy(update={"repeats": repeats, "requests_per_cell": requests}),
        "analysis": config.analysis.model_copy(update={"baseline_server_lives": lives,
                                                       "arm_server_lives": arm_lives})})


def propose_design(inputs: PlanInputs, target_saving: float, results_dir: Path,
                   power: float = POWER) -> DesignProposal:
    """The cheapest design searched whose every arm at the mix adopts a true ``target_saving`` at
    ``power``; else the searched design that comes closest."""
    config = inputs.config
    recorded = recorded_noise(config)
    history = history_sweeps(config, results_dir)
    now = baseline_replicas(config, "main")
    lives = sorted({now, 2 * now, *(n for n in LIVES if n > now)})
    requests = config.load.requests_per_cell
    arm_lives = sorted({config.analysis.arm_server_lives, *ARM_LIVES})
    designs = []
    for r, scale, n, a in itertools.product(REPEATS, REQUESTS_SCALE, lives, arm_lives):
        variant = _variant(config, r, requests * scale, n, a)
        designs.append((inputs.estimate(variant).estimate, variant))
    designs.sort(key=lambda d: (d[0].cost_usd, d[0].wall_s))
    designs.insert(0, designs.pop(max(range(len(designs)), key=lambda i: _knobs(designs[i][1], now))))
    best: tuple[float, DesignProposal] | None = None
    basis_at: dict[int, NoiseBasis] = {}
    failed: list[tuple[int, int, int, int]] = []
    searched = 0
    for estimate, variant in designs:
        knobs = _knobs(variant, now)
        if any(all(k <= f for k, f in zip(knobs, done, strict=True)) for done in failed) or searched == MAX_SEARCHED:
            continue  # no more of anything than a design that fell short falls short too (the largest goes first)
        searched += 1
        per_cell = variant.load.requests_per_cell
        basis = basis_at.setdefault(per_cell, noise_basis(recorded, per_cell))
        found = plan_power(variant, planned_servers(variant), basis, history, power)
        mix, cls = found.worst("mix"), found.worst("class")
        proposal = DesignProposal(
            target_saving=target_saving, power=power, found=mix is not None and mix <= target_saving,
            repeats=variant.load.repeats, requests_per_cell=per_cell,
            baseline_server_lives=knobs[2], arm_server_lives=knobs[3], mix_adopt_saving=mix, class_adopt_saving=cls,
            wall_s=estimate.wall_s, accelerator_hours=estimate.accelerator_hours, cost_usd=estimate.cost_usd,
            searched=searched, notes=_notes(basis, per_cell != requests, history))
        if proposal.found:
            if searched > 1 or len(designs) == 1:
                return proposal
            best = (-1.0, proposal)  # the largest design decides: the cheapest that does is searched for
            continue
        failed.append(knobs)
        gap = float("inf") if mix is None else mix - target_saving
        if best is None or gap < best[0]:
            best = (gap, proposal)
    assert best is not None
    if best[1].found:
        return best[1].model_copy(update={"searched": searched})
    floor = best[1].notes + [_floor(recorded, requests, target_saving, max(arm_lives))]
    return best[1].model_copy(update={"searched": searched, "notes": floor})


def _floor(recorded: list[RecordedNoise], requests: int, target_saving: float, most_arm_lives: int) -> str:
    """Why no design reaches the target: a speculative arm's comparisons carry the server part of
    its lives, which only more of them averages down."""
    basis = noise_basis(recorded, requests)
    return (f"no design searched adopts a true {target_saving:.0%} saving at the mix: each speculative arm's "
            f"comparisons carry a server part of sd {basis.server_var ** 0.5:.3f} (log) per server life, which no "
            f"baseline repeat or request removes and the at most {most_arm_lives} lives per arm searched average "
            "down; more nights (noise_history) narrow the critical values")


def _knobs(variant: SweepConfig, now: int) -> tuple[int, int, int, int]:
    """A design's (repeats, requests per cell, opening baseline server lives, each arm's server lives)."""
    return (variant.load.repeats, variant.load.requests_per_cell, variant.analysis.baseline_server_lives or now,
            variant.analysis.arm_server_lives)


def _notes(basis: NoiseBasis, more_requests: bool, history: int) -> list[str]:
    notes = [f"noise: {basis.source}", f"noise history: {history} earlier sweeps pooled"]
    if more_requests:
        notes.append("more requests per cell: the run part ASSUMED to shrink as 1 / requests (an upper bound on "
                     "what they buy; repeats and server lives assume nothing)")
    return notes
