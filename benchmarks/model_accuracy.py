"""How good the performance model is on a dense sweep: fit on a subset, predict the rest (issue 17,
"How good it must be").

Without ``--sweep`` it runs the dense calibration sweep (``benchmarks/configs/perfmodel-dense.yaml``)
through the real command, ``specfleet sweep CONFIG --results-dir DIR``, tracking to a sqlite file
under DIR, and uses the sweep it made (a sweep that exits 3, some cells failed, is used as far as
it was measured). Then it fits the model on a subset of the measured cells (default: concurrency 1
and 4; k 2 and 4 for every speculative arm; the baseline at the fitted loads, both phases),
predicts every usable held-out cell (default: concurrency 2 for every arm, draft k 1 and 3 at
every concurrency), and prints, against the measured held-out cells:

- MAPE of TPOT p50, output tokens/s and SLO-qualified tokens/s;
- the share of held-out speculative cells whose speedup against the baseline is on the right
  side of 1, in SLO-qualified tokens/s (the decisions' basis), over the decisive cells (the
  sweep's own interval for the cell excludes 1) apart from the undecided ones (it holds 1: there
  no predictor can be right or wrong);
- the error of the crossover concurrency (the first grid level where the speedup is at most 1;
  "none" one step past the grid) in grid steps, per arm at one k and prompt class, over the groups
  whose measured crossing is decisive (every level up to it has an interval that excludes 1) apart
  from the undecided ones, as for the sign;
- the share of (arm, class, concurrency) groups whose predicted best k is within the measured
  tolerance of the measured best (the sweep's noise floor there, or 5 % where it has none);

each for the model and three plain predictors side by side (the nearest measured cell of the fitted
subset; linear interpolation between the fitted neighbours in k and concurrency; the seed's closed
form, ``specfleet/economics/theory.py``, fed with the fitted cells' acceptance), then a markdown
table with the goals, and writes it and every row to ``SWEEP_DIR/model_accuracy.json``.

``--config benchmarks/configs/perfmodel-dense-wide.yaml`` runs it on the wide target
(``tasks/fixtures/wide.py``: the fixture target's function at a 300 MB step, so the draft is cheap
next to it and the speedups clear the CPU's noise). The model predicts each held-out cell as the
sweep measured it: cells of the sweep's requests per cell, each from an idle engine
(``PredictionQuery.cell_requests``).

Only held-out points are scored, everywhere: a crossover group (an arm at one k, one class) or a
best-k group (an arm, one class, one concurrency) is scored only when every point in it is held
out; fitted points are inputs only (issue 32: scoring groups that hold fitted points let the
nearest cell echo its own training data).

    python -m benchmarks.model_accuracy [--sweep SWEEP_ID_OR_DIR] [--results-dir results]
        [--config benchmarks/configs/perfmodel-dense.yaml] [--fit-loads 1,4] [--fit-ks 2,4]
        [--fit-ks ARM=K,K] [--requests 1024] [--seed N]
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.results_record import cpu_model, write_result
from specfleet.contract import ArmSpec, CellIdentity, SweepConfig, arm_plans, load_label
from specfleet.economics.theory import ModelledAlpha, implied_alpha, net_speedup
from specfleet.errors import InputError
from specfleet.measure.acceptance import counter_mean_acceptance_length
from specfleet.perfmodel.accuracy import (
    Score,
    best_k,
    best_k_right,
    better,
    crossover_decisive,
    crossover_error,
    crossover_index,
    mape,
    mean_steps,
    share,
    sign_right,
)
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.predict import PredictionQuery, predict
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.noise import baseline_noise, noise_for
from specfleet.verdicts.cell import Decision
from specfleet_cli.report import DEFAULT_DRAFT_COST_RATIO
from specfleet_tasks.store.sweep import StoredSweep

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "benchmarks" / "configs" / "perfmodel-dense.yaml"
OUTPUT_FILE = "model_accuracy.json"
TRACKING_DB = "model_accuracy_mlflow.db"
FAILED_CELLS_EXIT = 3
DEFAULT_TOLERANCE = 0.05
"""The best-k tolerance where the sweep has no noise floor for the configuration (no repeated baseline)."""
MODEL_FREE_METHODS = frozenset({"ngram"})
"""Drafters without a model: the closed form takes their draft cost ratio c as 0."""
PREDICTORS = ("model", "nearest", "interpolation", "closed_form")
PREDICTOR_NAMES = {"model": "performance model", "nearest": "nearest measured cell",
                   "interpolation": "linear interpolation (fitted neighbours)",
                   "closed_form": "closed form (seed, measured acceptance)"}
FIGURES = ("tpot_p50", "output_tokens_per_s", "qualified_tokens_per_s")
SWEEP_ID = re.compile(r"sweep id: (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True, order=True)
class Point:
    """One configuration of a closed-loop sweep: arm (its name in the config) at k (0 for the
    baseline), prompt class, concurrency, sampling; its repeats and baseline phases are pooled."""

    arm: str
    k: int
    prompt_class: str
    concurrency: int
    sampling: str

    @property
    def label(self) -> str:
        arm = self.arm if not self.k else f"{self.arm}-k{self.k}"
        load = load_label("concurrency", self.concurrency)
        return f"{arm} / {self.prompt_class} / {load} / {self.sampling}"


@dataclass(frozen=True)
class Figures:
    """A cell's figures as measured or as one predictor has them; None where it has none."""

    tpot_p50: float | None = None
    output_tokens_per_s: float | None = None
    qualified_tokens_per_s: float | None = None
    speedup: float | None = None
    """SLO-qualified tokens/s over the baseline's at the same class, load and sampling."""

    def get(self, figure: str) -> float | None:
        value: float | None = getattr(self, figure)
        return value


