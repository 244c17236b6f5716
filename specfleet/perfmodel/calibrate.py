"""A ``Calibration`` from a stored sweep's cells and request records: nothing new is measured.

From the usable cells (status ok, with their per-request records):

- the step law (``step_time``), fitted to every request's chunk gaps;
- acceptance per arm, prompt class and sampling (``acceptance``), from the cells' counters (never from
  cells measured at synthetic acceptance, which only add step observations to the law);
- each prompt class's requests (prompt and output tokens, in the order the load client sends them);
- the jitter of single steps: every chunk gap over the law's time for it, per method, scaled
  to mean 1 (it sets the ITL tails; the law sets the means);
- the request overhead: the time from send to the scheduler, fitted so that the simulated
  cells' mean TTFT matches the measured cells' (a few fixed-point rounds of the simulation);
- the KV pool each arm reported, the loads and k measured, and the sweep's largest relative
  spread of the repeated baseline (``specfleet.stats.noise``; not the decisions' pooled noise
  floor), which widens every interval.
"""

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specfleet.contract import CellIdentity, SweepConfig, arm_plans
from specfleet.errors import InputError
from specfleet.measure.metrics import NS_PER_S, measured_window_ns, output_tokens, ttft_series_ms
from specfleet.perfmodel.acceptance import AcceptanceProfile, AcceptanceSample, NoAcceptance, pool_acceptance
from specfleet.perfmodel.batching import (
    ClosedLoad,
    EngineLimits,
    PoissonLoad,
    RequestShape,
    SimLoad,
    Simulated,
    Speculation,
    simulate,
)
from specfleet.perfmodel.observations import decode_steps, gap_batches, request_shapes, step_observations
from specfleet.perfmodel.step_time import StepLaw, StepObservation, columns, fit_step_law
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.noise import baseline_noise

FloatArray = npt.NDArray[np.float64]
AcceptanceKey = tuple[str, str, str]
"""(arm name in the config, prompt class, sampling)."""
OVERHEAD_ROUNDS = 12
"""Bisection rounds for the request overhead (its bracket shrinks 4096-fold)."""
JITTER_SAMPLES = 4000
DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's default ``max_num_seqs`` when the config leaves it unset."""


@dataclass(frozen=True, slots=True)
class CellFit:
    """One calibration cell, measured and as the calibrated model has it (in-sample): mean chunk gap,
    median TTFT, output tokens/s (the cell simulated with its own requests)."""

    label: str
    measured_gap_ms: float
    fitted_gap_ms: float
    measured_ttft_ms: float | None
    """Median TTFT."""
    simulated_ttft_ms: float | None
    measured_output_tokens_per_s: float | None
    simulated_output_tokens_per_s: float | None


@dataclass(frozen=True)
class Calibration:
    sweep_id: str
    config: SweepConfig
    law: StepLaw
    acceptance: Mapping[AcceptanceKey, AcceptanceProfile]
    acceptance_missing: Mapping[AcceptanceKey, str]
    """Why an arm, class and sampling with speculative cells has no profile (never zero acceptance)."""
    workloads: Mapping[str, tuple[RequestShape, ...]]
    jitter: Mapping[str, FloatArray]
    overhead_ms: float
    kv_tokens: Mapping[str, int | None]
    """Per config arm, the smallest KV pool (tokens) its cells reported; None when none did."""
    measured_cells: frozenset[tuple[str, str, str, float, str]]
    """(arm, prompt class, load mode, load value, sampling) of every calibration cell."""
    measured_k: Mapping[str, tuple[int, ...]]
    """Per config arm, the k of its calibration cells (empty for the baseline)."""
    concurrency: tuple[int, ...]
    rates_per_s: tuple[float, ...]
    max_decode_seqs: float
    """The largest mean decode batch of any request the law was fitted on."""
    noise_floor: float | None
    cell_fits: tuple[CellFit, ...]
    notes: tuple[str, ...]

    @property
    def max_num_seqs(self) -> int:
        return self.config.engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS

    def limits(self, arm: str) -> EngineLimits:
        return EngineLimits(max_num_seqs=self.max_num_seqs, kv_tokens=self.kv_tokens.get(arm))


def _speculation(profile: AcceptanceProfile | None, k: int) -> Speculation | None:
    if profile is None or k < 1:
        return None
    return Speculation(k=k, per_position=profile.per_position(k), draft_rate=profile.rate(k=k),
                       proposed_share=profile.proposed_share)


def _load(identity: CellIdentity) -> SimLoad:
    if identity.load_mode == "concurrency":
        return ClosedLoad(int(identity.load_value))
    return PoissonLoad(identity.load_value)


def _draft_tokens_per_seq(cell: CellResult, steps: int) -> float:
    stats = cell.spec_decode
    return stats.num_draft_tokens / steps if stats is not None and steps > 0 else 0.0


