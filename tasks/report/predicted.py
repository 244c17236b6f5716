"""The report's "Measured and predicted" view (issue 17): per arm and prompt class, the measured
cells as points with their bootstrap intervals beside the performance model's curves, calibrated on
this sweep, across concurrency and, for speculative arms, across k.

Every predicted figure is labelled PREDICTED wherever it is shown. Nothing that makes a decision,
verdict, gate, noise floor or k policy imports this module or the model: those read measured cells
only (docs/performance-model.md, "Measured and predicted in the report").
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specfleet.contract import CellIdentity, arm_plans, load_label
from specfleet.errors import InputError
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.predict import QUICK_REQUESTS, PredictionQuery, Predictor
from specfleet.perfmodel.prediction import PREDICTED_LABEL, Prediction
from specfleet.stats import bootstrap as bs
from specfleet.stats.samples import CellSample
from specfleet_tasks.report import fmt
from specfleet_tasks.report.tables import Column
from specfleet_tasks.store.sweep import StoredSweep

CURVE_REQUESTS = QUICK_REQUESTS
"""Requests simulated per predicted point (``specfleet predict`` simulates 256): keeps the view's
cost modest; the interval's slow and fast runs use the same count."""


@dataclass(frozen=True)
class MeasuredPoint:
    """One usable measured cell: its stored SLO-qualified tokens/s per replica, with the
    percentile-bootstrap interval over its requests that a decision resamples one cell with."""

    identity: CellIdentity
    qualified_tokens_per_s: bs.Interval


@dataclass(frozen=True)
class PredictedCurve:
    """The model's curve for one arm in one prompt class, beside the measured cells on it: across
    concurrency at the arm's k (``arm`` an arm at one k, ``draft-k2``), or across k at one measured
    concurrency (``arm`` a config arm, ``draft``)."""

    arm: str
    prompt_class: str
    across: Literal["concurrency", "k"]
    at: str
    """What the curve holds fixed: ``k=2`` (``baseline`` for it), or ``c4``."""
    predicted: list[Prediction]
    measured: list[MeasuredPoint]

    @property
    def title(self) -> str:
        return f"{self.arm} / {self.prompt_class}" + (f" / {self.at}" if self.across == "k" else "")


@dataclass(frozen=True)
class PredictedView:
    """The section: measured cells, the predicted curves through them, and what could not be predicted."""

    calibrated_on: str
    sampling: str
    confidence: float
    """Of the measured cells' intervals (the analysis's, as the decisions use)."""
    requests_per_point: int
    measured: list[MeasuredPoint]
    across_concurrency: list[PredictedCurve]
    across_k: list[PredictedCurve]
    predictions: list[Prediction]
    """Every predicted point once: by prompt class and arm, then concurrency and k."""
    missing: list[str]
    """One line per part the model could not predict, and why."""
    notes: list[str]


def concurrency_grid(measured: Sequence[int]) -> list[int]:
    """The measured concurrencies, the rounded geometric midpoint of each neighbouring pair, and one
    step beyond the largest (twice it): 1 and 4 give 1, 2, 4, 8."""
    values = sorted(set(measured))
    middles = {round(math.sqrt(a * b)) for a, b in zip(values, values[1:], strict=False)}
    return sorted({*values, *middles, 2 * values[-1]}) if values else []


def measured_points(sweep: StoredSweep, sampling: str) -> list[MeasuredPoint]:
    """The usable closed-loop cells at ``sampling``, each with its own interval (never pooled)."""
    analysis = sweep.config.analysis
    rng = np.random.default_rng(analysis.seed)
    order = {p.arm: i for i, p in enumerate(arm_plans(sweep.config))}
    cells = sorted((c for c in sweep.cells if c.usable and c.identity.concurrency is not None
                    and c.identity.sampling == sampling),
                   key=lambda c: (order[c.identity.arm], c.identity.prompt_class, c.identity.load_value,
                                  c.identity.phase != "main", c.identity.repeat))
    out = []
    for cell in cells:
        tps = cell.throughput.qualified_tokens_per_s
        if tps is None:
            continue
        records = sweep.records.get(cell.key)
        if records:
            sample = CellSample.from_records(cell, records, sweep.config.slo)
            replicates = tps * bs.rate_replicates(sample.qualified_tokens, sample.durations_s, rng,
                                                  analysis.bootstrap_resamples)
            interval = bs.percentile_interval(tps, replicates, analysis.confidence, "requests")
        else:
            interval = bs.Interval(estimate=tps, low=None, high=None, confidence=None, basis="requests", resamples=0)
        out.append(MeasuredPoint(cell.identity, interval))
    return out


@dataclass
class _Points:
    """Predicts each point once: a point on a concurrency curve and on a k curve is one prediction."""

    predictor: Predictor
    sampling: str
    seed: int
    made: dict[tuple[str, int | None, str, int], Prediction] = field(default_factory=dict)

    def at(self, arm: str, k: int | None, prompt_class: str, concurrency: int) -> Prediction:
        key = (arm, k, prompt_class, concurrency)
        if key not in self.made:
            self.made[key] = self.predictor.predict(PredictionQuery(
                arm=arm, k=k, prompt_class=prompt_class, concurrency=concurrency, sampling=self.sampling,
                requests=CURVE_REQUESTS, seed=self.seed))
        return self.made[key]