NONE = Figures()
Predictor = Callable[[Point], Figures]


@dataclass(frozen=True)
class FitSubset:
    """Which configurations the model is fitted on: a fitted load, and for a speculative arm a fitted k."""

    loads: frozenset[int]
    ks: frozenset[int]
    """The fitted k of every speculative arm without its own entry in ``arm_ks``."""
    arm_ks: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def ks_for(self, arm: str) -> frozenset[int]:
        return self.arm_ks.get(arm, self.ks)

    def fits(self, point: Point) -> bool:
        return point.concurrency in self.loads and (point.k == 0 or point.k in self.ks_for(point.arm))

    def describe(self, arms: Sequence[str]) -> str:
        """``arms``: the speculative arms of the config."""
        parts = [f"{arm} k {_ints(self.ks_for(arm))}" for arm in arms]
        return (f"concurrency {_ints(self.loads)}; {', '.join(parts) or 'no speculative arm'}; the baseline at "
                "the fitted loads (both phases)")


def _ints(values: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(values))) or "none"


def parse_ints(text: str) -> frozenset[int]:
    """``"1,4"`` -> {1, 4}; ``InputError`` for anything but positive integers."""
    try:
        values = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise InputError(f"expected comma-separated positive integers (got {text!r})") from err
    if not values or min(values) < 1:
        raise InputError(f"expected comma-separated positive integers (got {text!r})")
    return values


def parse_fit(loads: str, ks: Sequence[str] | None) -> FitSubset:
    """``--fit-loads 1,4`` and ``--fit-ks`` entries: ``2,4`` (every speculative arm) or ``ARM=2,4``
    (that arm; repeatable). Without a plain entry the other arms are fitted at k 2 and 4."""
    plain: frozenset[int] = frozenset({2, 4})
    per_arm: dict[str, frozenset[int]] = {}
    for entry in ks or ():
        arm, sep, values = entry.partition("=")
        if sep:
            per_arm[arm.strip()] = parse_ints(values)
        else:
            plain = parse_ints(entry)
    return FitSubset(loads=parse_ints(loads), ks=plain, arm_ks=per_arm)


def parse_sweep_id(output: str) -> str | None:
    """The last ``sweep id: ID`` a sweep printed (colour codes stripped), or None."""
    found = SWEEP_ID.findall(ANSI.sub("", output))
    return found[-1] if found else None


def point_of(ident: CellIdentity, spec_names: Mapping[str, str]) -> Point | None:
    """The configuration of a cell; None for a cell at a rate (open loop) or of an arm not in the config."""
    if ident.load_mode != "concurrency" or ident.arm not in spec_names:
        return None
    return Point(spec_names[ident.arm], ident.num_speculative_tokens, ident.prompt_class, int(ident.load_value),
                 ident.sampling)


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _p50(cell: CellResult) -> float | None:
    estimate = cell.tpot_ms.p50
    return None if estimate is None else estimate.value


@dataclass(frozen=True)
class Measured:
    """The usable measured cells by configuration, and their figures: TPOT p50, output and
    SLO-qualified tokens/s are the mean over every usable run (both baseline phases, all repeats);
    the speedup is the mean SLO-qualified tokens/s of the main-phase runs over the baseline's
    main-phase mean at the same class, load and sampling, as the decisions compare them (over its
    end-of-sweep runs where no main-phase run is usable: a decision would have no baseline there)."""

    cells: Mapping[Point, Sequence[CellResult]]
    figures: Mapping[Point, Figures]
    acceptance: Mapping[Point, tuple[float, int]]
    """Per speculative configuration with spec-decode counters: (mean acceptance length, drafts), pooled."""
    end_phase_baseline: tuple[Point, ...] = ()
    """Speculative configurations whose baseline had no usable main-phase run: their speedup is over
    the baseline's end-of-sweep runs instead."""


def measure(config: SweepConfig, cells: Sequence[CellResult]) -> Measured:
    spec_names = {p.arm: p.spec_name for p in arm_plans(config)}
    groups: dict[Point, list[CellResult]] = defaultdict(list)
    for cell in cells:
        point = point_of(cell.identity, spec_names)
        if point is not None and cell.usable:
            groups[point].append(cell)

    def main_rate(runs: Sequence[CellResult]) -> float | None:
        return _mean(c.throughput.qualified_tokens_per_s for c in runs if c.identity.phase == "main")

    figures: dict[Point, Figures] = {}
    acceptance: dict[Point, tuple[float, int]] = {}
    end_phase: list[Point] = []
    for point, runs in groups.items():
        speedup = None
        if point.k:
            base_runs = groups.get(replace(point, arm=config.baseline.name, k=0), [])
            base = main_rate(base_runs)
            if base is None and base_runs:
                base = _mean(c.throughput.qualified_tokens_per_s for c in base_runs)
                end_phase.append(point)
            rate = main_rate(runs)
            speedup = rate / base if rate is not None and base else None
            drafts = sum(c.spec_decode.num_drafts for c in runs if c.spec_decode is not None)
            length = counter_mean_acceptance_length(runs)
            if length is not None:
                acceptance[point] = (length, drafts)
        figures[point] = Figures(
            tpot_p50=_mean(_p50(c) for c in runs),
            output_tokens_per_s=_mean(c.throughput.output_tokens_per_s for c in runs),
            qualified_tokens_per_s=_mean(c.throughput.qualified_tokens_per_s for c in runs),
            speedup=speedup)
    return Measured(cells=dict(groups), figures=figures, acceptance=acceptance, end_phase_baseline=tuple(
        sorted(end_phase)))


