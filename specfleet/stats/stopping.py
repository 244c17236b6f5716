"""Adaptive stopping: has a cell measured enough requests for its decision statistics?

A cell may stop once the confidence intervals of both statistics a decision compares are
narrow relative to their estimates: SLO-qualified tokens/s, and the ITL percentile the SLO
binds (pooled over requests, in the series the SLO names). Requests are the independent
units: gaps within one request are correlated, as in the decisions' request bootstrap
(``specfleet.stats.bootstrap``). Both statistics are ratios of per-request sums (qualified
tokens / busy seconds; gaps at or below x / gaps), so both intervals use the linearised
variance of a ratio estimator over requests, the closed form of that bootstrap, cheap
enough to evaluate on the client's event loop between requests. The percentile interval is
Woodruff's: the interval of the pooled CDF at the estimate, mapped back through the pooled
empirical quantile function.

A statistic without an interval (fewer than two requests, no qualified token, no gap, a
CDF interval reaching 0 or 1) is never precise: such a cell runs to ``max_requests``.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

from specfleet.contract.workload import AdaptiveStoppingSpec, SLOSpec
from specfleet.results.cell import StopReason
from specfleet.results.records import RequestRecord
from specfleet.stats.samples import busy_s, qualified_tokens, slo_itl_ms

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class RequestStats:
    """One measured request's share of the two statistics."""

    qualified_tokens: float
    busy_s: float
    itl_ms: FloatArray

    @classmethod
    def of(cls, record: RequestRecord, slo: SLOSpec) -> "RequestStats":
        return cls(qualified_tokens(record, slo), busy_s(record), slo_itl_ms(record, slo.itl_statistic))


@dataclass(frozen=True, slots=True)
class Precision:
    """Relative half-widths (half-width / estimate); None where no interval can be formed."""

    requests: int
    qualified_tps_relative_half_width: float | None
    itl_relative_half_width: float | None

    def within(self, target: float) -> bool:
        widths = (self.qualified_tps_relative_half_width, self.itl_relative_half_width)
        return all(w is not None and w <= target for w in widths)


def _z(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2.0))


def _ratio_standard_error(numerators: FloatArray, denominators: FloatArray, ratio: float) -> float:
    """Linearised standard error of sum(numerators) / sum(denominators) over n >= 2 units."""
    n = len(numerators)
    residuals = numerators - ratio * denominators
    variance = n / (n - 1) * float(np.sum(residuals**2)) / float(np.sum(denominators)) ** 2
    return math.sqrt(variance)


def ratio_relative_half_width(
    numerators: Sequence[float], denominators: Sequence[float], confidence: float
) -> float | None:
    """Relative half-width of the interval on sum(numerators) / sum(denominators)."""
    y = np.asarray(numerators, dtype=np.float64)
    x = np.asarray(denominators, dtype=np.float64)
    if len(y) < 2 or not x.sum() > 0 or not y.sum() > 0:
        return None
    ratio = float(y.sum() / x.sum())
    return _z(confidence) * _ratio_standard_error(y, x, ratio) / ratio


ROUNDING = 1e-12


def pooled_percentile_relative_half_width(
    series: Sequence[FloatArray], percentile: float, confidence: float
) -> float | None:
    """Relative half-width of the interval on the ``percentile`` of the pooled series, each
    series one request's gaps (Woodruff's interval with requests as clusters)."""
    clusters = [s for s in series if len(s) > 0]
    if len(clusters) < 2:
        return None
    pooled = np.concatenate(clusters)
    estimate = float(np.percentile(pooled, percentile))
    if not estimate > 0:
        return None
    ceiling = estimate * (1.0 + ROUNDING)  # interpolation can land an ulp off a value it equals
    at_or_below = np.asarray([np.count_nonzero(s <= ceiling) for s in clusters], dtype=np.float64)
    sizes = np.asarray([len(s) for s in clusters], dtype=np.float64)
    cdf = float(at_or_below.sum() / sizes.sum())
    margin = _z(confidence) * _ratio_standard_error(at_or_below, sizes, cdf)
    q = percentile / 100.0
    if q - margin <= 0.0 or q + margin >= 1.0:
        return None
    low, high = np.percentile(pooled, [100.0 * (q - margin), 100.0 * (q + margin)])
    return float(high - low) / 2.0 / estimate


def precision(stats: Sequence[RequestStats], slo: SLOSpec, confidence: float) -> Precision:
    return Precision(
        requests=len(stats),
        qualified_tps_relative_half_width=ratio_relative_half_width(
            [s.qualified_tokens for s in stats], [s.busy_s for s in stats], confidence),
        itl_relative_half_width=pooled_percentile_relative_half_width(
            [s.itl_ms for s in stats], slo.percentile, confidence),
    )


def is_checkpoint(completed: int, spec: AdaptiveStoppingSpec) -> bool:
    """Checks run at ``min_requests`` completions and every ``check_every`` after."""
    return completed >= spec.min_requests and (completed - spec.min_requests) % spec.check_every == 0


def stop_reason(
    stats: Sequence[RequestStats], spec: AdaptiveStoppingSpec, slo: SLOSpec, confidence: float
) -> StopReason | None:
    """Why to stop after these completed requests, or None to keep issuing."""
    if is_checkpoint(len(stats), spec) and precision(stats, slo, confidence).within(spec.relative_half_width):
        return "precise"
    return "max_requests" if len(stats) >= spec.max_requests else None


@dataclass
class AdaptiveStopper:
    """Fed each measured request as it completes; says when to stop issuing new ones.

    ``reason`` keeps the first stop reason; later completions (requests in flight at the
    stop) are not evaluated.
    """

    spec: AdaptiveStoppingSpec
    slo: SLOSpec
    confidence: float
    completed: list[RequestStats] = field(default_factory=list)
    reason: StopReason | None = None

    def __call__(self, record: RequestRecord) -> bool:
        if self.reason is None:
            self.completed.append(RequestStats.of(record, self.slo))
            self.reason = stop_reason(self.completed, self.spec, self.slo, self.confidence)
        return self.reason is not None