def _arm_curves(points: _Points, cal: Calibration, arm: str, prompt_class: str,
                measured: Sequence[MeasuredPoint]) -> tuple[list[PredictedCurve], list[PredictedCurve]]:
    """One config arm in one class: a concurrency curve per k it was swept at, and (speculative arms)
    a k curve from 1 to one past the largest measured k at each measured concurrency."""
    plans = [p for p in arm_plans(cal.config) if p.spec_name == arm]
    names = {p.arm for p in plans}
    grid = concurrency_grid(cal.concurrency)
    by_c = [PredictedCurve(plan.arm, prompt_class, "concurrency", "baseline" if plan.k is None else f"k={plan.k}",
                           [points.at(arm, plan.k, prompt_class, c) for c in grid],
                           [m for m in measured if m.identity.arm == plan.arm]) for plan in plans]
    measured_k = cal.measured_k.get(arm, ())
    if not measured_k:
        return by_c, []
    ks = range(1, max(measured_k) + 2)
    by_k = [PredictedCurve(arm, prompt_class, "k", load_label("concurrency", c),
                           [points.at(arm, k, prompt_class, c) for k in ks],
                           [m for m in measured if m.identity.arm in names and m.identity.concurrency == c])
            for c in cal.concurrency]
    return by_c, by_k


def predicted_view(sweep: StoredSweep) -> PredictedView:
    """Calibrate the model on the sweep and predict its curves at the sweep's first sampling mode."""
    config = sweep.config
    sampling, seed = config.sampling[0].name, config.analysis.seed
    notes = []
    if len(config.sampling) > 1:
        notes.append(f"drawn at sampling {sampling} only; specfleet predict --sampling predicts "
                     f"{', '.join(s.name for s in config.sampling[1:])}")
    if config.load.rates_per_s:
        notes.append("open-loop rates are not drawn: specfleet predict --rate predicts one")
    measured = measured_points(sweep, sampling)

    def view(missing: list[str], curves: Sequence[tuple[list[PredictedCurve], list[PredictedCurve]]] = (),
             more_notes: Sequence[str] = ()) -> PredictedView:
        predictions = []
        for by_c, by_k in curves:
            unique = {id(p): p for curve in (*by_c, *by_k) for p in curve.predicted}
            predictions += sorted(unique.values(), key=lambda p: (p.load_value, p.k or 0))
        return PredictedView(sweep.id, sampling, config.analysis.confidence, CURVE_REQUESTS, measured,
                             [c for by_c, _ in curves for c in by_c], [c for _, by_k in curves for c in by_k],
                             predictions, missing, [*notes, *more_notes])

    try:
        cal = calibrate(sweep.id, config, sweep.cells, sweep.records, seed=seed)
    except InputError as error:
        return view([f"no predicted curve: the performance model could not be calibrated: {error}"])
    if not cal.concurrency:
        return view(["no predicted curve: the sweep has no usable closed-loop cell"])
    points = _Points(Predictor(cal), sampling, seed)
    curves, missing = [], []
    for pc in (p.name for p in config.prompt_classes):
        for arm in (a.name for a in config.arms):
            try:
                curves.append(_arm_curves(points, cal, arm, pc, [m for m in measured if m.identity.prompt_class == pc]))
            except InputError as error:
                missing.append(f"{arm} on {pc}: no predicted curve: {error}")
    return view(missing, curves, [f"calibration: {note}" for note in cal.notes])


def caption(view: PredictedView) -> str:
    """What the section's figures and tables are, shared by the markdown and the HTML report."""
    return (f"Points: the usable measured cells at sampling {view.sampling}, each cell's stored SLO-qualified "
            f"tokens/s per replica with the {view.confidence:.0%} percentile-bootstrap interval over its requests. "
            "Dashed lines, shaded bands and every column headed PREDICTED: predicted by the performance model "
            f"calibrated on this sweep ({view.calibrated_on}), not measured; no decision, verdict, gate, noise floor "
            f"or k policy reads them. Each predicted point simulates {view.requests_per_point} requests (specfleet "
            "predict simulates 256 by default) and its interval spans the model's slow and fast runs. Hollow markers "
            "and an entry under extrapolates mark the points the model extrapolates to, and say what lies outside the "
            "measured range.")


def table_title(view: PredictedView) -> str:
    """The PREDICTED table's title."""
    return f"{PREDICTED_LABEL} (performance model calibrated on {view.calibrated_on})"


def _measured_tps(m: MeasuredPoint) -> str:
    t = m.qualified_tokens_per_s
    return fmt.num_range(t.estimate, t.low, t.high, ".1f")


def _predicted_tps(p: Prediction) -> str:
    b = p.interval.qualified_tokens_per_s
    return fmt.num_range(p.qualified_tokens_per_s, b.low, b.high, ".1f")


MEASURED_COLUMNS: list[Column[MeasuredPoint]] = [
    ("cell", lambda m: m.identity.label), ("k", lambda m: fmt.num(m.identity.k, "d")),
    ("measured SLO-qualified tok/s [CI]", _measured_tps),
]
PREDICTED_COLUMNS: list[Column[Prediction]] = [
    ("arm", lambda p: p.arm), ("class", lambda p: p.prompt_class),
    ("load", lambda p: load_label(p.load_mode, p.load_value)),
    ("PREDICTED SLO-qualified tok/s [interval]", _predicted_tps),
    ("measured cell here", lambda p: "yes" if p.measured_cell else "no"),
    ("extrapolates", lambda p: "; ".join(p.extrapolates) or "no"),
]
"""Every column that holds a predicted figure is headed PREDICTED."""