def nearest_point(point: Point, candidates: Iterable[Point]) -> Point | None:
    """The candidate of the same arm, class and sampling at the nearest k, then the nearest
    concurrency (ties to the smaller k, then the smaller concurrency)."""
    same = [c for c in candidates if (c.arm, c.prompt_class, c.sampling) == (point.arm, point.prompt_class,
                                                                               point.sampling)]
    return min(same, key=lambda c: (abs(c.k - point.k), abs(c.concurrency - point.concurrency), c.k,
                                    c.concurrency), default=None)


def nearest_predictor(fitted: Mapping[Point, Figures]) -> Predictor:
    """Plain predictor (a): the measured figures, speedup included, of the nearest fitted cell."""

    def figures(point: Point) -> Figures:
        near = nearest_point(point, fitted)
        return NONE if near is None else fitted[near]

    return figures


def _bracket(values: Sequence[int], x: int) -> tuple[int, int, float]:
    """The neighbours of ``x`` in sorted ``values`` and x's weight towards the upper one; outside
    their range, the nearest end (weight 0): interpolation, never extrapolation."""
    if x <= values[0]:
        return values[0], values[0], 0.0
    if x >= values[-1]:
        return values[-1], values[-1], 0.0
    hi = next(v for v in values if v >= x)
    lo = max(v for v in values if v <= x)
    return lo, hi, 0.0 if hi == lo else (x - lo) / (hi - lo)


def interpolation_predictor(fitted: Mapping[Point, Figures]) -> Predictor:
    """Plain predictor (b): each figure bilinear between the fitted cells of the same arm, class and
    sampling that bracket the point's k and concurrency (the nearest end outside them); None where a
    corner lacks the figure."""

    def figures(point: Point) -> Figures:
        same = {(p.k, p.concurrency): f for p, f in fitted.items()
                if (p.arm, p.prompt_class, p.sampling) == (point.arm, point.prompt_class, point.sampling)}
        if not same:
            return NONE
        k_lo, k_hi, wk = _bracket(sorted({k for k, _ in same}), point.k)
        c_lo, c_hi, wc = _bracket(sorted({c for _, c in same}), point.concurrency)
        corners = [((k_lo, c_lo), (1 - wk) * (1 - wc)), ((k_lo, c_hi), (1 - wk) * wc),
                   ((k_hi, c_lo), wk * (1 - wc)), ((k_hi, c_hi), wk * wc)]

        def blend(figure: str) -> float | None:
            values = [(same[at].get(figure) if at in same else None, w) for at, w in corners]
            if any(v is None for v, _ in values):
                return None
            return sum(float(v) * w for v, w in values if v is not None)

        return Figures(tpot_p50=blend("tpot_p50"), output_tokens_per_s=blend("output_tokens_per_s"),
                       qualified_tokens_per_s=blend("qualified_tokens_per_s"), speedup=blend("speedup"))

    return figures


@dataclass(frozen=True)
class ClosedForm:
    """Plain predictor (c): the seed's S = E(alpha, k) / (1 + k c) (``specfleet.economics.theory``).

    alpha per arm, class and sampling: the modelled alpha implied by each fitted cell's measured
    mean acceptance length at its k, averaged with the cells' drafts as weights. c: 0 for a drafter
    without a model (ngram); for a draft model, the median over its fitted cells of
    (L / S_measured - 1) / k, the c that makes the formula give the measured speedup there, or the
    report's default c where no fitted cell has a measured speedup. Throughput is the nearest fitted
    baseline cell's (same class, nearest load) times S; TPOT p50 is the baseline's over S."""

    baseline: str
    fitted: Mapping[Point, Figures]
    alpha: Mapping[tuple[str, str, str], float]
    cost_ratio: Mapping[str, float]
    cost_source: Mapping[str, str]

    def __call__(self, point: Point) -> Figures:
        base_points = [p for p in self.fitted if p.arm == self.baseline]
        near = nearest_point(replace(point, arm=self.baseline, k=0), base_points)
        if near is None:
            return NONE
        base = self.fitted[near]
        if not point.k:
            return replace(base, speedup=None)
        alpha = self.alpha.get((point.arm, point.prompt_class, point.sampling))
        c = self.cost_ratio.get(point.arm)
        if alpha is None or c is None:
            return NONE
        s = net_speedup(ModelledAlpha(alpha), point.k, c)

        def times(value: float | None) -> float | None:
            return None if value is None else value * s

        return Figures(tpot_p50=None if base.tpot_p50 is None else base.tpot_p50 / s,
                       output_tokens_per_s=times(base.output_tokens_per_s),
                       qualified_tokens_per_s=times(base.qualified_tokens_per_s), speedup=s)


