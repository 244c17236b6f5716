"""Run-to-run noise (seed: "Production gates": adopt only beyond the measurement noise), pooled
over the whole sweep and carried by every interval the product shows.

Model, on the log scale of a figure (SLO-qualified tokens/s, or the SLO-percentile ITL), for a
usable run i of arm a at configuration c (prompt class, load, sampling) on server life s:

    y_i = mu[a, c] + u[s] + e_i

- ``e_i``: run to run, variance ``run_var``, one draw per measured window: everything that moves
  one window of the same prompts against another, the requests' own timing included;
- ``u[s]``: the server life (one start of an arm's server, or one baseline replica), variance
  ``server_var``, shared by every window that server measured. A speculative arm always runs on
  another server than the baseline it is compared with, so both parts enter every comparison.

Only groups of two or more runs with the same arm and configuration carry information about the
two variances: the baseline's opening and closing cells, its repeats and replica checks, and any
arm's repeats. Within those groups the residuals r = M y (M removes each group's mean) give two
quadratic forms, their sum of squares and the sum of squares of their per-server totals, whose
expectations are linear in the two variances (tr(A Sigma)); solving the two equations gives
unbiased estimates (not truncated: a truncated estimate reads low exactly when the noise is
underestimated, and its intervals then cover less than they state), and the forms' covariance
under normality (2 tr(A S B S)) gives their sampling covariance, from which every interval takes
its degrees of freedom (``specfleet.verdicts.rule``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field
from scipy import stats

from specfleet.contract.base import RecordModel
from specfleet.stats.runs import Metric, RunValue

FloatArray = npt.NDArray[np.float64]
Identified = Literal["both", "total", "run_only", "none"]

NO_REPEATS = "no configuration was measured twice (no repeat, closing baseline or replica check)"


class RunNoise(RecordModel):
    """The sweep's run-to-run noise for one figure: its two parts, how well they are known, and
    the noise floor (the relative spread of one window measured on another server)."""

    metric: Metric
    identified: Identified = Field(
        description="both: server and run parts apart; total: only their sum (every repeated group is one pair "
        "of servers), charged to the server part, which no comparison can then understate; run_only: repeats "
        "on one server only, nothing says how much another server differs (no interval states a confidence); "
        "none: no configuration was measured twice.")
    server_var: float | None = Field(description="Variance of the server-life offset (log scale): an unbiased "
                                     "estimate, which can fall below 0 by chance.")
    run_var: float | None = Field(description="Variance of the run-to-run offset (log scale), unbiased likewise.")
    covariance: list[list[float]] | None = Field(
        None, description="Sampling covariance of (server_var, run_var) under the fitted model: what each "
        "interval's degrees of freedom come from.")
    runs: int = Field(description="Runs in repeated groups: what the estimate is made from.")
    groups: int = Field(description="Groups of runs with the same arm and configuration, two or more each.")
    servers: int = Field(description="Server lives among those runs.")
    relative_sd: float | None = Field(
        description="The noise floor: sqrt(server_var + run_var) (0 when their sum is not positive), the relative "
        "spread of one window on another server (log scale, about a fraction).")
    relative_sd_low: float | None = Field(description="Low end of the noise floor's scaled chi-square interval.")
    relative_sd_high: float | None
    df: float | None = Field(None, description="Satterthwaite degrees of freedom of the noise floor.")
    confidence: float
    source: str = Field(description="What the estimate pooled, in words; or why there is none.")

    @property
    def estimated(self) -> bool:
        return self.identified in ("both", "total")

    def parts(self) -> tuple[float, float]:
        if self.server_var is None or self.run_var is None:
            raise ValueError(f"no run-to-run estimate: {self.source}")
        return self.server_var, self.run_var

    def cov(self) -> FloatArray:
        return np.zeros((2, 2)) if self.covariance is None else np.asarray(self.covariance, dtype=np.float64)


@dataclass(frozen=True)
class NoiseDesign:
    """The repeated runs of one metric and the two quadratic forms that estimate its noise.

    ``rows``: positions of the repeated runs in the run list it was made from; ``resid`` the
    within-group residual projector M over them; ``servers`` their server indicator Z; ``expect``
    the 2 x 2 matrix of the forms' expectations per unit of (server_var, run_var)."""

    identified: Identified
    rows: npt.NDArray[np.intp]
    resid: FloatArray
    servers: FloatArray
    expect: FloatArray
    groups: int

    @classmethod
    def of(cls, runs: Sequence[RunValue]) -> "NoiseDesign":
        groups: dict[tuple[str, object], list[int]] = {}
        for i, run in enumerate(runs):
            groups.setdefault((run.arm, run.config), []).append(i)
        repeated = [g for g in groups.values() if len(g) >= 2]
        rows = np.array(sorted(i for g in repeated for i in g), dtype=np.intp)
        if not repeated:
            return cls("none", rows, np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((2, 2)), 0)
        position = {i: p for p, i in enumerate(rows)}
        x = np.zeros((len(rows), len(repeated)))
        for g, members in enumerate(repeated):
            x[[position[i] for i in members], g] = 1.0
        resid = np.eye(len(rows)) - x @ np.linalg.solve(x.T @ x, x.T)
        names = sorted({runs[i].server for i in rows})
        z = np.array([[float(runs[i].server == s) for s in names] for i in rows])
        mzz = resid @ z @ z.T
        expect = np.array([[np.trace(mzz), np.trace(resid)],
                           [np.trace(mzz @ mzz), np.trace(mzz @ resid)]])
        across = any(len({runs[i].server for i in g}) >= 2 for g in repeated)
        identified: Identified = ("run_only" if not across else
                                  "both" if np.linalg.cond(expect) < 1e8 else "total")
        return cls(identified, rows, resid, z, expect, len(repeated))

    def _forms(self) -> tuple[FloatArray, FloatArray]:
        """The two forms' matrices: Q_a = y' M y and Q_b = y' M Z Z' M y."""
        mz = self.resid @ self.servers
        return self.resid, mz @ mz.T

    def estimate(self, y: FloatArray) -> FloatArray:
        """(server_var, run_var), unbiased (either can be negative), from the run values ``y`` of the
        design's rows."""
        a, b = self._forms()
        qa, qb = float(y @ a @ y), float(y @ b @ y)
        (a_s, a_e), _ = self.expect
        if self.identified == "run_only":
            return np.array([np.nan, qa / a_e])
        if self.identified == "total":
            return np.array([qa / a_s, 0.0])
        return np.linalg.solve(self.expect, np.array([qa, qb]))

    def covariance(self, parts: FloatArray) -> FloatArray:
        """Sampling covariance of ``estimate`` under the model at ``parts`` (negative ones taken as
        0): Cov(y'Ay, y'By) = 2 tr(A S B S) under normality."""
        s, e = np.maximum(np.nan_to_num(parts), 0.0)
        sigma = s * self.servers @ self.servers.T + e * np.eye(len(self.rows))
        a, b = self._forms()
        sa, sb = a @ sigma, b @ sigma
        cov_q = 2.0 * np.array([[np.trace(sa @ sa), np.trace(sa @ sb)], [np.trace(sb @ sa), np.trace(sb @ sb)]])
        (a_s, a_e), _ = self.expect
        if self.identified == "run_only":
            return np.array([[0.0, 0.0], [0.0, cov_q[0, 0] / a_e**2]])
        if self.identified == "total":
            return np.array([[cov_q[0, 0] / a_s**2, 0.0], [0.0, 0.0]])
        inverse = np.linalg.inv(self.expect)
        out: FloatArray = inverse @ cov_q @ inverse.T
        return out