@dataclass(frozen=True)
class _Cell:
    cell: CellResult
    records: list[RequestRecord]
    arm: str
    method: str
    k: int


def _jitter(law: StepLaw, cells: Sequence[_Cell], rng: np.random.Generator) -> dict[str, FloatArray]:
    ratios: dict[str, list[FloatArray]] = defaultdict(list)
    for c in cells:
        steps = decode_steps(c.records)
        for g in gap_batches(c.records, _draft_tokens_per_seq(c.cell, steps)):
            n = g.gap_ms.size
            x = columns(law.names, np.full(n, c.method, dtype=np.str_), np.full(n, float(c.k)), g.decode_seqs,
                        g.prefill_tokens, g.context_tokens, g.draft_tokens, law.narrow_below)
            fitted = x @ law.coef_ms
            ok = fitted > 0
            ratios[c.method].append(g.gap_ms[ok] / fitted[ok])
    out: dict[str, FloatArray] = {}
    for method, parts in ratios.items():
        values = np.concatenate(parts)
        if values.size == 0 or values.mean() <= 0:
            continue
        if values.size > JITTER_SAMPLES:
            values = rng.choice(values, size=JITTER_SAMPLES, replace=False)
        out[method] = np.asarray(values / values.mean(), dtype=np.float64)
    return out


def _median_ttft(records: Sequence[RequestRecord]) -> float | None:
    series = ttft_series_ms(records)
    return float(np.median(series)) if series else None


def calibrate(
    sweep_id: str,
    config: SweepConfig,
    cells: Sequence[CellResult],
    records: Mapping[str, Sequence[RequestRecord]],
    *,
    keep: Callable[[CellIdentity], bool] | None = None,
    seed: int = 0,
    resamples: int = 200,
    overhead_ms: float | None = None,
) -> Calibration:
    """Fit the model to the usable cells of a stored sweep (those ``keep`` accepts, default all).
    ``overhead_ms``: the server overhead an earlier fit to the same cells found (the sweep's summary
    keeps it), so its search, most of a fit's time, is not run again.

    Raises ``InputError`` when no usable cell with per-request records is left.
    """
    plans = {p.arm: p for p in arm_plans(config)}
    used: list[_Cell] = []
    for cell in cells:
        ident = cell.identity
        if (not cell.usable or ident.arm not in plans or ident.adaptive  # not one fixed k: no step-law input
                or (keep is not None and not keep(ident))):
            continue
        reqs = [r for r in records.get(cell.key, []) if r.ok]
        if any(r.chunk_ns for r in reqs):
            used.append(_Cell(cell, list(records[cell.key]), plans[ident.arm].spec_name, ident.method,
                              ident.num_speculative_tokens))
    if not used:
        raise InputError(f"{sweep_id}: no usable cell with per-request records to calibrate on")
    notes: list[str] = []
    samples: dict[AcceptanceKey, list[AcceptanceSample]] = defaultdict(list)
    observations: list[StepObservation] = []
    for c in used:
        steps = decode_steps(c.records)
        ident = c.cell.identity
        if c.k and c.cell.spec_decode is None:
            notes.append(f"{ident.label}: no spec-decode counters, left out of the fit")
            continue
        if c.cell.spec_decode is not None and c.k and not ident.synthetic:  # acceptance from the real arms only
            samples[(c.arm, ident.prompt_class, ident.sampling)].append(
                AcceptanceSample(k=c.k, stats=c.cell.spec_decode, decode_steps=steps))
        observations += step_observations(c.records, c.method, c.k, _draft_tokens_per_seq(c.cell, steps), c.cell.key)
    rng = np.random.default_rng(seed)
    law = fit_step_law(observations, rng, resamples)
    pooled = {key: pool_acceptance(group) for key, group in samples.items()}
    acceptance = {key: p for key, p in pooled.items() if isinstance(p, AcceptanceProfile)}
    missing = {key: p.reason for key, p in pooled.items() if isinstance(p, NoAcceptance)}
    notes += [f"{'/'.join(key)}: no acceptance profile: {why}" for key, why in sorted(missing.items())]
    workloads: dict[str, tuple[RequestShape, ...]] = {}
    for c in sorted(used, key=lambda c: (c.method != "baseline", c.cell.identity.phase != "main")):
        name = c.cell.identity.prompt_class
        if name not in workloads:
            workloads[name] = tuple(RequestShape(*shape) for shape in request_shapes(c.records))
    kv: dict[str, int | None] = {}
    for c in used:  # only the cells the fit may see: a held-out cell's KV pool is not an input
        size = c.cell.kv_cache.kv_cache_size_tokens if c.cell.kv_cache else None
        if size is not None:
            known = kv.get(c.arm)
            kv[c.arm] = size if known is None else min(known, size)
    jitter = _jitter(law, used, rng)
    max_seqs = config.engine.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    overhead, fits = _overhead(law, used, acceptance, max_seqs, kv, seed, overhead_ms)
    floors = [f.relative_spread for f in baseline_noise([c.cell for c in used]).values()
              if f.relative_spread is not None]
    loads = [c.cell.identity for c in used]
    return Calibration(
        sweep_id=sweep_id, config=config, law=law, acceptance=acceptance, acceptance_missing=missing,
        workloads=workloads, jitter=jitter,
        overhead_ms=overhead, kv_tokens=kv,
        measured_cells=frozenset((i.arm, i.prompt_class, i.load_mode, i.load_value, i.sampling) for i in loads),
        measured_k={name: tuple(sorted({c.k for c in used if c.arm == name and c.k})) for name in
                    {p.spec_name for p in plans.values()}},
        concurrency=tuple(sorted({int(i.load_value) for i in loads if i.load_mode == "concurrency"})),
        rates_per_s=tuple(sorted({i.load_value for i in loads if i.load_mode == "rate"})),
        max_decode_seqs=max(o.batch.decode_seqs for o in observations),
        noise_floor=max(floors) if floors else None, cell_fits=tuple(fits), notes=tuple(notes),
    )