def closed_form(config: SweepConfig, measured: Measured, fit: FitSubset) -> ClosedForm:
    fitted = {p: f for p, f in measured.figures.items() if fit.fits(p)}
    weighted: dict[tuple[str, str, str], list[tuple[float, int]]] = defaultdict(list)
    for point, (length, drafts) in measured.acceptance.items():
        if fit.fits(point) and (a := implied_alpha(length, point.k)) is not None:
            weighted[(point.arm, point.prompt_class, point.sampling)].append((a, drafts))
    alpha = {key: sum(a * n for a, n in pairs) / sum(n for _, n in pairs) for key, pairs in weighted.items()}
    cost: dict[str, float] = {}
    source: dict[str, str] = {}
    for spec in config.arms:
        if spec.method == "baseline":
            continue
        if spec.method in MODEL_FREE_METHODS:
            cost[spec.name], source[spec.name] = 0.0, f"0: {spec.method} runs no draft model"
            continue
        ratios = [max(0.0, (length / s - 1.0) / p.k) for p, (length, _) in measured.acceptance.items()
                  if p.arm == spec.name and fit.fits(p) and (s := measured.figures[p].speedup)]
        if ratios:
            cost[spec.name] = statistics.median(ratios)
            source[spec.name] = (f"{cost[spec.name]:.3f}: the median over {len(ratios)} fitted cells of the c "
                                 "that gives their measured speedup")
        else:
            cost[spec.name] = DEFAULT_DRAFT_COST_RATIO
            source[spec.name] = f"{DEFAULT_DRAFT_COST_RATIO}: the report's default (no fitted cell had a speedup)"
    return ClosedForm(config.baseline.name, fitted, alpha, cost, source)


class ModelPredictor:
    """The performance model calibrated on the fitted subset; a cell it cannot predict (``InputError``,
    for example no fitted cell of the arm on the class) has no figures, and the reason is kept."""

    def __init__(self, calibration: Calibration, requests: int, seed: int, cell_requests: int | None = None) -> None:
        self.calibration = calibration
        self.requests = requests
        self.seed = seed
        self.cell_requests = cell_requests
        """The sweep's requests per cell: each prediction is of a cell as the sweep measured it."""
        self.cache: dict[Point, Figures] = {}
        self.errors: dict[Point, str] = {}
        self.extrapolates: dict[Point, list[str]] = {}

    def __call__(self, point: Point) -> Figures:
        if point not in self.cache:
            try:
                got = predict(self.calibration, PredictionQuery(
                    arm=point.arm, k=point.k or None, prompt_class=point.prompt_class, concurrency=point.concurrency,
                    sampling=point.sampling, requests=self.requests, seed=self.seed,
                    cell_requests=self.cell_requests))
            except InputError as err:
                self.errors[point] = str(err)
                self.cache[point] = NONE
            else:
                self.extrapolates[point] = list(got.extrapolates)
                self.cache[point] = Figures(tpot_p50=got.tpot_ms.p50, output_tokens_per_s=got.output_tokens_per_s,
                                            qualified_tokens_per_s=got.qualified_tokens_per_s, speedup=got.speedup)
        return self.cache[point]


@dataclass(frozen=True)
class Goal:
    key: str
    title: str
    lower_is_better: bool
    threshold: float | None
    scored: bool = True
    """False: shown, with no goal (where no predictor can be right or wrong)."""

    def text(self) -> str:
        if not self.scored:
            return "none"
        bound = "" if self.threshold is None else (
            f"<= {100 * self.threshold:.0f} %, " if self.lower_is_better else f">= {100 * self.threshold:.0f} %, ")
        return f"{bound}better than every plain predictor"


GOALS = (
    Goal("tpot_p50", "MAPE of TPOT p50", True, 0.10),
    Goal("output_tokens_per_s", "MAPE of output tokens/s", True, 0.10),
    Goal("qualified_tokens_per_s", "MAPE of SLO-qualified tokens/s", True, None),
    Goal("sign", "speedup sign right on decisive held-out cells (measured interval excludes 1)", False, 0.90),
    Goal("sign_undecided", "speedup sign on undecided held-out cells (measured interval holds 1; no goal)", False,
         None, scored=False),
    Goal("crossover", "crossover concurrency error on decisive groups (grid steps, mean absolute; every measured "
         "level up to the crossing excludes 1)", True, None),
    Goal("crossover_undecided", "crossover concurrency error on undecided groups (a measured level up to the "
         "crossing holds 1; no goal)", True, None, scored=False),
    Goal("best_k", "best k within the measured tolerance", False, 0.80),
)
GOAL_TEXT = ("MAPE of TPOT p50 and of output tokens/s <= 10 %, speedup sign right on >= 90 % of decisive held-out "
             "cells, best k right in >= 80 % of groups, and every scored figure better than each plain predictor "
             "(strictly, or both exact)")
"""``GOALS`` in a sentence, as the benchmark's results record states it."""


def goal_met(goal: Goal, scores: Mapping[str, Score]) -> str:
    model = scores["model"]
    if not goal.scored:
        return "no goal"
    if model.value is None:
        return "n/a (no figure)"
    misses = []
    if goal.threshold is not None and (model.value > goal.threshold if goal.lower_is_better
                                       else model.value < goal.threshold):
        misses.append("misses the bound")
    for name in PREDICTORS[1:]:
        if not better(model, [scores[name]], lower_is_better=goal.lower_is_better):
            misses.append(f"not better than {PREDICTOR_NAMES[name].split(' (')[0]}")
    return "yes" if not misses else "no: " + "; ".join(misses)


