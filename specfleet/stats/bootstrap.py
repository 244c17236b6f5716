"""Percentile-bootstrap intervals: speedups over requests or repeats, score differences over items.

Every function takes a ``numpy.random.Generator`` (``default_rng(seed)``) so a run repeats.
"""

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from specfleet.contract.base import RecordModel

FloatArray = npt.NDArray[np.float64]
Basis = Literal["runs", "none", "requests", "repeats", "items"]

UNCERTAINTY: dict[str, str] = {
    "runs": "run-to-run and server-to-server noise pooled over the sweep (t, Satterthwaite df)",
    "none": "no estimate of run-to-run noise (no configuration measured twice): no interval",
    "requests": "request-level spread only: no estimate of run-to-run noise, so not a confidence interval",
    "repeats": "repeated cells (summaries written before the run-to-run noise was pooled)",
    "items": "scored-set items, paired",
}
"""What each basis's interval includes, in the words every output shows beside it."""


def speedup_text(estimate: float, low: float | None = None, high: float | None = None, digits: int = 2) -> str:
    """A speedup as every output writes it: ``1.23x [1.10, 1.35]`` (``digits`` places); the bracket is
    left out when either end is missing."""
    text = f"{estimate:.{digits}f}x"
    return text if low is None or high is None else f"{text} [{low:.{digits}f}, {high:.{digits}f}]"


class Interval(RecordModel):
    """A point estimate with an interval (None ends when it cannot be formed). ``confidence`` is
    None where the interval states none: it then covers request-level spread only."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float | None
    basis: Basis = Field(
        description="What the interval includes (UNCERTAINTY): runs (the sweep's run-to-run and server-to-server "
        "noise), none (no noise estimate, no interval), requests (request-level only, no stated confidence), "
        "repeats (older summaries), items (quality).")
    resamples: int | None = Field(description="Bootstrap resamples; None for an analytic (t) interval.")
    df: float | None = Field(None, description="Degrees of freedom of a t interval (Satterthwaite).")
    comparisons: int | None = Field(
        None, description="Comparisons the interval is corrected for (simultaneous over the sweep's family); "
        "None: marginal, this comparison alone.")
    correction: str | None = Field(None, description="How it was corrected (max-T, FCR-adjusted), if it was.")
    sides: Literal["two", "each"] = Field(
        "two", description="two: a two-sided interval at ``confidence``; each: each end a one-sided bound at "
        "``confidence`` (the corrected bounds a verdict reads: the low end is what adopts).")

    @property
    def uncertainty(self) -> str:
        """What the interval includes, and its confidence (or that it states none)."""
        if self.confidence is None:
            level = "no stated confidence"
        elif self.sides == "each":
            level = f"each end a one-sided {self.confidence:.0%} bound"
        else:
            level = f"{self.confidence:.0%}"
        corrected = (f", simultaneous over {self.comparisons} comparisons ({self.correction})"
                     if self.comparisons else "")
        return f"{level}{corrected}: {UNCERTAINTY[self.basis]}"


def _indices(rng: np.random.Generator, n: int, resamples: int) -> npt.NDArray[np.intp]:
    return rng.integers(0, n, size=(resamples, n))


def mean_replicates(values: FloatArray, rng: np.random.Generator, resamples: int) -> FloatArray:
    """Bootstrap replicates of the mean of ``values`` (e.g. one figure per repeat)."""
    array = np.asarray(values, dtype=np.float64)
    means: FloatArray = array[_indices(rng, len(array), resamples)].mean(axis=1)
    return means


def rate_replicates(
    tokens: FloatArray, durations_s: FloatArray, rng: np.random.Generator, resamples: int
) -> FloatArray:
    """Replicates of sum(tokens) / sum(durations) over resampled requests, relative to the
    full-sample value (1.0 = unchanged), so they can scale a cell's measured throughput."""
    full = tokens.sum() / durations_s.sum()
    if not full > 0:
        return np.zeros(resamples)
    idx = _indices(rng, len(tokens), resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = tokens[idx].sum(axis=1) / durations_s[idx].sum(axis=1) / full
    return out


def pooled_percentile_replicates(
    series: Sequence[FloatArray], q: float, rng: np.random.Generator, resamples: int
) -> FloatArray:
    """Cluster bootstrap: resample requests, pool their gaps, take the q-th percentile."""
    lengths = np.asarray([len(s) for s in series], dtype=np.intp)
    pooled = np.concatenate([*series, np.empty(0)])
    if pooled.size == 0:
        return np.full(resamples, np.nan)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(resamples)
    for b, idx in enumerate(_indices(rng, len(series), resamples)):
        take = lengths[idx]
        total = int(take.sum())
        if total == 0:
            out[b] = np.nan
            continue
        offsets = np.arange(total) - np.repeat(np.cumsum(take) - take, take)
        out[b] = np.percentile(pooled[np.repeat(starts[idx], take) + offsets], q)
    return out


def percentile_interval(estimate: float, replicates: FloatArray, confidence: float, basis: Basis) -> Interval:
    """The central ``confidence`` percentile interval of ``replicates`` around ``estimate``.

    Replicates that are not finite are dropped; with fewer than half left the interval is None. An
    interval over requests alone states no confidence (``UNCERTAINTY``): it leaves out the
    run-to-run noise every measured figure carries.
    """
    finite = replicates[np.isfinite(replicates)]
    low = high = None
    if finite.size * 2 >= replicates.size and finite.size > 0:
        tail = (1.0 - confidence) / 2.0 * 100.0
        low, high = (float(x) for x in np.percentile(finite, [tail, 100.0 - tail]))
    return Interval(estimate=estimate, low=low, high=high, confidence=None if basis == "requests" else confidence,
                    basis=basis, resamples=int(replicates.size))
