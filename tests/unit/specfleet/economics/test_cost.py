"""Whole-replica cost and KV capacity: the seed's examples and the rounding rules."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract.models import HardwareSpec
from specfleet.economics.cost import fleet_cost, hardware_fleet_cost, kv_capacity, whole_replicas
from specfleet.errors import InputError


def test_seed_seven_replica_example() -> None:
    cost = fleet_cost(2, 4.0, 3125, 20000)
    assert cost.replicas == 7
    assert cost.gpus == 14
    assert cost.fleet_usd_per_hour == 56.0
    assert round(cost.cost_per_million_usd, 2) == 0.78
    assert round(cost.ideal_cost_per_million_usd, 3) == 0.711


def test_the_hardware_block_feeds_the_seed_example() -> None:
    hardware = HardwareSpec(accelerator="NVIDIA H200", accelerators_per_replica=2, tensor_parallel_size=2,
                            accelerator_hour_usd=4.0, peak_demand_tokens_per_s=20000)
    cost = hardware_fleet_cost(hardware, 3125)
    assert (cost.replicas, cost.gpus, cost.fleet_usd_per_hour) == (7, 14, 56.0)
    assert hardware_fleet_cost(hardware, 3125, served_tokens_per_s=10000).served_tokens_per_s == 10000


def test_seed_kv_example() -> None:
    cap = kv_capacity(65, 320, 2.5, 352)
    assert round(cap.tokens, -3) == 198_000
    assert cap.tokens_with_draft is not None
    assert round(cap.tokens_with_draft, -3) == 173_000
    assert cap.capacity_loss is not None
    assert round(cap.capacity_loss, 3) == 0.126


def test_kv_without_draft_inputs_has_no_draft_figures() -> None:
    cap = kv_capacity(65, 320)
    assert (cap.tokens_with_draft, cap.capacity_loss) == (None, None)


def test_kv_draft_with_no_weights_only_changes_per_token() -> None:
    cap = kv_capacity(10, 100, kib_per_token_with_draft=125)
    assert cap.capacity_loss == pytest.approx(0.2)


@pytest.mark.parametrize(("demand", "per_replica", "replicas"), [
    (20000, 3125, 7), (0.3, 0.1, 3), (0.7, 0.1, 7), (6000, 2000, 3), (1.1, 0.55, 2), (100, 33.3, 4),
])
def test_exact_multiples_do_not_round_up(demand: float, per_replica: float, replicas: int) -> None:
    assert whole_replicas(demand, per_replica) == replicas


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_integer_multiples_are_exact(per_replica: int, n: int) -> None:
    assert whole_replicas(float(per_replica * n), float(per_replica)) == n


@given(st.floats(1e-3, 1e7), st.floats(1e-3, 1e7))
def test_replicas_are_the_fewest_that_cover_demand(demand: float, per_replica: float) -> None:
    n = whole_replicas(demand, per_replica)
    exact_demand, exact_per = Fraction(str(demand)), Fraction(str(per_replica))
    assert n * exact_per >= exact_demand
    assert (n - 1) * exact_per < exact_demand


@given(st.integers(1, 8), st.floats(0.1, 100), st.floats(1, 1e5), st.floats(1, 1e6), st.floats(0.01, 1.0))
def test_cost_rounds_up_to_whole_replicas(gpus: int, price: float, per_replica: float, demand: float,
                                          share: float) -> None:
    cost = fleet_cost(gpus, price, per_replica, demand, demand * share)
    assert cost.ideal_replicas * (1 - 1e-12) <= cost.replicas < cost.ideal_replicas * (1 + 1e-12) + 1
    assert cost.cost_per_million_usd >= cost.ideal_cost_per_million_usd * (1 - 1e-12)
    assert cost.capacity_tokens_per_s >= demand * (1 - 1e-12)
    expected = cost.replicas * gpus * price * 1e6 / (3600 * demand * share)
    assert cost.cost_per_million_usd == pytest.approx(expected)


@pytest.mark.parametrize(("args", "name"), [
    ((0, 4.0, 3125, 20000), "GPUs per replica"),
    ((2, 0.0, 3125, 20000), "GPU-hour price"),
    ((2, 4.0, -1, 20000), "qualified tokens per s"),
    ((2, 4.0, 3125, 0), "demand"),
    ((2, 4.0, 3125, 20000, 0), "served"),
    ((2, 4.0, 3125, float("inf")), "demand"),
])
def test_non_positive_inputs_name_the_input(args: tuple[float, ...], name: str) -> None:
    with pytest.raises(InputError, match=name):
        fleet_cost(*args)  # type: ignore[arg-type]


def test_served_above_demand_is_rejected() -> None:
    with pytest.raises(InputError, match="exceeds demand"):
        fleet_cost(2, 4.0, 3125, 20000, 20001)


def test_draft_weights_must_leave_kv_memory() -> None:
    with pytest.raises(InputError, match="draft weights"):
        kv_capacity(2.0, 320, 2.5, 352)