def format_score(goal: Goal, score: Score) -> str:
    if score.value is None:
        return "n/a"
    if goal.key.startswith("crossover"):
        return f"{score.value:.2f} (n={score.n})"
    if goal.lower_is_better:
        return f"{100 * score.value:.1f} % (n={score.n})"
    right = round(score.value * score.n)
    return f"{100 * score.value:.0f} % ({right}/{score.n})"


@dataclass
class Evaluation:
    held_out: list[Point]
    scores: dict[str, dict[str, Score]]
    cells: list[dict[str, object]]
    crossover: list[dict[str, object]]
    best_k: list[dict[str, object]]
    notes: list[str]


def _common(rows: Sequence[Point], figure: str, value: Callable[[str, Point, str], float | None],
            truth: Callable[[Point, str], float | None]) -> list[Point]:
    """The rows every predictor has ``figure`` for and whose measured one is known and not 0."""
    return [p for p in rows if truth(p, figure) not in (None, 0)
            and all(value(n, p, figure) is not None for n in PREDICTORS)]


def decisive_points(config: SweepConfig, decisions: Sequence[Decision]) -> dict[Point, bool]:
    """Per speculative configuration the sweep decided, whether its measured speedup interval (this
    comparison's, before the family's correction) excludes 1."""
    spec_names = {p.arm: p.spec_name for p in arm_plans(config)}
    out: dict[Point, bool] = {}
    for d in decisions:
        s, interval = d.slice, d.interval
        if s.load_mode != "concurrency" or s.arm not in spec_names or interval is None:
            continue
        if interval.low is None or interval.high is None:
            continue
        out[Point(spec_names[s.arm], s.k, s.prompt_class, int(s.load_value), s.sampling)] = (
            interval.low > 1.0 or interval.high < 1.0)
    return out


def evaluate(config: SweepConfig, cells: Sequence[CellResult], measured: Measured, fit: FitSubset,
             predictors: Mapping[str, Predictor], decisive: Mapping[Point, bool] | None = None) -> Evaluation:
    """Every figure for every predictor over the usable held-out cells (those ``fit`` does not fit).
    ``decisive``: per speculative configuration, whether its measured interval excludes 1
    (``decisive_points``); a cell not in it is in neither sign figure.

    Each figure is over the cells (or groups) that every predictor and the measurement have it for,
    so the predictors are scored on the same cells; the others are counted in ``left_out``. A
    crossover or best-k group is scored only when every point in it is held out."""
    decisive = decisive or {}
    grid = sorted(config.load.concurrency)
    held_out = sorted(p for p in measured.figures if not fit.fits(p) and p.concurrency in grid)
    notes: list[str] = []

    def value(name: str, point: Point, figure: str) -> float | None:
        return predictors[name](point).get(figure)

    def truth(point: Point, figure: str) -> float | None:
        return measured.figures[point].get(figure) if point in measured.figures else None

    scores: dict[str, dict[str, Score]] = {}
    for figure in FIGURES:
        rows = _common(held_out, figure, value, truth)
        scores[figure] = {n: replace(mape((value(n, p, figure), truth(p, figure)) for p in rows),
                                     left_out=len(held_out) - len(rows)) for n in PREDICTORS}
    speculative = [p for p in held_out if p.k]
    for key, wanted in (("sign", True), ("sign_undecided", False)):
        members = [p for p in speculative if decisive.get(p) is wanted]
        rows = [p for p in members if truth(p, "speedup") is not None
                and all(value(n, p, "speedup") is not None for n in PREDICTORS)]
        scores[key] = {n: replace(share([sign_right(value(n, p, "speedup"), truth(p, "speedup")) for p in rows]),
                                  left_out=len(members) - len(rows)) for n in PREDICTORS}
    held = set(held_out)

    cross_rows: list[dict[str, object]] = []
    errors: dict[bool, dict[str, list[int | None]]] = {d: {n: [] for n in PREDICTORS} for d in (True, False)}
    groups = sorted({(p.arm, p.k, p.prompt_class, p.sampling) for p in speculative})
    for arm, k, klass, sampling in groups:
        levels = [Point(arm, k, klass, c, sampling) for c in grid]
        if not held.issuperset(levels):  # a fitted point is an input, never scored
            continue
        truth_seq = [truth(p, "speedup") for p in levels]
        seqs = {n: [value(n, p, "speedup") for p in levels] for n in PREDICTORS}
        got = {n: crossover_error(seqs[n], truth_seq) for n in PREDICTORS}
        known = all(e is not None for e in got.values())
        decided = crossover_decisive(truth_seq, [decisive.get(p) for p in levels])
        for n in PREDICTORS:
            errors[decided][n].append(got[n] if known else None)
        cross_rows.append({
            "group": f"{arm}-k{k} / {klass} / {sampling}", "measured": _crossing(crossover_index(truth_seq), grid),
            **{n: _crossing(crossover_index(seqs[n]), grid) for n in PREDICTORS},
            **{f"{n}_steps": got[n] for n in PREDICTORS}, "scored": known, "decisive": decided,
            "measured_speedups": truth_seq, **{f"{n}_speedups": seqs[n] for n in PREDICTORS}})
    scores["crossover"] = {n: mean_steps(errors[True][n]) for n in PREDICTORS}
    scores["crossover_undecided"] = {n: mean_steps(errors[False][n]) for n in PREDICTORS}

    floors = baseline_noise(cells)
    multi_k = {s.name: sorted(s.k) for s in config.arms if s.method != "baseline" and len(s.k) > 1}
    best_rows: list[dict[str, object]] = []
    outcomes: dict[str, list[bool | None]] = {n: [] for n in PREDICTORS}
    pairs = sorted({(p.arm, p.prompt_class, p.concurrency, p.sampling) for p in speculative if p.arm in multi_k})
    for arm, klass, conc, sampling in pairs:
        points = {k: Point(arm, k, klass, conc, sampling) for k in multi_k[arm]}
        if not held.issuperset(points.values()):
            continue
        truth_map = {k: truth(p, "speedup") for k, p in points.items()}
        floor, why = noise_for((klass, "concurrency", float(conc), sampling), floors)
        tolerance, source = (floor, why) if floor is not None else (DEFAULT_TOLERANCE, f"5 % default ({why})")
        maps = {n: {k: value(n, p, "speedup") for k, p in points.items()} for n in PREDICTORS}
        got_right = {n: best_k_right(maps[n], truth_map, tolerance) for n in PREDICTORS}
        known = all(r is not None for r in got_right.values())
        for n in PREDICTORS:
            outcomes[n].append(got_right[n] if known else None)
        best_rows.append({
            "group": f"{arm} / {klass} / c{conc} / {sampling}", "measured_best_k": best_k(truth_map),
            **{f"{n}_best_k": best_k(maps[n]) for n in PREDICTORS}, **{f"{n}_right": got_right[n] for n in PREDICTORS},
            "tolerance": tolerance, "tolerance_source": source, "scored": known,
            "measured_speedups": truth_map, **{f"{n}_speedups": maps[n] for n in PREDICTORS}})
    scores["best_k"] = {n: share(outcomes[n]) for n in PREDICTORS}

    cell_rows = []
    for p in held_out:
        row: dict[str, object] = {"cell": p.label, "runs": len(measured.cells[p]),
                                  "measured": asdict(measured.figures[p])}
        for n in PREDICTORS:
            row[n] = asdict(predictors[n](p))
        cell_rows.append(row)
    if not held_out:
        notes.append("no usable held-out cell: every measured cell is in the fitted subset")
    return Evaluation(held_out, scores, cell_rows, cross_rows, best_rows, notes)


