"""Run-to-run noise (seed: "Production gates": adopt only beyond the measurement noise), pooled
over the whole sweep and carried by every interval the product shows.

Model, on the log scale of a figure (SLO-qualified tokens/s, or the SLO-percentile ITL), for a
usable run i of arm a at configuration c (prompt class, load, sampling) on server life s:

    y_i = mu[a, c] + u[s] + e_i + r_i

- ``r_i``: the requests inside the run, variance v_i, estimated per run (``specfleet.stats.runs``);
- ``e_i``: run to run, variance ``run_var``, one draw per measured window;
- ``u[s]``: the server life (one start of an arm's server, or one baseline replica), variance
  ``server_var``, shared by every window that server measured. A speculative arm always runs on
  another server than the baseline it is compared with, so both parts enter every comparison.

Only groups of two or more runs with the same arm and configuration carry information about the
two variances: the baseline's opening and closing cells, its repeats and replica checks, and any
arm's repeats. Within those groups the residuals r = M y (M removes each group's mean) give two
quadratic forms, their sum of squares and the sum of squares of their per-server totals, whose
expectations are linear in the two variances (tr(A Sigma)); solving the two equations gives
unbiased estimates, truncated at 0 (the other re-solved alone). Being closed-form, the estimate can
be redrawn thousands of times: ``specfleet.decision_rule`` studentises every claim with it under a
parametric bootstrap, so the intervals carry the uncertainty of the noise estimate itself.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.stats.runs import Metric, RunValue

FloatArray = npt.NDArray[np.float64]
Identified = Literal["both", "total", "run_only", "none"]
FLOOR_DRAWS = 4_000
"""Parametric bootstrap draws behind the noise floor's own interval."""

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
    server_var: float | None = Field(description="Variance of the server-life offset (log scale).")
    run_var: float | None = Field(description="Variance of the run-to-run offset (log scale).")
    runs: int = Field(description="Runs in repeated groups: what the estimate is made from.")
    groups: int = Field(description="Groups of runs with the same arm and configuration, two or more each.")
    servers: int = Field(description="Server lives among those runs.")
    relative_sd: float | None = Field(
        description="The noise floor: sqrt(server_var + run_var), the relative spread of one window on another "
        "server (log scale, about a fraction).")
    relative_sd_low: float | None = Field(description="Low end of the noise floor's parametric-bootstrap interval.")
    relative_sd_high: float | None
    confidence: float
    source: str = Field(description="What the estimate pooled, in words; or why there is none.")

    @property
    def estimated(self) -> bool:
        return self.identified in ("both", "total")

    def parts(self) -> tuple[float, float]:
        if self.server_var is None or self.run_var is None:
            raise ValueError(f"no run-to-run estimate: {self.source}")
        return self.server_var, self.run_var


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

    def estimate(self, y: FloatArray, v: FloatArray) -> FloatArray:
        """(server_var, run_var) per row of ``y`` (draws x runs, the design's rows only) with
        request-level variances ``v`` (same shape): unbiased, then truncated at 0."""
        r = y @ self.resid
        qa = np.sum(r**2, axis=1) - v @ np.diag(self.resid)
        mz = self.resid @ self.servers
        qb = np.sum((r @ self.servers) ** 2, axis=1) - v @ np.sum(mz**2, axis=1)
        (a_s, a_e), _ = self.expect
        out = np.zeros((len(y), 2))
        if self.identified == "run_only":
            out[:, 1] = np.maximum(qa / a_e, 0.0)
            return out
        if self.identified == "total":
            out[:, 0] = np.maximum(qa / a_s, 0.0)
            return out
        solved = np.linalg.solve(self.expect, np.stack([qa, qb]))
        s, e = solved
        alone_e, alone_s = np.maximum(qa / a_e, 0.0), np.maximum(qa / a_s, 0.0)
        out[:, 0] = np.where(s < 0, 0.0, np.where(e < 0, alone_s, s))
        out[:, 1] = np.where(s < 0, alone_e, np.where(e < 0, 0.0, e))
        return out


def estimate_noise(runs: Sequence[RunValue], metric: Metric, confidence: float, seed: int = 0) -> RunNoise:
    """The sweep's run-to-run noise from every group of two or more runs (same arm, configuration),
    with the noise floor's interval from a parametric bootstrap of the same estimate."""
    design = NoiseDesign.of(runs)
    if design.identified == "none":
        return RunNoise(metric=metric, identified="none", server_var=None, run_var=None, runs=0, groups=0, servers=0,
                        relative_sd=None, relative_sd_low=None, relative_sd_high=None, confidence=confidence,
                        source=NO_REPEATS)
    y = np.array([runs[i].log_value for i in design.rows])
    v = np.array([runs[i].within_var for i in design.rows])
    df = np.array([max(runs[i].within_df, 1) for i in design.rows], dtype=np.float64)
    server_var, run_var = design.estimate(y[None, :], v[None, :])[0]
    counts = {"runs": len(design.rows), "groups": design.groups, "servers": design.servers.shape[1]}
    where = f"{counts['runs']} runs in {design.groups} repeated groups on {counts['servers']} server lives"
    if design.identified == "run_only":
        return RunNoise(metric=metric, identified="run_only", server_var=None, run_var=float(run_var),
                        relative_sd=None, relative_sd_low=None, relative_sd_high=None, confidence=confidence,
                        source=f"{where}: repeats on one server only, nothing says how much another server differs",
                        **counts)
    rng = np.random.default_rng([seed, len(design.rows)])
    draws = bootstrap_draws(design, float(server_var), float(run_var), v, df, rng, FLOOR_DRAWS)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.sqrt(draws.sum(axis=1)), [tail, 1.0 - tail])
    source = f"{where}" + ("" if design.identified == "both" else
                           "; server and run parts not separable: the sum is charged to the server")
    return RunNoise(metric=metric, identified=design.identified, server_var=float(server_var), run_var=float(run_var),
                    relative_sd=float(np.sqrt(server_var + run_var)), relative_sd_low=float(low),
                    relative_sd_high=float(high), confidence=confidence, source=source, **counts)


def bootstrap_draws(design: NoiseDesign, server_var: float, run_var: float, v: FloatArray, df: FloatArray,
                    rng: np.random.Generator, draws: int) -> FloatArray:
    """The estimate redrawn under the fitted model (the design's rows only): draws x 2."""
    u = rng.normal(0.0, np.sqrt(server_var), (draws, design.servers.shape[1])) @ design.servers.T
    y = u + rng.normal(0.0, 1.0, (draws, len(v))) * np.sqrt(run_var + v)
    v_star = v * rng.chisquare(df, (draws, len(v))) / df
    return design.estimate(y, v_star)