def _search(excess: Callable[[float], float], high: float) -> float:
    """The overhead in [0, ``high``] where ``excess`` (measured less simulated median TTFT, falling
    as the overhead rises) crosses 0, by bisection; 0 when the simulation is slower already."""
    low = 0.0
    if excess(low) <= 0:
        return 0.0
    for _ in range(OVERHEAD_ROUNDS):
        mid = (low + high) / 2.0
        low, high = (mid, high) if excess(mid) > 0 else (low, mid)
    return (low + high) / 2.0


def _overhead(
    law: StepLaw, used: Sequence[_Cell], acceptance: Mapping[AcceptanceKey, AcceptanceProfile], max_num_seqs: int,
    kv: Mapping[str, int | None], seed: int, known_ms: float | None = None,
) -> tuple[float, list[CellFit]]:
    """The API server's time per request that makes the simulated cells' median TTFT the measured one
    (the median over cells of the difference is 0; bisection, the simulated TTFT rising with it)."""
    runs = []
    for c in used:
        ident = c.cell.identity
        measured = _median_ttft(c.records)
        shapes = [RequestShape(*s) for s in request_shapes(c.records)]
        spec = _speculation(acceptance.get((c.arm, ident.prompt_class, ident.sampling)), c.k)
        if measured is None or not shapes or (c.k and spec is None):
            continue
        runs.append((c, measured, shapes, spec))

    def simulated(overhead: float) -> list[Simulated]:
        return [simulate(law.linear(c.method, c.k), c.method, shapes, _load(c.cell.identity),
                         EngineLimits(max_num_seqs, kv.get(c.arm)), spec, requests=len(shapes),
                         overhead_ms=overhead, rng=np.random.default_rng(seed)) for c, _, shapes, spec in runs]

    def excess(overhead: float) -> float:
        medians = [(measured, _median_ttft(sim.records))
                   for (_, measured, _, _), sim in zip(runs, simulated(overhead), strict=True)]
        diffs = [measured - median for measured, median in medians if median is not None]
        return float(np.median(diffs)) if diffs else 0.0

    overhead = known_ms if known_ms is not None else _search(excess, max((m for _, m, _, _ in runs), default=0.0))
    by_cell = {c.cell.key: (measured, sim) for (c, measured, _, _), sim in zip(runs, simulated(overhead), strict=True)}
    fits = []
    for c in used:
        steps = decode_steps(c.records)
        rows = step_observations(c.records, c.method, c.k, _draft_tokens_per_seq(c.cell, steps), c.cell.key)
        if not rows:
            continue
        gaps = np.array([r.gaps for r in rows], dtype=np.float64)
        measured_ttft, sim = by_cell.get(c.cell.key, (None, None))
        fits.append(CellFit(
            label=c.cell.identity.label, measured_gap_ms=float(np.average([r.gap_ms for r in rows], weights=gaps)),
            fitted_gap_ms=float(np.average([law.step_ms(r.batch) for r in rows], weights=gaps)),
            measured_ttft_ms=measured_ttft, simulated_ttft_ms=_median_ttft(sim.records) if sim else None,
            measured_output_tokens_per_s=c.cell.throughput.output_tokens_per_s,
            simulated_output_tokens_per_s=_output_rate(sim.records) if sim else None))
    return overhead, fits


def _output_rate(records: Sequence[RequestRecord]) -> float | None:
    window = measured_window_ns(records)
    if window is None or window[1] <= window[0]:
        return None
    return sum(output_tokens(r) for r in records if r.ok) / ((window[1] - window[0]) / NS_PER_S)