def _crossing(index: int | None, grid: Sequence[int]) -> str:
    if index is None:
        return "unknown"
    return "none" if index >= len(grid) else load_label("concurrency", grid[index])


def machine() -> dict[str, object]:
    return {"cores": os.cpu_count(), "processor": platform.processor() or None, "cpu_model": cpu_model(),
            "platform": platform.platform()}


def markdown_table(evaluation: Evaluation) -> str:
    lines = ["| figure | " + " | ".join(PREDICTOR_NAMES[n] for n in PREDICTORS) + " | goal | goal met? |",
             "| --- | " + " | ".join("---" for _ in PREDICTORS) + " | --- | --- |"]
    for goal in GOALS:
        scores = evaluation.scores[goal.key]
        cells = " | ".join(format_score(goal, scores[n]) for n in PREDICTORS)
        lines.append(f"| {goal.title} | {cells} | {goal.text()} | {goal_met(goal, scores)} |")
    return "\n".join(lines)


def _fmt(value: object) -> str:
    return "n/a" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def print_details(evaluation: Evaluation, console: Console) -> None:
    table = Table(title="held-out cells: measured | " + " | ".join(PREDICTORS))
    table.add_column("cell")
    for figure in (*FIGURES, "speedup"):
        table.add_column(figure, justify="right")
    for row in evaluation.cells:
        sources = [row["measured"], *(row[n] for n in PREDICTORS)]
        table.add_row(str(row["cell"]), *(" | ".join(_fmt(s[figure]) for s in sources if isinstance(s, dict))
                                          for figure in (*FIGURES, "speedup")))
    console.print(table)
    cross = Table(title="crossover concurrency (first level with speedup <= 1; none: past the grid)")
    for column in ("group", "measured", *PREDICTORS, "scored", "decisive"):
        cross.add_column(column)
    for row in evaluation.crossover:
        cross.add_row(*(_fmt(row[c]) for c in ("group", "measured", *PREDICTORS, "scored", "decisive")))
    console.print(cross)
    best = Table(title="best k (right: within the tolerance, a fraction of the measured best speedup)")
    for column in ("group", "measured_best_k", *(f"{n}_best_k" for n in PREDICTORS),
                   *(f"{n}_right" for n in PREDICTORS), "tolerance", "tolerance_source"):
        best.add_column(column)
    for row in evaluation.best_k:
        best.add_row(*(_fmt(row[c]) for c in ("group", "measured_best_k", *(f"{n}_best_k" for n in PREDICTORS),
                                              *(f"{n}_right" for n in PREDICTORS), "tolerance", "tolerance_source")))
    console.print(best)


