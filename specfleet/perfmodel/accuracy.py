"""How good a predictor of cells is, against measured cells: the figures of issue 17's accuracy
benchmark (``benchmarks/model_accuracy.py``). Pure, no I/O; any predictor (the performance
model, a plain one) is scored by the same functions.

- ``mape``: mean absolute percentage error; a pair with an unknown side or a measured 0 has no
  percentage error and is left out (counted in ``left_out``), never scored as 0.
- ``sign_share``: the share of cells where the predicted speedup is on the measured side of 1
  (a speedup of exactly 1 is "no speedup").
- ``crossover_index`` and ``crossover_errors``: the first grid level where the speedup is at
  most 1 ("none": one step past the grid), and the predicted one's distance from the measured
  one in grid steps; ``crossover_decisive``: whether the measurement places the crossing at all
  (every level up to it decisive), as the sign is scored on decisive cells only.
- ``best_k_right`` and ``share``: whether the predicted best k is within a tolerance of the
  measured best, in measured speedup.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

TOLERANCE_SLACK = 1e-9
"""Floating-point slack on the best-k tolerance (1.30 - 1.17 is 0.13000000000000012)."""


@dataclass(frozen=True, slots=True)
class Score:
    """One figure over a set of cells (or groups): ``value`` is None when nothing could be scored."""

    value: float | None
    n: int
    """How many cells (or groups) the value is over."""
    left_out: int = 0
    """How many were offered but could not be scored (an unknown side, a measured 0)."""


def mape(pairs: Iterable[tuple[float | None, float | None]]) -> Score:
    """Mean of |predicted - measured| / |measured| over (predicted, measured) pairs, as a fraction.

    A pair with either side None, or a measured 0, is left out."""
    errors: list[float] = []
    left_out = 0
    for predicted, measured in pairs:
        if predicted is None or measured is None or measured == 0:
            left_out += 1
            continue
        errors.append(abs(predicted - measured) / abs(measured))
    return Score(sum(errors) / len(errors) if errors else None, len(errors), left_out)


def share(outcomes: Sequence[bool | None]) -> Score:
    """The share of True among the known outcomes; unknown ones (None) are left out."""
    known = [o for o in outcomes if o is not None]
    return Score(sum(known) / len(known) if known else None, len(known), len(outcomes) - len(known))


def sign_right(predicted: float | None, measured: float | None) -> bool | None:
    """Whether the predicted speedup is on the measured side of 1 (speedup > 1 or not); None when
    either is unknown."""
    if predicted is None or measured is None:
        return None
    return (predicted > 1.0) == (measured > 1.0)


def sign_share(pairs: Sequence[tuple[float | None, float | None]]) -> Score:
    """The share of (predicted, measured) speedup pairs whose sign against the baseline is right."""
    return share([sign_right(p, m) for p, m in pairs])


def crossover_index(speedups: Sequence[float | None]) -> int | None:
    """The index of the first grid level (in grid order) where the speedup is at most 1;
    ``len(speedups)`` ("none": one step past the grid) when it never is; None when a level before
    the first crossing is unknown (where the crossing lies cannot be told)."""
    for i, s in enumerate(speedups):
        if s is None:
            return None
        if s <= 1.0:
            return i
    return len(speedups)


def crossover_error(predicted: Sequence[float | None], measured: Sequence[float | None]) -> int | None:
    """|predicted crossover index - measured crossover index| in grid steps; None when either is unknown."""
    if len(predicted) != len(measured):
        raise ValueError(f"grids differ: {len(predicted)} predicted levels, {len(measured)} measured")
    p, m = crossover_index(predicted), crossover_index(measured)
    return None if p is None or m is None else abs(p - m)


def crossover_decisive(measured: Sequence[float | None], decisive: Sequence[bool | None]) -> bool:
    """Whether the measured crossing is beyond the noise: every level up to and including the first
    at most 1 (every level when none is) has a measured interval that excludes 1. Where one holds 1
    the crossing could lie a step either side, and no predictor can be right or wrong about it."""
    if len(decisive) != len(measured):
        raise ValueError(f"grids differ: {len(measured)} measured levels, {len(decisive)} decisive flags")
    index = crossover_index(measured)
    if index is None:
        return False
    return all(flag is True for flag in decisive[:index + 1])


def mean_steps(errors: Sequence[int | None]) -> Score:
    """The mean absolute crossover error over groups; unknown ones left out."""
    known = [e for e in errors if e is not None]
    return Score(sum(known) / len(known) if known else None, len(known), len(errors) - len(known))


def best_k(speedups: Mapping[int, float | None]) -> int | None:
    """The k with the largest known speedup (the smaller k on a tie); None when none is known."""
    known = [(s, -k) for k, s in speedups.items() if s is not None]
    return -max(known)[1] if known else None


def best_k_right(predicted: Mapping[int, float | None], measured: Mapping[int, float | None],
                 tolerance: float) -> bool | None:
    """Whether the predicted best k is within ``tolerance`` (a fraction, as the noise floor and the 5 %
    default are) of the measured best: the measured best k's speedup minus the predicted best k's
    measured speedup is at most ``tolerance`` times the best's. None when no k has a predicted
    speedup, none a measured one, or the predicted best k was not measured."""
    chosen, best = best_k(predicted), best_k(measured)
    if chosen is None or best is None:
        return None
    got, top = measured.get(chosen), measured[best]
    if got is None or top is None:
        return None
    return top - got <= tolerance * top + TOLERANCE_SLACK


def better(model: Score, others: Sequence[Score], *, lower_is_better: bool) -> bool | None:
    """Whether the model's figure beats every other predictor's that has one: strictly, or equal at
    the best a figure can be (0 error, a share of 1). None when the model has no figure."""
    if model.value is None:
        return None
    perfect = 0.0 if lower_is_better else 1.0
    for other in others:
        if other.value is None:
            continue
        if model.value == other.value == perfect:
            continue
        if (model.value >= other.value) if lower_is_better else (model.value <= other.value):
            return False
    return True
