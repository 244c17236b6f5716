"""One engine step's time as a linear law of what the step processes (docs/performance-model.md).

Under vLLM every content chunk after a request's first is one engine step for that request,
so a request's chunk gaps are the times of the steps it took part in. The law is fitted per
stored sweep, that is per target, drafters, engine and hardware, by non-negative least squares
on one row per request (its mean chunk gap against the mean batch over its gaps), weighted
by the number of gaps. Features, in ms per unit:

- ``step``: a fixed cost per step (scheduling, sampling, the API server's share);
- ``decode_seq``: per sequence decoding in the step;
- ``prefill_token``: per prompt token prefilled in the step (new requests joining);
- ``context_ktoken``: per 1,000 tokens of context the step's sequences attend over;
- per speculative method M: ``M:step`` (the proposer's fixed cost per step), ``M:draft_token``
  (per draft token the target verifies, plus the proposer's work per sequence and position);
  for methods that run a draft model, ``M:draft_pass`` (per sequential draft pass, k per
  step) and ``M:draft_prefill_token`` (the draft model prefills the prompt too).

A CPU's matrix kernels can take a slower path below a few rows: on a 2-core AMD EPYC a vLLM step
of one or two sequences costs more than one of four
(docs/performance-model.md, "How good it is on a dense sweep"). Two more features model that
regime below ``narrow_below`` rows (the tokens the target processes in the step: decode
sequences, prompt tokens prefilled, draft tokens verified):

- ``narrow_step``: a fixed cost per step below the threshold;
- ``narrow_row``: per row of such a step.

The threshold is chosen with the fit: half a row above the one of ``NARROW_CANDIDATES`` that gives the
lowest Bayesian information criterion over the requests, kept only when that is well below the
plain law's (``select_narrow_below``), so a machine with no such regime keeps the plain law.

A feature the data cannot tell from the ones before it (a column in their span, for example
``M:draft_pass`` when the arm was measured at one k only) is dropped and named in
``StepLaw.dropped``; non-negative least squares keeps every cost physical (no feature makes a
step cheaper). The coefficients' spread comes from a bootstrap over requests within each cell.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.optimize import nnls

FloatArray = npt.NDArray[np.float64]

DRAFTER_METHODS: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3", "mtp"})
"""Methods whose proposer is a model run once per proposed position (k sequential passes)."""
SHARED_FEATURES = ("step", "decode_seq", "prefill_token", "context_ktoken")
NARROW_FEATURES = ("narrow_step", "narrow_row")
NARROW_CANDIDATES = (1, 2, 3, 4, 5, 6, 8)
"""The most rows a step on the slower kernel path may have; its threshold ``narrow_below`` is half a row
above (a request's mean rows over its steps is fractional; the midpoint of the rows left open)."""
NARROW_MIN_BIC_GAIN = 10.0
"""How much lower the information criterion must be with the slower path than without it for the law
to keep one: "very strong" evidence on Kass and Raftery's scale (J. Am. Stat. Assoc. 90, 1995)."""
COLLINEAR_TOL = 1e-3
"""A standardised column whose residual norm, after projection on the kept ones, is below this
share of its own norm adds nothing the data can identify."""


@dataclass(frozen=True, slots=True)
class StepBatch:
    """What one engine step processes (or the mean over a request's steps)."""

    method: str
    """The arm's method; ``baseline`` for no speculation."""
    k: int
    decode_seqs: float
    prefill_tokens: float = 0.0
    context_tokens: float = 0.0
    draft_tokens: float = 0.0
    """Draft tokens the target verifies in the step."""


@dataclass(frozen=True, slots=True)
class StepObservation:
    """One request's chunk gaps: their mean against the mean batch over them."""

    batch: StepBatch
    gap_ms: float
    gaps: int
    group: str
    """The cell it came from: the bootstrap resamples requests within a cell."""


def method_features(method: str) -> tuple[str, ...]:
    if method == "baseline":
        return ()
    names = [f"{method}:step", f"{method}:draft_token"]
    if method in DRAFTER_METHODS:
        names += [f"{method}:draft_pass", f"{method}:draft_prefill_token"]
    return tuple(names)


def candidate_features(methods: Sequence[str], narrow_below: float = 0.0) -> tuple[str, ...]:
    """Shared features first, then each method's, in the order the pruning keeps them."""
    shared = SHARED_FEATURES + (NARROW_FEATURES if narrow_below > 0 else ())
    return shared + tuple(name for m in sorted(set(methods)) for name in method_features(m))


def columns(
    names: Sequence[str], methods: npt.NDArray[np.str_], k: FloatArray, decode_seqs: FloatArray,
    prefill_tokens: FloatArray, context_tokens: FloatArray, draft_tokens: FloatArray, narrow_below: float = 0.0,
) -> FloatArray:
    """The design matrix, one row per step (or mean over steps), one column per feature name."""
    rows = decode_seqs + prefill_tokens + draft_tokens
    narrow = (rows < narrow_below).astype(np.float64)
    shared = {"step": np.ones_like(decode_seqs), "decode_seq": decode_seqs, "prefill_token": prefill_tokens,
              "context_ktoken": context_tokens / 1000.0, "narrow_step": narrow, "narrow_row": narrow * rows}
    out = np.empty((decode_seqs.size, len(names)), dtype=np.float64)
    for j, name in enumerate(names):
        if name in shared:
            out[:, j] = shared[name]
            continue
        method, _, part = name.partition(":")
        value = {"step": np.ones_like(decode_seqs), "draft_token": draft_tokens, "draft_pass": k,
                 "draft_prefill_token": prefill_tokens}[part]
        out[:, j] = np.where(methods == method, value, 0.0)
    return out


def design(batches: Sequence[StepBatch], names: Sequence[str], narrow_below: float = 0.0) -> FloatArray:
    def values(attr: str) -> FloatArray:
        return np.array([float(getattr(b, attr)) for b in batches], dtype=np.float64)

    return columns(names, np.array([b.method for b in batches], dtype=np.str_), values("k"), values("decode_seqs"),
                   values("prefill_tokens"), values("context_tokens"), values("draft_tokens"), narrow_below)


@dataclass(frozen=True, slots=True)
class LinearStep:
    """The law for one method and k: ``fixed_ms + per_decode_seq_ms x B + ...`` (ms per unit)."""

    fixed_ms: float
    per_decode_seq_ms: float
    per_prefill_token_ms: float
    per_context_token_ms: float
    per_draft_token_ms: float
    narrow_below_rows: float = 0.0
    """A step of fewer rows (decode sequences, prefill and draft tokens) also costs the two below."""
    narrow_fixed_ms: float = 0.0
    narrow_per_row_ms: float = 0.0

    def __call__(self, decode_seqs: float, prefill_tokens: float, context_tokens: float, draft_tokens: float) -> float:
        ms = (self.fixed_ms + self.per_decode_seq_ms * decode_seqs + self.per_prefill_token_ms * prefill_tokens
              + self.per_context_token_ms * context_tokens + self.per_draft_token_ms * draft_tokens)
        rows = decode_seqs + prefill_tokens + draft_tokens
        if rows < self.narrow_below_rows:
            ms += self.narrow_fixed_ms + self.narrow_per_row_ms * rows
        return ms

    def scaled(self, factor: float) -> "LinearStep":
        return LinearStep(self.fixed_ms * factor, self.per_decode_seq_ms * factor, self.per_prefill_token_ms * factor,
                          self.per_context_token_ms * factor, self.per_draft_token_ms * factor,
                          self.narrow_below_rows, self.narrow_fixed_ms * factor, self.narrow_per_row_ms * factor)


@dataclass(frozen=True)
class StepLaw:
    """The fitted law: ``step_ms(batch) = features(batch) . coef_ms``."""

    names: tuple[str, ...]
    coef_ms: FloatArray
    replicates: FloatArray
    """Bootstrap coefficient replicates, shape (resamples, len(names))."""
    dropped: tuple[str, ...]
    """Candidate features the data could not identify (their cost is taken as 0)."""
    rows: int
    residual_rms_ms: float
    """Gap-weighted root mean square of the per-request residuals."""
    residual_rel: float
    """The same over the gap-weighted mean chunk gap."""
    methods: tuple[str, ...] = field(default=())
    narrow_below: float = 0.0
    """The slower kernel path's row threshold the fit chose; 0: none (``select_narrow_below``)."""

    def linear(self, method: str, k: int) -> LinearStep:
        """The law at one method and k, as five numbers (what the simulation evaluates per step)."""
        coef = self.coefficients()

        def c(name: str) -> float:
            return coef.get(name, 0.0)

        m = method
        return LinearStep(
            fixed_ms=c("step") + c(f"{m}:step") + c(f"{m}:draft_pass") * k,
            per_decode_seq_ms=c("decode_seq"),
            per_prefill_token_ms=c("prefill_token") + c(f"{m}:draft_prefill_token"),
            per_context_token_ms=c("context_ktoken") / 1000.0,
            per_draft_token_ms=c(f"{m}:draft_token"),
            narrow_below_rows=self.narrow_below,
            narrow_fixed_ms=c("narrow_step"),
            narrow_per_row_ms=c("narrow_row"),
        )

    def design(self, batches: Sequence[StepBatch]) -> FloatArray:
        return design(batches, self.names, self.narrow_below)

    def step_ms(self, batch: StepBatch) -> float:
        return float(self.design([batch])[0] @ self.coef_ms)

    def mean_step_ms(self, batches: Sequence[StepBatch]) -> float:
        return float(np.mean(self.design(batches) @ self.coef_ms)) if batches else 0.0

    def replicate_scales(self, batches: Sequence[StepBatch]) -> FloatArray:
        """Per bootstrap replicate, its mean step time over ``batches`` relative to the point law's."""
        if not batches or self.replicates.size == 0:
            return np.ones(1)
        x = self.design(batches)
        point = float(np.mean(x @ self.coef_ms))
        if point <= 0:
            return np.ones(1)
        return np.asarray(np.mean(x @ self.replicates.T, axis=0) / point, dtype=np.float64)

    def coefficients(self) -> dict[str, float]:
        out = {name: float(c) for name, c in zip(self.names, self.coef_ms, strict=True)}
        return out | dict.fromkeys(self.dropped, 0.0)


def identifiable(x: FloatArray, names: Sequence[str]) -> tuple[list[int], list[str]]:
    """Indices of the columns kept in order (each not in the span of those before it), and the
    names dropped."""
    kept: list[int] = []
    dropped: list[str] = []
    for j, name in enumerate(names):
        column = x[:, j]
        norm = float(np.linalg.norm(column))
        if norm == 0.0:
            dropped.append(name)
            continue
        if kept:
            basis = x[:, kept]
            coef, *_ = np.linalg.lstsq(basis, column, rcond=None)
            residual = float(np.linalg.norm(column - basis @ coef))
        else:
            residual = norm
        if residual <= COLLINEAR_TOL * norm:
            dropped.append(name)
        else:
            kept.append(j)
    return kept, dropped


def _nnls(x: FloatArray, y: FloatArray, w: FloatArray) -> FloatArray:
    sw = np.sqrt(w)
    coef, _ = nnls(x * sw[:, None], y * sw, maxiter=50 * x.shape[1])
    return np.asarray(coef, dtype=np.float64)


def _weighted_rms(x: FloatArray, y: FloatArray, w: FloatArray, coef: FloatArray) -> float:
    residual = y - x @ coef
    return float(np.sqrt(np.average(residual ** 2, weights=w)))


def _design(observations: Sequence[StepObservation],
            narrow_below: float) -> tuple[FloatArray, tuple[str, ...], list[str]]:
    """The identifiable columns of the observations' design at one threshold, their names and the
    names dropped."""
    methods = tuple(sorted({o.batch.method for o in observations}))
    candidates = candidate_features(methods, narrow_below)
    x_all = design([o.batch for o in observations], candidates, narrow_below)
    kept, dropped = identifiable(x_all, candidates)
    return x_all[:, kept], tuple(candidates[j] for j in kept), dropped


def select_narrow_below(observations: Sequence[StepObservation]) -> float:
    """The slower kernel path's row threshold the data support: the candidate whose point fit has
    the lowest Bayesian information criterion, ``n ln(weighted residual variance) + p ln(n)`` over
    the n requests with p identifiable features, when that is ``NARROW_MIN_BIC_GAIN`` below the plain
    law's; else none (0)."""
    y = np.array([o.gap_ms for o in observations], dtype=np.float64)
    w = np.array([float(o.gaps) for o in observations], dtype=np.float64)
    n = len(observations)

    def bic(narrow_below: float) -> float:
        x, names, _ = _design(observations, narrow_below)
        rms = _weighted_rms(x, y, w, _nnls(x, y, w))
        return float(n * np.log(max(rms, 1e-12) ** 2) + len(names) * np.log(n))

    plain = bic(0.0)
    scored = [(bic(rows + 0.5), rows + 0.5) for rows in NARROW_CANDIDATES]
    best_bic, best = min(scored) if scored else (np.inf, 0.0)
    return best if best_bic <= plain - NARROW_MIN_BIC_GAIN else 0.0


def fit_step_law(
    observations: Sequence[StepObservation], rng: np.random.Generator, resamples: int = 200,
    narrow_below: float | None = None,
) -> StepLaw:
    """Non-negative least squares over identifiable features, with a bootstrap over requests;
    ``narrow_below``: the kernel regime's row threshold, chosen from the data when None."""
    if not observations:
        raise ValueError("no chunk gaps to fit a step law on")
    methods = tuple(sorted({o.batch.method for o in observations}))
    if narrow_below is None:
        narrow_below = select_narrow_below(observations)
    x, names, dropped = _design(observations, narrow_below)
    y = np.array([o.gap_ms for o in observations], dtype=np.float64)
    w = np.array([float(o.gaps) for o in observations], dtype=np.float64)
    coef = _nnls(x, y, w)
    rms = _weighted_rms(x, y, w, coef)
    mean_gap = float(np.average(y, weights=w))
    rel = rms / mean_gap if mean_gap > 0 else float("nan")
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(observations):
        groups.setdefault(o.group, []).append(i)
    members = [np.array(v) for v in groups.values()]
    replicates = np.empty((resamples, len(names)))
    for r in range(resamples):
        idx = np.concatenate([rng.choice(m, size=m.size, replace=True) for m in members])
        replicates[r] = _nnls(x[idx], y[idx], w[idx])
    return StepLaw(names=names, coef_ms=coef, replicates=replicates, dropped=tuple(dropped), rows=len(observations),
                   residual_rms_ms=rms, residual_rel=rel, methods=methods, narrow_below=narrow_below)