def run_sweep(config: Path, results_dir: Path) -> tuple[str | None, int]:
    """``specfleet sweep CONFIG`` as a subprocess, its output passed through; (sweep id, exit code)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{(results_dir / TRACKING_DB).resolve()}"
    command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", "sweep", str(config.resolve()),
               "--results-dir", str(results_dir.resolve()), "--tracking-uri", uri]
    path = os.pathsep.join([str(REPO_ROOT), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])
    print("running: " + " ".join(command[3:]), flush=True)
    lines: list[str] = []
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "PYTHONPATH": path}) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    return parse_sweep_id("".join(lines)), proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sweep", help="a stored sweep (id under --results-dir, or its folder); default: run one")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the sweep to run without --sweep")
    parser.add_argument("--fit-loads", default="1,4", help="concurrency levels to fit on (default 1,4)")
    parser.add_argument("--fit-ks", action="append", metavar="[ARM=]K,K",
                        help="k to fit on: for every speculative arm (K,K) or one arm (ARM=K,K); repeatable; "
                             "default 2,4")
    parser.add_argument("--requests", type=int, default=1024, help="requests simulated per prediction (as cells of "
                        "the sweep's requests per cell, each from an idle engine)")
    parser.add_argument("--seed", type=int, help="the model's seed (calibration bootstrap, jitter and simulation); "
                        "default: the config's analysis.seed")
    parser.add_argument("--synthetic", metavar="SWEEP", help="a stored synthetic calibration sweep "
                        "(benchmarks/configs/perfmodel-synthetic.yaml) whose SYNTHETIC cells the model is also "
                        "fitted on (step cost only; never scored, never an acceptance source)")
    args = parser.parse_args(argv)
    console = Console(width=200)
    try:
        fit = parse_fit(args.fit_loads, args.fit_ks)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sweep = args.sweep
    if sweep is None:
        sweep, code = run_sweep(args.config, args.results_dir)
        if code not in (0, FAILED_CELLS_EXIT):
            print(f"error: the sweep exited {code}", file=sys.stderr)
            return code
        if sweep is None:
            print("error: the sweep printed no 'sweep id:'", file=sys.stderr)
            return 1
        if code == FAILED_CELLS_EXIT:
            print(f"sweep {sweep}: some cells failed (exit 3); using what was measured", flush=True)
    try:
        data = StoredSweep.find(sweep, args.results_dir)
        decisions = data.summary.decisions if data.summary is not None else []
        extra = None if args.synthetic is None else StoredSweep.find(args.synthetic, args.results_dir)
        return report(data.id, data.dir, data.config, data.cells, data.records, fit, args.requests, console,
                      decisions=decisions, synthetic=None if extra is None else SyntheticCells.of(extra),
                      seed=args.seed)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


LIFECYCLE = {"host", "api_key_env", "ca_bundle", "startup_timeout_s", "stop_grace_s", "max_restarts"}
"""Engine settings that start, reach or stop a server and leave its steps' cost as it is: a synthetic
sweep may differ from the dense one in these."""


@dataclass(frozen=True)
class SyntheticCells:
    """A synthetic calibration sweep's SYNTHETIC cells and arms: step-cost inputs to the fit only."""

    sweep_id: str
    config: SweepConfig
    cells: tuple[CellResult, ...]
    records: Mapping[str, Sequence[RequestRecord]]

    @classmethod
    def of(cls, sweep: StoredSweep) -> "SyntheticCells":
        cells = tuple(c for c in sweep.cells if c.identity.synthetic)
        if not cells:
            raise InputError(f"--synthetic {sweep.id}: the sweep has no cell measured at synthetic acceptance")
        return cls(sweep.id, sweep.config, cells, {c.key: sweep.records.get(c.key, []) for c in cells})

    @property
    def arms(self) -> tuple[ArmSpec, ...]:
        return tuple(a for a in self.config.arms if a.synthetic)

    def joined(self, config: SweepConfig) -> SweepConfig:
        """The dense sweep's config with the synthetic arms added: only where both ran the same
        models on the same engine settings, since the step costs fitted from one are the other's."""
        ours = {"models": self.config.models.model_dump(), "engine": self.config.engine.model_dump(exclude=LIFECYCLE)}
        theirs = {"models": config.models.model_dump(), "engine": config.engine.model_dump(exclude=LIFECYCLE)}
        differ = [f"{part}.{key}" for part in ours for key in ours[part] if ours[part][key] != theirs[part].get(key)]
        if differ:
            raise InputError(f"--synthetic {self.sweep_id}: its {', '.join(differ)} differ from the dense sweep's "
                             f"{config.name} (step costs fitted on one would not be the other's)")
        clash = {a.name for a in config.arms} & {a.name for a in self.arms}
        if clash:
            raise InputError(f"--synthetic {self.sweep_id}: arm names {', '.join(sorted(clash))} are in both sweeps")
        return config.model_copy(update={"arms": [*config.arms, *self.arms]})


