"""The seed's theoretical worksheet: speedup, best k, break-even alpha, the speedup grid, and
the modelled alpha implied by a measured mean acceptance length.

``ModelledAlpha`` is the per-position acceptance probability of the closed-form model, which
assumes independent acceptances; it is not the telemetry fraction r = accepted / proposed draft
tokens (seed: "Four quantities replace one"). Only the formula takes it: it is its own type, so
mypy rejects a bare rate, and the functions check at run time too.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from scipy.optimize import brentq

from specfleet.errors import InputError

ALPHA_XTOL = 1e-9


@dataclass(frozen=True, slots=True)
class ModelledAlpha:
    """Modelled per-position acceptance probability, in [0, 1]."""

    value: float

    def __post_init__(self) -> None:
        _unit_interval("alpha", self.value)


@dataclass(frozen=True, slots=True)
class GridPoint:
    alpha: float
    k: int
    speedup: float


def _unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise InputError(f"{name} must be in [0, 1] (got {value!r})")


def _check_costs(k: int, c: float, v: float) -> None:
    if k < 1:
        raise InputError(f"k must be a positive integer (got {k!r})")
    if not c >= 0.0:
        raise InputError(f"c (draft step / target step) must be >= 0 (got {c!r})")
    if not v >= 0.0:
        raise InputError(f"v (verification time per proposed token / target step) must be >= 0 (got {v!r})")


def _alpha_value(alpha: ModelledAlpha) -> float:
    if not isinstance(alpha, ModelledAlpha):
        raise TypeError(f"expected ModelledAlpha, got {type(alpha).__name__}: never feed r into the formula")
    return alpha.value


def _tokens(a: float, k: int) -> float:
    # Horner form of sum_{i=0..k} a^i: exact at a = 1 (k + 1) and stable near it.
    total = 1.0
    for _ in range(k):
        total = 1.0 + a * total
    return total


def tokens_per_step(alpha: ModelledAlpha, k: int) -> float:
    """E(alpha, k) = sum_{i=0..k} alpha^i: expected tokens per verification step."""
    _check_costs(k, 0.0, 0.0)
    return _tokens(_alpha_value(alpha), k)


def net_speedup(alpha: ModelledAlpha, k: int, c: float, v: float = 0.0) -> float:
    """S = E / (1 + k(c + v)). At v = 0 this is (1 - a^(k+1)) / ((1 - a)(kc + 1))."""
    _check_costs(k, c, v)
    return _tokens(_alpha_value(alpha), k) / (1.0 + k * (c + v))


def best_k(alpha: ModelledAlpha, c: float, v: float = 0.0, k_max: int = 16) -> tuple[int, float]:
    """The k in 1..k_max with the largest S (the smaller k on a tie) and that S."""
    if k_max < 1:
        raise InputError(f"k-max must be a positive integer (got {k_max!r})")
    scored = [(net_speedup(alpha, k, c, v), -k) for k in range(1, k_max + 1)]
    speedup, neg_k = max(scored)
    return -neg_k, speedup


def breakeven_alpha(k: int, c: float, v: float = 0.0) -> float | None:
    """The alpha where S = 1, to 1e-9; None when no alpha in [0, 1] pays (k(c + v) >= k).

    S rises strictly with alpha, from 1 / (1 + k(c + v)) at 0 to (k + 1) / (1 + k(c + v)) at 1.
    """
    _check_costs(k, c, v)
    cost = 1.0 + k * (c + v)
    if cost <= 1.0:
        return 0.0
    if k + 1.0 <= cost:
        return None
    return _alpha_with_tokens(cost, k)


def implied_alpha(mean_acceptance_length: float, k: int) -> float | None:
    """The modelled alpha with E(alpha, k) = L, the measured mean acceptance length (bonus token
    included); None when L > k + 1, which no alpha gives (telemetry inconsistent with the model)."""
    if mean_acceptance_length > k + 1 + ALPHA_XTOL:
        return None
    if mean_acceptance_length <= 1.0:
        return 0.0
    if mean_acceptance_length >= k + 1:
        return 1.0
    return _alpha_with_tokens(mean_acceptance_length, k)


def _alpha_with_tokens(tokens: float, k: int) -> float:
    """The alpha in (0, 1) with E(alpha, k) = ``tokens``, to ``ALPHA_XTOL``; E rises strictly with alpha."""
    root: float = brentq(lambda a: _tokens(a, k) - tokens, 0.0, 1.0, xtol=ALPHA_XTOL)
    return root


def speedup_grid(alphas: Sequence[float], ks: Sequence[int], c: float, v: float = 0.0) -> list[GridPoint]:
    """S over alpha x k, alpha-major (seed Table 3 layout)."""
    return [GridPoint(a, k, net_speedup(ModelledAlpha(a), k, c, v)) for a in alphas for k in ks]