def estimate_noise(runs: Sequence[RunValue], metric: Metric, confidence: float) -> RunNoise:
    """The sweep's run-to-run noise from every group of two or more runs (same arm, configuration),
    with the noise floor's scaled chi-square interval (Satterthwaite degrees of freedom)."""
    design = NoiseDesign.of(runs)
    if design.identified == "none":
        return RunNoise(metric=metric, identified="none", server_var=None, run_var=None, runs=0, groups=0, servers=0,
                        relative_sd=None, relative_sd_low=None, relative_sd_high=None, confidence=confidence,
                        source=NO_REPEATS)
    parts = design.estimate(np.array([runs[i].log_value for i in design.rows]))
    cov = design.covariance(parts)
    counts = {"runs": len(design.rows), "groups": design.groups, "servers": design.servers.shape[1]}
    where = f"{counts['runs']} runs in {design.groups} repeated groups on {counts['servers']} server lives"
    if design.identified == "run_only":
        return RunNoise(metric=metric, identified="run_only", server_var=None, run_var=float(parts[1]),
                        relative_sd=None, relative_sd_low=None, relative_sd_high=None, confidence=confidence,
                        source=f"{where}: repeats on one server only, nothing says how much another server differs",
                        **counts)
    total = max(float(parts.sum()), 0.0)
    variance = float(cov.sum())
    df = 2.0 * total**2 / variance if total > 0 and variance > 0 else None
    low, high = _sd_interval(total, df, confidence)
    source = f"{where}" + ("" if design.identified == "both" else
                           "; server and run parts not separable: the sum is charged to the server")
    return RunNoise(metric=metric, identified=design.identified, server_var=float(parts[0]), run_var=float(parts[1]),
                    covariance=cov.tolist(), relative_sd=float(np.sqrt(total)), relative_sd_low=low,
                    relative_sd_high=high, df=df, confidence=confidence, source=source, **counts)


def _sd_interval(total: float, df: float | None, confidence: float) -> tuple[float | None, float | None]:
    """The scaled chi-square interval of sqrt(total) with ``df`` degrees of freedom."""
    if df is None:
        return None, None
    tail = (1.0 - confidence) / 2.0
    return (float(np.sqrt(df * total / stats.chi2.ppf(1.0 - tail, df))),
            float(np.sqrt(df * total / stats.chi2.ppf(tail, df))))