def report(sweep_id: str, sweep_dir: Path, config: SweepConfig, cells: Sequence[CellResult],
           records: Mapping[str, Sequence[RequestRecord]], fit: FitSubset, requests: int, console: Console,
           resamples: int = 200, decisions: Sequence[Decision] = (), synthetic: SyntheticCells | None = None,
           seed: int | None = None) -> int:
    spec_names = {p.arm: p.spec_name for p in arm_plans(config)}
    measured = measure(config, cells)

    def keep(ident: CellIdentity) -> bool:
        point = point_of(ident, spec_names)
        return ident.synthetic or (point is not None and fit.fits(point))

    seed = config.analysis.seed if seed is None else seed
    fit_config, fit_cells, fit_records = config, list(cells), dict(records)
    if synthetic is not None:
        fit_config = synthetic.joined(config)
        fit_cells += synthetic.cells
        fit_records.update(synthetic.records)
    calibration = calibrate(sweep_id, fit_config, fit_cells, fit_records, keep=keep, seed=seed, resamples=resamples)
    model = ModelPredictor(calibration, requests, seed, config.load.requests_per_cell)
    form = closed_form(config, measured, fit)
    fitted = {p: f for p, f in measured.figures.items() if fit.fits(p)}
    decisive = decisive_points(config, decisions)
    evaluation = evaluate(config, cells, measured, fit,
                          {"model": model, "nearest": nearest_predictor(fitted),
                           "interpolation": interpolation_predictor(fitted), "closed_form": form}, decisive)
    if not decisive:
        evaluation.notes.append("the sweep has no decisions with intervals (no summary): neither sign figure is scored")
    box = machine()
    fitted_on = plain_fit = fit.describe([s.name for s in config.arms if s.method != "baseline"])
    if synthetic is not None:
        fitted_on += (f"; the model also on the {len(synthetic.cells)} SYNTHETIC cells of {synthetic.sweep_id} "
                      "(step cost only)")
    runs = sum(len(measured.cells[p]) for p in evaluation.held_out)
    console.print(f"sweep {sweep_id}: {sum(c.usable for c in cells)} usable cells of {len(cells)}; fitted on "
                  f"{fitted_on} ({len(fitted)} configurations)", highlight=False)
    for point, why in sorted(model.errors.items()):
        console.print(f"model: {point.label}: not predicted: {why}", highlight=False)
    print_details(evaluation, console)
    table = markdown_table(evaluation)
    header = [
        f"Sweep `{sweep_id}` on {box['cores']} cores ({box['cpu_model'] or box['processor'] or 'unknown CPU'}); "
        f"fitted on {fitted_on}; held out: {len(evaluation.held_out)} configurations ({runs} measured cells, "
        f"both baseline phases pooled). The model simulates {requests} requests per prediction, seed {seed}.",
        "Speedup: SLO-qualified tokens/s over the baseline's main-phase cells at the same class and load (the "
        "decisions' basis; over its end-of-sweep cells where no main-phase one was usable, named below). "
        "Best-k tolerance: the sweep's noise floor for the configuration, or 5 % where it has none. "
        "Closed-form draft cost ratio c: " + "; ".join(f"{arm} {why}" for arm, why in form.cost_source.items()) + ".",
    ]
    print("\n" + "\n\n".join(header) + "\n\n" + table + "\n")
    if measured.end_phase_baseline:
        evaluation.notes.append("no usable main-phase baseline run, so the measured speedup is over the end-of-sweep "
                                "baseline: " + ", ".join(p.label for p in measured.end_phase_baseline))
    for note in evaluation.notes:
        print(f"note: {note}")
    out = sweep_dir / OUTPUT_FILE
    out.write_text(json.dumps({
        "sweep_id": sweep_id, "machine": box, "fit": fitted_on, "seed": seed, "simulated_requests": requests,
        "synthetic_sweep": None if synthetic is None else synthetic.sweep_id,
        "held_out_configurations": len(evaluation.held_out), "held_out_cells": runs,
        "table_markdown": table, "header": header,
        "figures": {g.key: {"title": g.title, "goal": g.text(), "met": goal_met(g, evaluation.scores[g.key]),
                            **{n: asdict(evaluation.scores[g.key][n]) for n in PREDICTORS}} for g in GOALS},
        "closed_form": {"alpha": {"/".join(key): a for key, a in form.alpha.items()},
                        "draft_cost_ratio": dict(form.cost_ratio), "draft_cost_ratio_source": dict(form.cost_source)},
        "model_not_predicted": {p.label: why for p, why in model.errors.items()},
        "model_extrapolates": {p.label: e for p, e in model.extrapolates.items() if e and p in evaluation.held_out},
        "cells": evaluation.cells, "crossover": evaluation.crossover, "best_k": evaluation.best_k,
        "notes": evaluation.notes,
    }, indent=2, default=str), encoding="utf-8")
    print(f"written: {out}")
    record(sweep_id, evaluation, plain_fit, seed, synthetic is not None)
    return 0


def record(sweep_id: str, evaluation: Evaluation, fitted_on: str, seed: int, synthetic: bool) -> None:
    """The scored figures as a benchmark result (``benchmarks/results/model_accuracy/``): met when no
    goal with a figure is missed."""
    scored = [g for g in GOALS if g.scored]
    verdicts = [goal_met(g, evaluation.scores[g.key]) for g in scored]
    figures: dict[str, float | None] = {}
    for goal in scored:
        unit = "steps" if goal.key.startswith("crossover") else "mape_pct" if goal.lower_is_better else "right_pct"
        for name in PREDICTORS:
            value = evaluation.scores[goal.key][name].value
            figures[f"{name}_{goal.key}_{unit}"] = value if value is None or unit == "steps" else 100 * value
    figures["held_out_configurations"] = len(evaluation.held_out)
    note = f"fitted on {fitted_on}; seed {seed}" + ("; also on a synthetic sweep" if synthetic else "")
    write_result("model_accuracy", GOAL_TEXT, all(v == "yes" or v.startswith("n/a") for v in verdicts), figures,
                 sweep_id=sweep_id, note=note)


if __name__ == "__main__":
    sys.exit(main())
