"""The seed's worksheet: worked numbers and the formula's properties."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.economics.theory import (
    ModelledAlpha,
    best_k,
    breakeven_alpha,
    implied_alpha,
    net_speedup,
    speedup_grid,
    tokens_per_step,
)
from specfleet.errors import InputError

alphas = st.floats(0.0, 1.0)
ks = st.integers(1, 16)
costs = st.floats(0.0, 1.0)


def _speedup(a: float, k: int, c: float, v: float = 0.0) -> float:
    return net_speedup(ModelledAlpha(a), k, c, v)


def test_seed_worked_speedups() -> None:
    assert round(_speedup(0.7, 4, 0.05), 2) == 2.31
    assert round(_speedup(0.6, 4, 0.05), 2) == 1.92
    assert round(_speedup(0.8, 4, 0.05), 2) == 2.80
    assert round(_speedup(0.7, 4, 0.05, 0.25), 2) == 1.26
    assert _speedup(0.5, 4, 0.05, 0.25) < 1.0


@pytest.mark.parametrize(("v", "seed_alpha"), [(0.0, 0.17), (0.1, 0.38), (0.25, 0.58), (0.5, 0.78)])
def test_seed_breakeven_is_the_root_rounded_up_to_two_decimals(v: float, seed_alpha: float) -> None:
    alpha = breakeven_alpha(4, 0.05, v)
    assert alpha is not None
    assert math.ceil(alpha * 100) / 100 == seed_alpha


def test_seed_heavy_draft_best_case() -> None:
    k, speedup = best_k(ModelledAlpha(0.5), 0.10)
    assert (k, round(speedup, 2)) == (2, 1.46)


def test_grid_is_alpha_major() -> None:
    points = speedup_grid([0.5, 0.6], [1, 2], 0.05)
    assert [(p.alpha, p.k) for p in points] == [(0.5, 1), (0.5, 2), (0.6, 1), (0.6, 2)]


@given(st.floats(0.0, 0.99), ks, costs)
def test_closed_form_at_zero_verification(a: float, k: int, c: float) -> None:
    closed = (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))
    assert _speedup(a, k, c) == pytest.approx(closed, rel=1e-9)


@given(ks)
def test_alpha_one_is_exact(k: int) -> None:
    assert tokens_per_step(ModelledAlpha(1.0), k) == k + 1


def test_implied_alpha_inverts_tokens_per_step() -> None:
    assert implied_alpha(1.0, 3) == 0.0 and implied_alpha(4.0, 3) == 1.0 and implied_alpha(4.5, 3) is None
    assert implied_alpha(1 + 0.5 + 0.25, 2) == pytest.approx(0.5, abs=1e-8)


@given(alphas, ks)
def test_implied_alpha_recovers_the_modelled_alpha(a: float, k: int) -> None:
    assert implied_alpha(tokens_per_step(ModelledAlpha(a), k), k) == pytest.approx(a, abs=1e-6)


@given(alphas, alphas, ks, costs, costs)
def test_monotone_in_alpha(a: float, b: float, k: int, c: float, v: float) -> None:
    low, high = sorted((a, b))
    assert _speedup(low, k, c, v) <= _speedup(high, k, c, v)


@given(ks, costs, costs)
def test_no_acceptance_pays_the_full_cost(k: int, c: float, v: float) -> None:
    assert _speedup(0.0, k, c, v) == pytest.approx(1 / (1 + k * (c + v)))


@given(ks, st.floats(0.001, 1.2), st.floats(0.0, 1.0))
def test_breakeven_solves_s_equals_one(k: int, c: float, v: float) -> None:
    alpha = breakeven_alpha(k, c, v)
    if c + v >= 1.0:
        assert alpha is None
        return
    assert alpha is not None
    assert _speedup(alpha, k, c, v) == pytest.approx(1.0, abs=1e-6)
    assert _speedup(max(alpha - 1e-6, 0.0), k, c, v) <= 1.0 + 1e-9
    assert _speedup(min(alpha + 1e-6, 1.0), k, c, v) >= 1.0 - 1e-9


def test_free_draft_breaks_even_at_zero() -> None:
    assert breakeven_alpha(4, 0.0, 0.0) == 0.0


def test_telemetry_rate_cannot_enter_the_formula() -> None:
    with pytest.raises(TypeError, match="never feed r"):
        net_speedup(0.7, 4, 0.05)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan")])
def test_alpha_outside_unit_interval_is_rejected(bad: float) -> None:
    with pytest.raises(InputError, match="alpha"):
        ModelledAlpha(bad)


@pytest.mark.parametrize(("k", "c", "v", "name"), [(0, 0.05, 0.0, "k"), (4, -0.1, 0.0, "c"), (4, 0.05, -1, "v")])
def test_bad_costs_name_the_input(k: int, c: float, v: float, name: str) -> None:
    with pytest.raises(InputError, match=f"^{name}"):
        _speedup(0.5, k, c, v)
