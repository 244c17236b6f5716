"""The plan's arithmetic (``specfleet.planning.estimate``) on a synthetic timing whose step law
and start-up are known: cell times, stage layout, idle accelerators, the budget."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract import ArmPlan, SweepConfig, arm_plans, cell_identities
from specfleet.perfmodel.batching import ClosedLoad, EngineLimits, RequestShape, simulate
from specfleet.perfmodel.step_time import LinearStep
from specfleet.planning.estimate import cell_seconds, estimate_sweep, human_duration, stage_wall_s
from specfleet_tasks.store.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[4]


@dataclass(frozen=True)
class KnownTiming:
    fixed_ms: float = 10.0
    per_seq_ms: float = 1.0
    startup: float = 100.0
    tokens: float = 1.0
    overhead_ms: float = 0.0
    basis: str = "synthetic"

    def step(self, arm: ArmPlan) -> LinearStep:
        return LinearStep(self.fixed_ms, self.per_seq_ms, 0.0, 0.0, 0.0)

    def tokens_per_step(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        return 1.0 if arm.is_baseline else self.tokens

    def draft_rate(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
        return 1.0

    def prompt_tokens(self, prompt_class: str) -> float:
        return 10.0

    def request_overhead_ms(self) -> float:
        return self.overhead_ms

    def cell_high_scale(self) -> float:
        return 1.0

    def startup_s(self, arm: ArmPlan) -> float:
        return self.startup

    def probe_s(self, arm: ArmPlan) -> float | None:
        return 5.0

    def sweep_overhead_s(self) -> float:
        return 20.0


def _config(**hardware: object) -> SweepConfig:
    config = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    return config.model_copy(update={"hardware": config.hardware.model_copy(update=hardware)})


def test_a_closed_loop_cell_is_its_requests_over_the_batch() -> None:
    config = _config()
    arm = arm_plans(config)[0]
    cell = next(c for c in cell_identities(config, arm) if c.load_value == 4)
    out = next(p.max_output_tokens for p in config.prompt_classes if p.name == cell.prompt_class)
    step_ms = 10.0 + 1.0 * 4  # four sequences per step
    # (measured + warm-up) = 14 requests, 4 at a time: 4 waves (the last, partial one counts), out steps each
    expected = 4 * out * step_ms / 1000
    assert cell_seconds(KnownTiming(), config, arm, cell, 12) == pytest.approx(expected)


@pytest.mark.parametrize("overhead_ms", [5.0, 50.0, 200.0, 600.0])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_closed_loop_cell_counts_the_overhead_as_the_simulation_serialises_it(
        overhead_ms: float, concurrency: int) -> None:
    """The API server passes one request per overhead (``batching.simulate``): dividing the overhead by
    the batch undercounted a c4 cell by up to half at a 600 ms overhead (issue 32)."""
    config = _config()
    arm = arm_plans(config)[0]
    cell = next(c for c in cell_identities(config, arm) if c.load_value == concurrency)
    timing = KnownTiming(overhead_ms=overhead_ms)
    out = next(p.max_output_tokens for p in config.prompt_classes if p.name == cell.prompt_class)
    sim = simulate(timing.step(arm), "baseline", [RequestShape("p", 10, out)], ClosedLoad(concurrency),
                   EngineLimits(16), None, requests=12 + config.load.warmup_requests, overhead_ms=overhead_ms,
                   rng=np.random.default_rng(0))
    simulated_s = max(r.chunk_ns[-1] for r in sim.records) / 1e9
    planned_s = cell_seconds(timing, config, arm, cell, 12)
    assert simulated_s * 0.99 <= planned_s <= simulated_s * 1.10


def test_more_tokens_per_step_shortens_a_speculative_cell() -> None:
    config = _config()
    arm = arm_plans(config)[1]
    cell = cell_identities(config, arm)[0]
    assert cell_seconds(KnownTiming(tokens=2.0), config, arm, cell, 12) < cell_seconds(KnownTiming(), config, arm,
                                                                                         cell, 12)


@given(st.lists(st.floats(1, 1000), min_size=1, max_size=12), st.integers(1, 6))
def test_list_scheduling_is_between_the_longest_arm_and_the_sum(durations: list[float], parallel: int) -> None:
    wall = stage_wall_s(durations, parallel)
    assert max(durations) - 1e-9 <= wall <= sum(durations) + 1e-9
    assert wall >= sum(durations) / parallel - 1e-9
    if parallel == 1:
        assert wall == pytest.approx(sum(durations))


def test_the_demo_runs_one_arm_at_a_time_and_sums_its_parts() -> None:
    config = _config()
    times = estimate_sweep(KnownTiming(), config, {}, budget_s=None)
    e = times.estimate
    assert [s.name for s in e.stages] == ["opening baseline", "speculative arms", "closing baseline"]
    assert e.servers == 5 and e.cells == 45 and e.fits_budget is None
    arms_s = sum(a.wall_s for a in times.arms)
    assert e.wall_s == pytest.approx(arms_s + 20.0)
    assert e.idle_accelerator_hours == pytest.approx(20.0 / 3600)  # one CPU node: idle only outside the arms
    assert times.arms[-1].probe_s == 0.0  # the closing baseline probes nothing
    assert e.cost_usd == pytest.approx(e.accelerator_hours * config.hardware.accelerator_hour_usd)


def test_a_node_of_eight_gpus_runs_four_tp2_arms_at_once_and_splits_the_baseline_over_four_replicas() -> None:
    config = _config(accelerator="NVIDIA H200", tensor_parallel_size=2, accelerators_per_replica=2,
                     accelerators_per_node=8)
    times = estimate_sweep(KnownTiming(), config, {}, budget_s=3600.0)
    e = times.estimate
    assert e.accelerators == 8
    for stage, replicas in ((e.stages[0], times.arms[:4]), (e.stages[2], times.arms[-4:])):
        assert stage.servers == 4 and stage.cells == 9 + 4  # the nine baseline cells, one check per replica
        assert {a.arm.arm for a in replicas} == {"baseline"}
        assert stage.wall_s == pytest.approx(max(a.wall_s for a in replicas))
        busy_h = sum(a.wall_s for a in replicas) * 2 / 3600
        assert stage.idle_accelerator_hours == pytest.approx(stage.wall_s * 8 / 3600 - busy_h)
    assert [a.probe_s for a in times.arms[:4]] == [5.0, 0.0, 0.0, 0.0]  # the first replica probes
    spec = e.stages[1]  # three speculative arms on four slots: all at once, the longest sets the wall
    assert spec.wall_s == pytest.approx(max(a.wall_s for a in times.arms[4:7]))
    assert e.fits_budget is (e.wall_s <= 3600.0)
    one_server = _config()  # the same sweep on one CPU node: the baseline stage idles nothing but runs alone
    assert e.stages[0].wall_s < estimate_sweep(KnownTiming(), one_server, {}).estimate.stages[0].wall_s


def test_a_budget_below_the_plan_does_not_fit() -> None:
    e = estimate_sweep(KnownTiming(), _config(), {}, budget_s=60.0).estimate
    assert e.fits_budget is False


def test_human_duration() -> None:
    assert human_duration(42.2) == "43 s"
    assert human_duration(400) == "6m 40s"
    assert human_duration(7 * 3600 + 300) == "7h 05m"
    assert human_duration(5 * 86400) == "5.0 days"


def test_cells_near_break_even_and_in_the_mix_come_first() -> None:
    from specfleet.planning.priority import cell_order

    config = _config()
    arms = arm_plans(config)
    cells = [(a, c) for a in arms for c in cell_identities(config, a)]
    order = cell_order(KnownTiming(tokens=1.0), config, cells, noise_floor=None)
    assert all(c.k is None for c in order[:9])  # the baseline first
    mix = config.traffic
    assert mix is not None
    first_spec = order[9]  # the heaviest share of the mix: code at concurrency 4
    assert (first_spec.prompt_class, first_spec.load_value) == ("code", 4.0)

    @dataclass(frozen=True)
    class ByK(KnownTiming):
        """k=4 predicted at break-even (1.02 tokens per step), every other arm far from it."""

        def tokens_per_step(self, arm: ArmPlan, prompt_class: str, sampling: str) -> float:
            return 1.0 if arm.is_baseline else (1.02 if arm.k == 4 else 2.0)

    ordered = cell_order(ByK(), config, cells, noise_floor=0.05)
    assert len(ordered) == len(cells) and set(ordered) == {c for _, c in cells}
    spec = [c for c in ordered if c.k is not None]
    in_mix = [c for c in spec if c.load_value in (1.0, 4.0, 8.0)]
    assert all(c.k == 4 for c in in_mix[:9]) and all(c.k != 4 for c in in_mix[9:])
    # analysis.nights: the claims the previous look decided come after every undecided one, baseline first still
    decided = {(c.arm, c.prompt_class, c.load_mode, c.load_value, c.sampling) for c in spec if c.k == 4}
    nights = cell_order(ByK(), config, cells, noise_floor=0.05, decided=decided)
    assert nights[:len(ordered) - len(spec)] == ordered[:len(ordered) - len(spec)]
    assert [c.k == 4 for c in nights if c.k is not None] == sorted(c.k == 4 for c in spec)
