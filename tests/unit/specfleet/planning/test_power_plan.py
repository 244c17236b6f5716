"""The plan's power (``specfleet.planning.power``): the planned claims' standard errors by hand,
what more nights and more baseline server lives buy, the recorded noise pooled, and --detect's
saving parsed."""

import math
from pathlib import Path

import pytest

from specfleet.contract import SweepConfig
from specfleet.errors import InputError
from specfleet.planning.power import PowerPlan, RecordedNoise, noise_basis, parse_saving, plan_power
from specfleet_tasks.plan.power import _variant, planned_servers
from specfleet_tasks.store.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[4]
DEMO = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")


def _plan(config: SweepConfig = DEMO, history: int = 0) -> PowerPlan:
    return plan_power(config, planned_servers(config), noise_basis([], config.load.requests_per_cell), history)


def test_a_demo_cell_claim_has_the_standard_error_of_its_design() -> None:
    """One candidate run on its own server against the opening and the closing baseline, each on its
    own: weights +1, -1/2, -1/2 on three lives, so se^2 = 1.5 (server_var + run_var) = 1.5 tau^2."""
    plan = _plan()
    cells = [c for c in plan.claims if c.kind == "cell"]
    assert len(cells) == 3 * len(DEMO.prompt_classes) * len(DEMO.load.concurrency) and plan.baseline_server_lives == 2
    assert all(c.se == pytest.approx(math.sqrt(1.5) * 0.10, rel=1e-3) for c in cells)
    mix = [c for c in plan.claims if c.kind == "mix"]
    assert len(mix) == 3 and {c.arm for c in mix} == {"draft-k2", "draft-k4", "ngram-k3"}
    assert all(c.se is not None and c.se < cells[0].se for c in mix)  # averaged over its cells, one server each side


def test_nights_of_history_and_more_baseline_lives_lower_the_minimum_detectable_saving() -> None:
    first = _plan().worst("mix")
    nights = _plan(history=4).worst("mix")
    lives = _plan(_variant(DEMO, 1, DEMO.load.requests_per_cell, 6, 1)).worst("mix")
    assert first is not None and nights is not None and lives is not None
    assert nights < first - 0.15 and lives < first - 0.1
    assert all(c.reject_saving is not None and c.reject_saving < 0 for c in _plan(history=4).claims)


def test_server_lives_per_arm_average_a_large_server_part_out_of_the_mix_not_out_of_a_cell() -> None:
    """Where a server life's offset dominates the noise, the baseline's lives cannot remove it from an
    arm measured on one life; four lives per arm divide it among them at the mix, while a cell, on
    one life whatever the design, keeps it (its standard error barely moves)."""
    basis = noise_basis([RecordedNoise(sweep="a", config_name="demo-cpu", server_var=0.02, run_var=0.002, runs=40,
                                       requests_per_cell=12)], 12)

    def plan(baseline_lives: int, arm_lives: int) -> PowerPlan:
        variant = _variant(DEMO, 1, DEMO.load.requests_per_cell, baseline_lives, arm_lives)
        return plan_power(variant, planned_servers(variant), basis, 0)

    one, four = plan(6, 1), plan(6, 4)
    assert four.worst("mix") is not None and one.worst("mix") is not None
    assert four.worst("mix") < one.worst("mix") - 0.15
    cell_se = [max(c.se or 0.0 for c in p.claims if c.kind == "cell") for p in (one, four)]
    assert cell_se[1] == pytest.approx(cell_se[0], rel=0.15)


def test_the_prior_is_labelled_and_recorded_noise_is_pooled_by_its_runs() -> None:
    prior = noise_basis([], 12)
    assert prior.prior and "PRIOR" in prior.source and prior.tau == pytest.approx(0.10)
    recorded = [RecordedNoise(sweep="a", config_name="demo-cpu", server_var=-0.001, run_var=0.004, runs=10,
                              requests_per_cell=12),
                RecordedNoise(sweep="b", config_name="demo-cpu", server_var=0.002, run_var=0.001, runs=30,
                              requests_per_cell=12)]
    basis = noise_basis(recorded, 12)
    assert not basis.prior and "2 finished sweeps" in basis.source
    assert basis.server_var == pytest.approx((-0.01 + 0.06) / 40) and basis.run_var == pytest.approx(0.07 / 40)
    assert noise_basis(recorded, 24).run_var == pytest.approx(0.07 / 80)  # the stated 1 / requests assumption


def test_no_repeat_across_servers_leaves_no_interval() -> None:
    one = DEMO.model_copy(update={"load": DEMO.load.model_copy(update={"repeats": 2})})
    servers = [s for s in planned_servers(one) if s[1] == "main"]  # no closing baseline: repeats on one server
    plan = plan_power(one, servers, noise_basis([], 12), 0)
    assert all(c.adopt_saving is None and c.why_none and "one server" in c.why_none for c in plan.claims)


@pytest.mark.parametrize(("text", "value"), [("15%", 0.15), ("0.15", 0.15), (" 7.5% ", 0.075)])
def test_a_saving_is_parsed(text: str, value: float) -> None:
    assert parse_saving(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["0", "100%", "1.5", "-5%", "lots", ""])
def test_a_bad_saving_names_the_flag(text: str) -> None:
    with pytest.raises(InputError, match="--detect"):
        parse_saving(text)
