"""The one decision rule. Every "adopt" specfleet prints (a cell, a prompt class, an arm at the
traffic mix, a k policy, a canary's promote or rollback) is made here, the same way.

Seed, "Production gates": adopt only where SLO-qualified cost per million accepted tokens falls
by more than the measurement noise. A claim is a ratio candidate / baseline of SLO-qualified
tokens/s (or of ITL) at some cells: on the log scale, to first order, a linear combination a'y of
run values (``specfleet.stats.runs``). Its standard error is the run-to-run and server-to-server
noise pooled over the sweep (``specfleet.stats.variance``) carried through the combination:

    se^2 = server_var x sum over servers (sum of a there)^2 + run_var x sum a^2

Its interval is a t interval with Satterthwaite degrees of freedom: 2 se^4 over the variance of
se^2, which the sampling covariance of the two noise estimates gives. Few repeated runs give few
degrees of freedom and wide intervals; a noise estimate that happens to read low is then covered
by the t's tail, not mistaken for precision. A part whose unbiased estimate reads below 0 adds
nothing to se^2 (a variance is not negative), but its sampling variance stays in the variance of
se^2: a server part read from two server lives rests on about one degree of freedom, and a claim
that carries it gets the few degrees of freedom, and the wide t, that it has (a first night's
server part that reads low is then covered by the t's tail rather than dropped). A claim's
degrees of freedom are at most n_eff - 1, n_eff = (sum of c)^2 / sum of c^2 the effective number
of independent noise terms it averages (c: each run's |a| x run sd, each server life's |sum of a
there| x server sd): a cell compared on one candidate window (n_eff about 3) is as heavy-tailed as
that window's noise, and only averaging makes the t's normal tails right; a claim over many
windows keeps its Satterthwaite degrees of freedom. Where the sweep has no estimate of run-to-run
noise a claim has no interval.

The rule, three verdicts on the corrected interval against the claim's break-even (the speedup
that saves a whole replica; 1 for a plain "faster"):

- ``adopt``: the corrected lower bound lies above the break-even;
- ``reject`` (shown not to pay): the corrected upper bound lies below the break-even;
- ``inconclusive``: the corrected interval contains the break-even, or there is no noise estimate.

Both directions are controlled over the family: a sweep wrongly adopts anything (a claim whose
truth does not clear the break-even) in at most 1 - confidence of sweeps, and wrongly rejects
anything (a claim whose truth reaches it) in at most 1 - confidence of sweeps. The correction
covers every claim of the family (``analysis.error_control``):

- ``family_wise`` (default): max-T. The claims' errors are drawn together (they share runs, so they
  are correlated, and max-T gains from it) and each is divided by its own chi-square root at one
  shared quantile per draw (all the claims' standard errors rest on the same noise estimate, so
  they read low or high together): a multivariate t. The quantile of the largest over a tier at
  1 - the tier's share of (1 - confidence) sets the tier's lower bounds (and, with the largest
  negative error, its upper bounds). The tiers split the error rate: the verdicts a
  fleet is bet on (each arm at the traffic mix and on each class alone) 80 %, the detail (every
  cell, every k assignment a policy could choose) 20 %. Each corrected lower bound then holds for
  all claims at once with the stated confidence, so choosing the best arm, class or k policy and
  reporting its corrected bound is covered too.
- ``false_discovery_rate``: Benjamini-Hochberg at 1 - confidence on each direction's one-sided
  p-values, and each bound at the false-coverage-rate level R (1 - confidence) / m (Benjamini &
  Yekutieli 2005), R the claims that direction decides, m the family. It controls the expected
  share of wrong adopts among the adopts, and of wrong rejects among the rejects, not the chance
  of any wrong verdict.

An adopt is one-sided, the corrected bounds are each one-sided at the stated confidence (their
pair is a two-sided interval at twice the error), and the marginal interval (the comparison alone)
is two-sided. With one claim the corrected lower bound is the one-sided bound at the stated
confidence.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats

from specfleet.stats.bootstrap import Basis, Interval
from specfleet.stats.runs import Metric, RunValue
from specfleet.stats.variance import RunNoise

FloatArray = npt.NDArray[np.float64]
ErrorControl = Literal["family_wise", "false_discovery_rate"]
ClaimKind = Literal["cell", "class", "mix", "policy", "canary"]
Verdict = Literal["adopt", "reject", "inconclusive"]
MAX_T_DRAWS = 6_000
"""Draws of the family's joint errors behind each max-T quantile: about 0.3 points of coverage of
Monte Carlo error at 95 %."""
DF_STEP = 0.02
"""Degrees of freedom are read on a log grid this fine for the chi-square quantiles of the draws."""
CHUNK = 1_000
TIER: dict[str, str] = {"mix": "verdict", "class": "verdict", "canary": "verdict", "cell": "detail",
                        "policy": "detail"}
TIER_SHARE = {"verdict": 0.8, "detail": 0.2}
"""How the family-wise error rate is split (Bonferroni) between the verdicts a fleet is bet on (each
arm at the traffic mix, and each arm on each class alone: the entry gate's claims) and the detail
(every cell, every k assignment a policy could choose): a max-T correction within each."""
CORRECTION = {"family_wise": "max-T", "false_discovery_rate": "FCR-adjusted, Benjamini-Hochberg"}


@dataclass(frozen=True)
class Claim:
    """What could be adopted: candidate / baseline > ``break_even`` at some cells.

    ``log_estimate`` is the log of the ratio as the product computes it (harmonic means over a
    mix, whole figures), ``weights`` its gradient over run values (indices into the family's runs,
    all of the claim's ``metric``)."""

    key: str
    kind: ClaimKind
    log_estimate: float
    weights: Mapping[int, float]
    break_even: float = 1.0
    metric: Metric = "qualified_tokens_per_s"


@dataclass(frozen=True)
class ClaimResult:
    """A claim's marginal interval (this comparison alone), its corrected one (over the family),
    and the rule's answer on the corrected one."""

    claim: Claim
    marginal: Interval
    corrected: Interval
    verdict: Verdict
    comparisons: int
    why_not: str | None
    """Why it is not adopted: shown not to pay, no noise estimate, within the noise, or not after the
    correction."""

    @property
    def adopted(self) -> bool:
        return self.verdict == "adopt"


@dataclass(frozen=True)
class _Terms:
    """A claim's variance coefficients of (server_var, run_var), and the sums of its terms' absolute
    coefficients (server lives', runs') that its effective number of terms is made of."""

    q: FloatArray
    l1: FloatArray


@dataclass(frozen=True)
class _Spread:
    se: float
    df: float


@dataclass
class Family:
    """Every claim of one experiment (a sweep, or a canary), decided together. ``runs`` are the
    run values the claims' weights index; ``noise`` the run-to-run noise per metric, estimated
    from the repeated runs among them."""

    runs: Sequence[RunValue]
    noise: Mapping[Metric, RunNoise]
    confidence: float
    control: ErrorControl = "family_wise"
    seed: int = 0
    claims: list[Claim] = field(default_factory=list)

    def add(self, claim: Claim) -> Claim:
        if any(c.key == claim.key for c in self.claims):
            raise ValueError(f"claim {claim.key} twice in one family")
        if any(self.runs[i].metric != claim.metric for i in claim.weights):
            raise ValueError(f"claim {claim.key}: weights on runs of another metric")
        self.claims.append(claim)
        return claim

    def decide(self) -> dict[str, ClaimResult]:
        """Every claim's intervals and whether it is adopted, corrected over the whole family.
        Claims of a metric without a run-to-run estimate have no interval ends and no stated
        confidence, and are never adopted; they still count in the family."""
        if not self.claims:
            return {}
        m, alpha = len(self.claims), 1.0 - self.confidence
        terms = [self._terms(c) for c in self.claims]
        spreads = [self._spread(c, t) for c, t in zip(self.claims, terms, strict=True)]
        se = np.array([s.se for s in spreads])
        df = np.array([s.df for s in spreads])
        live = np.array([self._noise(c).estimated for c in self.claims])
        two_sided = stats.t.isf(alpha / 2.0, df)
        if self.control == "family_wise":
            low, high = self._max_t(terms, df, live, alpha)
        else:
            low, high = self._fdr(se, df, live, alpha)
        low, high = np.where(live, low, two_sided), np.where(live, high, two_sided)
        log = np.array([c.log_estimate for c in self.claims])
        break_even = np.log([c.break_even for c in self.claims])
        adopted = live & (log - low * se > break_even)
        rejected = live & (log + high * se < break_even)
        out = {}
        for j, c in enumerate(self.claims):
            basis = self._basis(c)
            verdict: Verdict = "adopt" if adopted[j] else "reject" if rejected[j] else "inconclusive"
            marginal = self._interval(c, se[j], two_sided[j], two_sided[j], basis, None)
            corrected = self._interval(c, se[j], low[j], high[j], basis, m)
            out[c.key] = ClaimResult(c, marginal, corrected, verdict, m, self._why_not(c, marginal, verdict, m))
        return out

    # --- one claim --------------------------------------------------------------------------------

    def _weights(self, claim: Claim) -> FloatArray:
        a = np.zeros(len(self.runs))
        for i, w in claim.weights.items():
            a[i] += w
        return a

    def _terms(self, claim: Claim) -> _Terms:
        a = self._weights(claim)
        sums: dict[str, float] = {}
        for run, w in zip(self.runs, a, strict=True):
            if w:
                sums[run.server] = sums.get(run.server, 0.0) + w
        return _Terms(np.array([sum(x**2 for x in sums.values()), float(np.sum(a**2))]),
                      np.array([sum(abs(x) for x in sums.values()), float(np.sum(np.abs(a)))]))

    def _noise(self, claim: Claim) -> RunNoise:
        return self.noise[claim.metric]

    def _spread(self, claim: Claim, terms: _Terms) -> _Spread:
        """se^2 = q . (server_var, run_var), a part the unbiased estimate puts below 0 taken as 0 (a
        variance is not negative); Satterthwaite df from the covariance of both parts, the one read
        below 0 included: its uncertainty is not dropped with its estimate; at most n_eff - 1, the
        claim's effective number of independent noise terms less one."""
        noise = self._noise(claim)
        if not noise.estimated:
            return _Spread(0.0, 1.0)
        parts = np.maximum(noise.parts(), 0.0)
        variance = max(float(terms.q @ parts), 1e-300)
        var_of_var = float(terms.q @ noise.cov() @ terms.q)
        df = 2.0 * variance**2 / var_of_var if var_of_var > 0 else 1e6
        n_eff = float(terms.l1 @ np.sqrt(parts)) ** 2 / variance
        return _Spread(float(np.sqrt(variance)), float(min(max(min(df, n_eff - 1.0), 1.0), 1e6)))

    def _basis(self, claim: Claim) -> Basis:
        return "runs" if self._noise(claim).estimated else "none"

    def _interval(self, claim: Claim, se: float, below: float, above: float, basis: Basis,
                  comparisons: int | None) -> Interval:
        """exp(log estimate - below x se, log estimate + above x se): two-sided when marginal
        (``comparisons`` None), else each end a one-sided bound over the family; no ends without a
        noise estimate."""
        estimate = float(np.exp(claim.log_estimate))
        if basis == "none":
            return Interval(estimate=estimate, low=None, high=None, confidence=None, basis=basis, resamples=None)
        return Interval(estimate=estimate, low=float(np.exp(claim.log_estimate - below * se)),
                        high=float(np.exp(claim.log_estimate + above * se)), confidence=self.confidence,
                        basis=basis, resamples=None, df=self._spread(claim, self._terms(claim)).df,
                        comparisons=comparisons, correction=CORRECTION[self.control] if comparisons else None,
                        sides="each" if comparisons else "two")

    def _why_not(self, claim: Claim, marginal: Interval, verdict: Verdict, m: int) -> str | None:
        if verdict == "adopt":
            return None
        if verdict == "reject":
            return (f"shown not to pay: the upper bound corrected for {m} comparisons ({CORRECTION[self.control]}) "
                    "lies below the break-even")
        noise = self.noise[claim.metric]
        if not noise.estimated:
            return f"no run-to-run noise estimate ({noise.source}): no interval"
        if marginal.low is None or marginal.low <= claim.break_even:
            return "within the noise: the interval reaches the break-even"
        return f"beyond the noise alone, not after correcting for {m} comparisons ({CORRECTION[self.control]})"

    # --- error control -----------------------------------------------------------------------------

    def _draws(self, metric: Metric, columns: Sequence[int], terms: Sequence[_Terms], df: FloatArray,
               rng: np.random.Generator) -> npt.NDArray[np.float32]:
        """Multivariate-t draws of the claims ``columns`` of one metric: their errors drawn jointly in
        run space under the fitted noise (negative parts taken as 0), each divided by its standard
        deviation there, then by the root of a chi-square over its df at one quantile per draw."""
        touched = {i for j in columns for i, w in self.claims[j].weights.items() if w}
        own = [i for i, r in enumerate(self.runs) if r.metric == metric and i in touched]
        if not own:  # claims on no run: nothing varies
            return np.zeros((MAX_T_DRAWS, len(columns)), dtype=np.float32)
        runs = [self.runs[i] for i in own]
        server_var, run_var = (max(p, 0.0) for p in self.noise[metric].parts())
        names = sorted({r.server for r in runs})
        z = np.array([[float(r.server == s) for s in names] for r in runs])
        a = np.stack([self._weights(self.claims[j])[own] for j in columns], axis=1)
        q = np.stack([terms[j].q for j in columns], axis=1)
        sd = np.sqrt(np.maximum(np.array([server_var, run_var]) @ q, 1e-300))
        out = np.empty((MAX_T_DRAWS, len(columns)), dtype=np.float32)
        grid = np.exp(np.round(np.log(df[list(columns)]) / DF_STEP) * DF_STEP)
        levels, which = np.unique(grid, return_inverse=True)
        uniform = rng.uniform(size=(MAX_T_DRAWS, 1))
        chi = (stats.chi2.ppf(uniform, levels[None, :]) / levels[None, :])[:, which]
        for start in range(0, MAX_T_DRAWS, CHUNK):
            n = min(CHUNK, MAX_T_DRAWS - start)
            err = (rng.normal(0.0, np.sqrt(server_var), (n, len(names))) @ z.T
                   + rng.normal(0.0, np.sqrt(run_var), (n, len(runs)))) @ a
            out[start:start + n] = err / sd / np.sqrt(np.maximum(chi[start:start + n], 1e-12))
        return out

    def _max_t(self, terms: Sequence[_Terms], df: FloatArray, live: npt.NDArray[np.bool_],
               alpha: float) -> tuple[FloatArray, FloatArray]:
        """Per tier, the critical values of its lower and upper one-sided bounds: the quantiles of
        its largest t and of its largest -t at 1 - its share of alpha (the tiers' shares
        renormalised over the tiers with claims: Bonferroni across tiers, max-T within)."""
        m = len(self.claims)
        rng = np.random.default_rng([self.seed, m, len(self.runs)])
        t = np.zeros((MAX_T_DRAWS, m), dtype=np.float32)
        for metric in sorted({c.metric for c, ok in zip(self.claims, live, strict=True) if ok}):
            columns = [j for j, c in enumerate(self.claims) if c.metric == metric and live[j]]
            t[:, columns] = self._draws(metric, columns, terms, df, rng)
        tiers = np.array([TIER[c.kind] for c in self.claims])
        present = sorted({tier for tier, ok in zip(tiers, live, strict=True) if ok})
        total = sum(TIER_SHARE[tier] for tier in present)
        low, high = np.zeros(m), np.zeros(m)
        for tier in present:
            columns = live & (tiers == tier)
            level = 1.0 - alpha * TIER_SHARE[tier] / total
            low[columns] = float(np.quantile(t[:, columns].max(axis=1), level))
            high[columns] = float(np.quantile((-t[:, columns]).max(axis=1), level))
        return low, high

    def _fdr(self, se: FloatArray, df: FloatArray, live: npt.NDArray[np.bool_],
             alpha: float) -> tuple[FloatArray, FloatArray]:
        """Benjamini-Hochberg at alpha on each direction's one-sided t p-values (above the
        break-even for the lower bounds, below it for the upper ones), and each direction's
        false-coverage-rate adjusted critical values at level R alpha / m, R the claims it decides."""
        stat = np.array([c.log_estimate - np.log(c.break_even) for c in self.claims]) / np.maximum(se, 1e-300)
        low = _fcr_critical(np.where(live, stats.t.sf(stat, df), 1.0), df, alpha)
        high = _fcr_critical(np.where(live, stats.t.cdf(stat, df), 1.0), df, alpha)
        return low, high


def _fcr_critical(p: FloatArray, df: FloatArray, alpha: float) -> FloatArray:
    """Benjamini-Hochberg's count R of the p-values ``p`` it passes at ``alpha``, and the critical
    values at the false-coverage-rate level R alpha / m."""
    m = len(p)
    passed = np.sort(p) <= alpha * np.arange(1, m + 1) / m
    r = int(np.max(np.nonzero(passed)[0]) + 1) if passed.any() else 0
    out: FloatArray = stats.t.isf(alpha * max(r, 1) / m, df)
    return out
