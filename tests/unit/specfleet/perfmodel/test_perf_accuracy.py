"""The accuracy benchmark's figures (``specfleet.perfmodel.accuracy``) on hand-computed cases."""

import pytest

from specfleet.perfmodel.accuracy import (
    Score,
    best_k,
    best_k_right,
    better,
    crossover_decisive,
    crossover_error,
    crossover_index,
    mape,
    mean_steps,
    share,
    sign_right,
    sign_share,
)


def test_mape_is_the_mean_absolute_relative_error() -> None:
    # |110 - 100| / 100 = 0.10, |45 - 50| / 50 = 0.10, |4 - 2| / 2 = 1.00: mean 0.40
    got = mape([(110.0, 100.0), (45.0, 50.0), (4.0, 2.0)])
    assert got.value == pytest.approx(0.40)
    assert (got.n, got.left_out) == (3, 0)


def test_mape_leaves_out_unknowns_and_a_measured_zero_never_scoring_them_as_zero() -> None:
    got = mape([(110.0, 100.0), (None, 50.0), (3.0, None), (1.0, 0.0), (0.0, 8.0)])
    # only (110, 100) and (0, 8) count: 0.10 and 1.00
    assert got.value == pytest.approx(0.55)
    assert (got.n, got.left_out) == (2, 3)


def test_mape_of_nothing_is_none() -> None:
    assert mape([]) == Score(None, 0, 0)
    assert mape([(None, 1.0)]) == Score(None, 0, 1)


def test_sign_is_speedup_above_one_or_not() -> None:
    assert sign_right(1.2, 1.01) is True
    assert sign_right(0.9, 1.0) is True  # exactly 1 is no speedup
    assert sign_right(1.0, 1.3) is False
    assert sign_right(1.3, 0.7) is False
    assert sign_right(None, 1.3) is None


def test_sign_share_counts_known_pairs_only() -> None:
    got = sign_share([(1.2, 1.1), (0.8, 1.1), (0.9, 0.95), (None, 1.2), (1.1, 1.5)])
    assert got.value == pytest.approx(3 / 4)
    assert (got.n, got.left_out) == (4, 1)


def test_share() -> None:
    assert share([True, False, None, True]) == Score(pytest.approx(2 / 3), 3, 1)  # type: ignore[arg-type]
    assert share([None]) == Score(None, 0, 1)


@pytest.mark.parametrize(("speedups", "index"), [
    ([1.4, 1.1, 0.9], 2),
    ([1.4, 1.0, 0.9], 1),  # at most 1 crosses
    ([0.8, 1.2, 1.3], 0),  # the first level that crosses, even if later ones recover
    ([1.4, 1.2, 1.1], 3),  # none: one step past the grid
    ([1.4, None, 0.9], None),  # an unknown level before the crossing: cannot tell
    ([0.9, None, None], 0),  # known to cross before the unknown levels
])
def test_crossover_index(speedups: list[float | None], index: int | None) -> None:
    assert crossover_index(speedups) == index


def test_crossover_error_in_grid_steps() -> None:
    assert crossover_error([1.2, 1.1, 1.05], [1.2, 0.9, 0.8]) == 2  # none (3) vs c at index 1
    assert crossover_error([0.9, 0.8, 0.7], [1.2, 1.1, 0.9]) == 2
    assert crossover_error([1.2, 0.9, 0.8], [1.3, 0.95, 0.9]) == 0
    assert crossover_error([1.2, None, 0.8], [1.3, 0.95, 0.9]) is None
    with pytest.raises(ValueError, match="grids differ"):
        crossover_error([1.0], [1.0, 1.0])


@pytest.mark.parametrize(("speedups", "decisive", "decided"), [
    ([1.4, 1.1, 0.9], [True, True, True], True),
    ([1.4, 1.1, 0.9], [True, False, True], False),  # 1.1 may be below 1: the crossing may be a step earlier
    ([1.4, 0.9, 0.8], [True, True, None], True),  # past the crossing nothing matters
    ([0.8, 1.2, 1.3], [False, True, True], False),  # the crossing level itself holds 1
    ([1.4, 1.2, 1.1], [True, True, True], True),  # none: every level decisive
    ([1.4, 1.2, 1.1], [True, True, None], False),  # none, but one level was never decided
    ([1.4, None, 0.9], [True, True, True], False),  # an unknown level: no measured crossing
])
def test_a_crossing_is_decisive_when_every_level_up_to_it_is(speedups: list[float | None],
                                                             decisive: list[bool | None], decided: bool) -> None:
    assert crossover_decisive(speedups, decisive) is decided


def test_mean_steps() -> None:
    got = mean_steps([0, 2, 1, None])
    assert got.value == pytest.approx(1.0)
    assert (got.n, got.left_out) == (3, 1)


def test_best_k_takes_the_largest_and_the_smaller_k_on_a_tie() -> None:
    assert best_k({1: 1.1, 2: 1.3, 3: 1.2}) == 2
    assert best_k({1: 1.3, 2: 1.3, 3: None}) == 1
    assert best_k({1: None}) is None


def test_best_k_right_within_the_tolerance_of_the_measured_best() -> None:
    measured = {1: 1.10, 2: 1.30, 3: 1.27, 4: 1.20}
    assert best_k_right({1: 1.0, 2: 1.5, 3: 1.4, 4: 1.1}, measured, 0.05) is True  # picks 2, the best
    assert best_k_right({1: 1.0, 2: 1.2, 3: 1.4, 4: 1.1}, measured, 0.05) is True  # 3: 1.30 - 1.27 <= 5 % of 1.30
    assert best_k_right({1: 1.0, 2: 1.2, 3: 1.3, 4: 1.4}, measured, 0.05) is False  # 4: 0.10 short, 8 %
    assert best_k_right({1: 1.0, 2: 1.2, 3: 1.3, 4: 1.4}, measured, 0.10) is True  # wider tolerance
    # the tolerance is a fraction of the best's speedup, not speedup units: 1.90 is within 5 % of 2.0
    assert best_k_right({1: 1.0, 2: 1.2}, {1: 2.0, 2: 1.9}, 0.05) is True
    assert best_k_right({1: 1.0, 2: 1.2}, {1: 0.5, 2: 0.46}, 0.05) is False  # 0.04 short of 0.5 is 8 %
    assert best_k_right({1: 1.0, 2: 1.3}, {1: 1.3, 2: 1.17}, 0.10) is True  # exactly 10 %, float slack
    assert best_k_right({1: 1.0, 4: 1.4}, {1: 1.1, 4: None}, 0.05) is None  # the chosen k was not measured
    assert best_k_right({1: None}, measured, 0.05) is None


def test_better_is_strict_unless_both_are_perfect() -> None:
    assert better(Score(0.08, 9), [Score(0.10, 9), Score(0.20, 9)], lower_is_better=True) is True
    assert better(Score(0.10, 9), [Score(0.10, 9)], lower_is_better=True) is False
    assert better(Score(0.0, 9), [Score(0.0, 9)], lower_is_better=True) is True
    assert better(Score(1.0, 9), [Score(1.0, 9), Score(0.5, 9)], lower_is_better=False) is True
    assert better(Score(0.8, 9), [Score(0.9, 9)], lower_is_better=False) is False
    assert better(Score(0.8, 9), [Score(None, 0)], lower_is_better=False) is True  # nothing to compare
    assert better(Score(None, 0), [Score(0.5, 9)], lower_is_better=False) is None
