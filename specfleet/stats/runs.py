"""One measured run of a cell as the decision rule sees it: the log of a figure and the part of
its variance that comes from the requests inside the run.

Every interval the product shows is formed on the log scale (a ratio of two figures is a
difference of logs) from these run values plus the run-to-run noise between them
(``specfleet.stats.variance``). The request-level part is estimated per run:

- SLO-qualified tokens per second: the linearisation (delta method) of the log of the ratio
  sum(qualified tokens) / sum(busy seconds) over the run's requests, the same ratio the request
  bootstrap resampled: var = n / (n - 1) * sum((t_i / T - d_i / D)^2).
- A latency percentile (the SLO's ITL): a cluster bootstrap over requests (each request's gaps
  move together), the variance of the log of the resampled percentile.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from specfleet.stats.bootstrap import pooled_percentile_replicates
from specfleet.stats.samples import CellSample

FloatArray = npt.NDArray[np.float64]
ConfigKey = tuple[str, str, float, str]
"""What runs of different arms are matched on: prompt class, load mode, load value, sampling."""
Metric = Literal["qualified_tokens_per_s", "itl"]
WITHIN_RESAMPLES = 200
"""Cluster-bootstrap resamples behind a run's request-level ITL variance: a variance needs far fewer
than the ends of a percentile interval (about 10 % relative error at 200)."""


@dataclass(frozen=True)
class RunValue:
    """One usable run: ``log_value`` = log of the figure, ``within_var`` its request-level
    variance with ``within_df`` degrees of freedom (requests - 1)."""

    metric: Metric
    label: str
    arm: str
    config: ConfigKey
    server: str
    """The server life that measured it: runs of one server share its offset (``variance``)."""
    log_value: float
    within_var: float
    within_df: int


def log_rate(tokens: FloatArray, busy_s: FloatArray) -> tuple[float, int] | tuple[None, int]:
    """Request-level variance of log(sum tokens / sum busy seconds), and its degrees of freedom;
    None where the ratio is not positive or the run has one request."""
    n = len(tokens)
    total_tokens, total_s = float(tokens.sum()), float(busy_s.sum())
    if n < 2 or total_tokens <= 0 or total_s <= 0:
        return None, max(n - 1, 0)
    linear = tokens / total_tokens - busy_s / total_s
    return float(n / (n - 1) * np.sum(linear**2)), n - 1


def log_percentile(series: Sequence[FloatArray], q: float, rng: np.random.Generator,
                   resamples: int) -> tuple[float, float, int] | None:
    """(log of the pooled q-th percentile, its request-level variance, df) from a cluster bootstrap
    over requests; None without gaps or with a percentile that is not positive."""
    pooled = np.concatenate([*series, np.empty(0)])
    if pooled.size == 0 or len(series) < 2:
        return None
    point = float(np.percentile(pooled, q))
    if point <= 0:
        return None
    replicates = pooled_percentile_replicates(list(series), q, rng, resamples)
    finite = replicates[np.isfinite(replicates) & (replicates > 0)]
    if finite.size * 2 < replicates.size:
        return None
    return float(np.log(point)), float(np.var(np.log(finite), ddof=1)), len(series) - 1


def paired_log_rate(baseline: CellSample, candidate: CellSample) -> tuple[float, int] | None:
    """Request-level variance (and df) of the log ratio of two runs' rates whose i-th requests
    served the same prompt (the canary): the linearisation of both, differenced request by request."""
    n = min(len(baseline.qualified_tokens), len(candidate.qualified_tokens))
    parts = []
    for s in (baseline, candidate):
        tokens, busy = s.qualified_tokens[:n], s.durations_s[:n]
        if n < 2 or tokens.sum() <= 0 or busy.sum() <= 0:
            return None
        parts.append(tokens / tokens.sum() - busy / busy.sum())
    diff = parts[1] - parts[0]
    return float(n / (n - 1) * np.sum(diff**2)), n - 1


def paired_log_percentile(baseline: Sequence[FloatArray], candidate: Sequence[FloatArray], q: float,
                          rng: np.random.Generator, resamples: int) -> tuple[float, int] | None:
    """Request-level variance (and df) of log(candidate percentile / baseline percentile) from a
    bootstrap that resamples the same request indices on both (the canary's pairs)."""
    n = min(len(baseline), len(candidate))
    if n < 2:
        return None
    logs = np.empty(resamples)
    for b in range(resamples):
        idx = rng.integers(0, n, n)
        sides = []
        for series in (baseline, candidate):
            pooled = np.concatenate([series[i] for i in idx] + [np.empty(0)])
            sides.append(float(np.percentile(pooled, q)) if pooled.size else np.nan)
        logs[b] = np.log(sides[1] / sides[0]) if sides[0] > 0 and sides[1] > 0 else np.nan
    finite = logs[np.isfinite(logs)]
    if finite.size * 2 < resamples:
        return None
    return float(np.var(finite, ddof=1)), n - 1


def server_of(sample: CellSample) -> str:
    """The server life a cell was measured on; cells stored before it was recorded share one per
    arm and phase (repeats and replica checks then read as one server's, the conservative side
    for the run-to-run part, which only repeats on one server inform)."""
    cell = sample.cell
    ident = cell.identity
    return cell.server or f"{ident.arm}/{ident.phase}" + ("/check" if ident.replica_check else "")


def rate_run(sample: CellSample, config: ConfigKey) -> RunValue | None:
    """The run's SLO-qualified tokens per second, or None when it has no positive rate."""
    rate = sample.qualified_tokens_per_s  # a usable cell without a rate is an error, never 0
    var, df = log_rate(sample.qualified_tokens, sample.durations_s)
    if rate <= 0 or var is None:
        return None
    ident = sample.cell.identity
    return RunValue("qualified_tokens_per_s", ident.label, ident.arm, config, server_of(sample),
                    float(np.log(rate)), var, df)


def percentile_run(sample: CellSample, config: ConfigKey, q: float, rng: np.random.Generator,
                   resamples: int) -> RunValue | None:
    """The run's SLO-percentile ITL, or None without enough gaps."""
    found = log_percentile([s for s in sample.itl_ms if s.size], q, rng, min(resamples, WITHIN_RESAMPLES))
    if found is None:
        return None
    ident = sample.cell.identity
    return RunValue("itl", ident.label, ident.arm, config, server_of(sample), *found)


@dataclass(frozen=True)
class RunTable:
    """Every usable run of a sweep for one metric, and where each (arm, configuration) has its runs."""

    runs: list[RunValue]
    index: dict[tuple[str, ConfigKey], list[int]]
    """Positions in the family's run list (``offset`` + position here)."""
    offset: int = 0

    @classmethod
    def of(cls, runs: Sequence[RunValue], offset: int = 0) -> "RunTable":
        index: dict[tuple[str, ConfigKey], list[int]] = {}
        for i, run in enumerate(runs):
            index.setdefault((run.arm, run.config), []).append(offset + i)
        return cls(list(runs), index, offset)

    def has(self, arm: str, config: ConfigKey) -> bool:
        return (arm, config) in self.index

    def log_mean(self, arm: str, config: ConfigKey) -> float:
        """The arm's figure at the configuration: the mean of its runs' logs (their geometric mean)."""
        return float(np.mean([self.runs[i - self.offset].log_value for i in self.index[(arm, config)]]))

    def weights(self, arm: str, config: ConfigKey, scale: float = 1.0) -> dict[int, float]:
        """The gradient of ``scale`` x log_mean over the run values."""
        runs = self.index[(arm, config)]
        return {i: scale / len(runs) for i in runs}

    def count(self, arm: str, config: ConfigKey) -> int:
        return len(self.index.get((arm, config), []))


def add_weights(*parts: dict[int, float]) -> dict[int, float]:
    """The sum of sparse gradients."""
    out: dict[int, float] = {}
    for part in parts:
        for i, w in part.items():
            out[i] = out.get(i, 0.0) + w
    return out
