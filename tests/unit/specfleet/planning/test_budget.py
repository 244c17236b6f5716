"""The budget's rules: a cell starts only if it and the reserve fit before the deadline (a closing
baseline cell needs no reserve), cells without a prediction never fit, cells run by priority
(unranked last, ties in order), closing cells bracket measured opening ones, and a budgeted sweep
runs with adaptive stopping on."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.contract import CellIdentity, LoadSpec
from specfleet.contract.workload import AdaptiveStoppingSpec
from specfleet.errors import InputError
from specfleet.planning.budget import (
    BUDGET_HALF_WIDTH,
    CellBudget,
    bracket_keys,
    budget_stopping,
    budgeted,
    by_priority,
    fits,
    not_measured,
    unbaselined,
)
from tests.support.sweep_data import load, write_config

NOW = 1_000_000.0
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False)


def _budget(left_s: float, reserve_s: float, cell_s: dict[str, float],
            priority: dict[str, float] | None = None) -> CellBudget:
    return CellBudget(deadline_unix_s=NOW + left_s, reserve_s=reserve_s, cell_s=cell_s, priority=priority or {})


def _ident(arm: str = "baseline", load_value: float = 1.0, phase: str = "main", repeat: int = 0) -> CellIdentity:
    return CellIdentity.model_validate({
        "arm": arm, "method": "baseline" if arm == "baseline" else "ngram", "k": None if arm == "baseline" else 3,
        "load_mode": "concurrency", "load_value": load_value, "prompt_class": "code", "sampling": "greedy",
        "repeat": repeat, "phase": phase})


def test_a_cell_fits_when_it_and_the_reserve_end_by_the_deadline() -> None:
    budget = _budget(left_s=100, reserve_s=30, cell_s={"a": 70, "b": 71})
    assert fits(budget, "a", NOW, closing=False)  # 70 + 30 = 100: exactly on the deadline
    assert not fits(budget, "b", NOW, closing=False)
    assert fits(budget, "b", NOW, closing=True)  # the closing baseline keeps no reserve for itself
    assert not fits(budget, "a", NOW + 31, closing=True)


def test_a_cell_without_a_prediction_never_fits() -> None:
    budget = _budget(left_s=1e9, reserve_s=0, cell_s={})
    assert not fits(budget, "unknown", NOW, closing=True)
    assert not_measured(budget, _ident(), "unknown", NOW, closing=True).detail == "no predicted time for this cell"


def test_not_measured_says_what_was_predicted_and_what_was_left() -> None:
    budget = _budget(left_s=100.5, reserve_s=30, cell_s={"a": 80.2})
    skipped = not_measured(budget, _ident("ngram-k3"), "a", NOW, closing=False)
    assert (skipped.reason, skipped.detail, skipped.key) == ("budget", "predicted 81 s, 70 s left", "a")
    assert skipped.label == "ngram-k3 / code / c1 / greedy / r0"
    late = not_measured(budget, _ident(), "a", NOW + 500, closing=False)
    assert late.detail == "predicted 81 s, 0 s left"
    unstarted = not_measured(budget, _ident(), "a", NOW, closing=False, start_s=59.5)
    assert unstarted.detail == "predicted 81 s after a 60 s server start, 70 s left"


@given(left=seconds, reserve=seconds, cell=seconds, earlier=seconds, shorter=seconds)
def test_fitting_is_monotone(left: float, reserve: float, cell: float, earlier: float, shorter: float) -> None:
    """What fits later fits earlier, a shorter cell fits where a longer one does, and a closing cell
    fits wherever another cell would."""
    budget = _budget(left, reserve, {"cell": cell, "shorter": min(cell, shorter)})
    if fits(budget, "cell", NOW, closing=False):
        assert fits(budget, "cell", NOW - earlier, closing=False)
        assert fits(budget, "shorter", NOW, closing=False)
        assert fits(budget, "cell", NOW, closing=True)


@given(st.lists(st.tuples(st.text("abcdef", min_size=1, max_size=3), st.none() | st.integers(0, 5)), max_size=12))
def test_by_priority_puts_lower_first_unranked_last_and_keeps_ties_in_order(
        ranked: list[tuple[str, int | None]]) -> None:
    keys = list(dict.fromkeys(key for key, _ in ranked))
    priority = {key: float(rank) for key, rank in dict(ranked).items() if rank is not None}
    ordered = by_priority(_budget(0, 0, {}, priority), keys, lambda key: key)
    assert sorted(ordered) == sorted(keys)
    ranks = [priority.get(key, float("inf")) for key in ordered]
    assert ranks == sorted(ranks)
    for rank in set(ranks):  # ties keep the order they came in
        tied = [key for key in ordered if priority.get(key, float("inf")) == rank]
        assert tied == [key for key in keys if key in tied]


def test_closing_cells_bracket_the_opening_cells_that_were_measured() -> None:
    closing = [(_ident(load_value=c, phase="baseline_end"), f"end-c{c}") for c in (1, 2, 4)]
    measured = [_ident(load_value=1), _ident(load_value=4, repeat=1), _ident("ngram-k3", load_value=2),
                _ident(load_value=2, phase="baseline_end")]
    assert bracket_keys(closing, measured) == {"end-c1"}  # c4 measured repeat 1 only, c2 only at the end


def test_a_budget_turns_adaptive_stopping_on_and_the_flag_overrides_the_block(tmp_path: Path) -> None:
    config = load(write_config(tmp_path))
    assert budgeted(config, None) is config  # no budget: the config as it is
    flagged = budgeted(config, "90m")
    assert flagged.budget is not None and flagged.budget.duration_s == 5400
    assert flagged.load.adaptive_stopping == AdaptiveStoppingSpec(
        relative_half_width=BUDGET_HALF_WIDTH, min_requests=2, max_requests=config.load.requests_per_cell)
    blocked = config.model_copy(update={"budget": flagged.budget.model_copy(update={"duration": "7h"})})
    assert budgeted(blocked, None).budget == blocked.budget
    assert budgeted(blocked, "1d").budget.duration_s == 86_400  # type: ignore[union-attr]
    own = AdaptiveStoppingSpec(relative_half_width=0.2, min_requests=3, max_requests=4)
    stopping = config.model_copy(update={"load": config.load.model_copy(update={"adaptive_stopping": own})})
    assert budgeted(stopping, "1d").load.adaptive_stopping is own
    with pytest.raises(InputError, match=r"^--budget: '7 hours' is not a duration like 30s, 90m, 7h or 1d$"):
        budgeted(config, "7 hours")


@given(st.integers(1, 10_000))
def test_budget_stopping_never_measures_more_than_the_fixed_budget(requests: int) -> None:
    spec = budget_stopping(LoadSpec(concurrency=[1], requests_per_cell=requests))
    assert (spec is None) == (requests == 1)
    assert spec is None or (spec.max_requests == requests and spec.min_requests <= spec.max_requests)


def test_an_opening_baseline_cell_starts_only_with_room_for_its_closing_twin() -> None:
    from specfleet.planning.budget import CellBudget, fits, not_measured

    budget = CellBudget(deadline_unix_s=100.0, reserve_s=5.0, cell_s={"open": 10.0, "spec": 10.0},
                        priority={}, twin_s={"open": 10.0})
    assert fits(budget, "spec", 80.0, closing=False)  # 10 + 5 <= 20
    assert not fits(budget, "open", 80.0, closing=False)  # 10 + its twin 10 + 5 > 20
    assert fits(budget, "open", 74.0, closing=False)  # 25 <= 26
    assert not fits(budget, "spec", 80.0, closing=False, committed_s=6.0)  # twins measured since: 10 + 5 + 6 > 20
    ident = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=1.0,
                         prompt_class="code", sampling="greedy", repeat=0)
    assert not_measured(budget, ident, "open", 80.0, closing=False).detail == "predicted 20 s, 15 s left"


def test_a_speculative_cell_without_its_opening_baseline_never_starts() -> None:
    """However much time is left, its decision could only be baseline_not_usable (issue 32)."""
    spec_c1, spec_c4 = _ident("ngram", 1.0), _ident("ngram", 4.0)
    blocked = unbaselined([(spec_c1, "s1"), (spec_c4, "s4"), (_ident("baseline", 4.0), "b4")],
                          measured=[_ident("baseline", 1.0), _ident("baseline", 4.0, phase="baseline_end")])
    assert set(blocked) == {"s4"}  # the closing baseline at c4 is no opening baseline; a baseline is never blocked
    budget = CellBudget(deadline_unix_s=NOW + 1e6, reserve_s=0.0, cell_s={"s1": 1.0, "s4": 1.0}, priority={},
                        blocked=blocked)
    assert fits(budget, "s1", NOW, closing=False) and not fits(budget, "s4", NOW, closing=False)
    assert "opening baseline" in not_measured(budget, spec_c4, "s4", NOW, closing=False).detail
