"""``predict(calibration, query) -> Prediction``: one cell's figures, predicted, never measured.

The figures come from simulated request records (``batching``) put through the same metrics
code as measured ones. The interval comes from two more runs: a slow one, with the step law
at the 97.5th percentile of its bootstrap replicates at this operating point, acceptance at
the low ends of its Wilson intervals and steps slower by half the sweep's largest baseline spread; and
a fast one, the other way round. Each key's interval spans the three runs. The speedup's
interval pairs the arm's slow run with the baseline's fast run and the reverse: a conservative
pairing, wider than a joint interval.

A prediction names what lies outside the measured range (``extrapolates``) and is marked
``predicted: true``; nothing downstream may treat it as a measurement, and no decision reads it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from specfleet.contract import ArmSpec
from specfleet.contract.arms import k_at_batch
from specfleet.economics.cost import hardware_fleet_cost
from specfleet.errors import InputError
from specfleet.measure.metrics import (
    e2e_series_ms,
    itl_per_chunk_series_ms,
    itl_per_token_series_ms,
    measured_window_ns,
    meets_slo,
    summarize,
    throughput,
    tpot_series_ms,
    ttft_series_ms,
)
from specfleet.perfmodel.acceptance import AcceptanceProfile, Bound
from specfleet.perfmodel.batching import (
    ClosedLoad,
    PoissonLoad,
    RequestShape,
    SimLoad,
    Simulated,
    Speculation,
    simulate,
    simulate_cells,
)
from specfleet.perfmodel.calibrate import Calibration
from specfleet.perfmodel.prediction import (
    Bounds,
    PercentileBounds,
    Percentiles,
    Prediction,
    PredictionInterval,
)
from specfleet.perfmodel.step_time import LinearStep
from specfleet.results.cell import DistributionSummary
from specfleet.results.records import RequestRecord

NS_PER_S = 1_000_000_000
DEFAULT_REQUESTS = 256
QUICK_REQUESTS = 64
"""Simulated requests where many cells are predicted at once (the report's curves, a budget's
left-out cells): a quarter of the time, a wider spread in the tails."""
INTERVAL_QUANTILES = (2.5, 97.5)
Run = Literal["point", "slow", "fast"]


@dataclass(frozen=True)
class PredictionQuery:
    arm: str
    """An arm name of the sweep's config (``draft``), or an arm at one k (``draft-k2``)."""
    prompt_class: str
    k: int | None = None
    concurrency: int | None = None
    rate_per_s: float | None = None
    sampling: str | None = None
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    cell_requests: int | None = None
    """Predict a measured cell of this many requests (``load.requests_per_cell``): the requests are
    simulated as such cells, each from an idle engine (``simulate_cells``); None: one long run, the
    load's steady state."""


@dataclass(frozen=True)
class _Runs:
    point: Simulated
    slow: Simulated
    fast: Simulated
    acceptance: dict[Run, tuple[float, float] | None]


def _resolve_arm(cal: Calibration, name: str, k: int | None) -> tuple[ArmSpec, int]:
    arms = {a.name: a for a in cal.config.arms}
    spec = arms.get(name)
    if spec is None:
        base, _, tail = name.rpartition("-k")
        if base in arms and tail.isdigit() and arms[base].method != "baseline":
            if k is not None and k != int(tail):
                raise InputError(f"--arm {name} and --k {k} disagree")
            spec, k = arms[base], int(tail)
        else:
            raise InputError(f"--arm {name}: not an arm of sweep {cal.sweep_id} ({', '.join(arms)})")
    if spec.method == "baseline":
        if k is not None:
            raise InputError(f"--k {k}: the baseline arm {spec.name!r} does not speculate")
        return spec, 0
    if k is None:
        if len(spec.k) != 1:
            raise InputError(f"--arm {spec.name} was swept at k {', '.join(map(str, spec.k))}: give --k")
        k = spec.k[0]
    if k < 1:
        raise InputError(f"--k must be a positive integer (got {k})")
    return spec, k


def _figures(summary: DistributionSummary) -> Percentiles:
    def value(p: object) -> float | None:
        return getattr(p, "value", None)

    return Percentiles(p50=value(summary.p50), p95=value(summary.p95), p99=value(summary.p99))


@dataclass(frozen=True)
class _Figures:
    ttft: Percentiles
    itl: Percentiles
    itl_token: Percentiles
    tpot: Percentiles
    e2e: Percentiles
    output_tps: float | None
    qualified_tps: float | None
    slo_met: float | None
    cost: float | None


def _cost(cal: Calibration, qualified: float | None) -> float | None:
    if qualified is None or qualified <= 0:
        return None
    return hardware_fleet_cost(cal.config.hardware, qualified).cost_per_million_usd


def _measure(cal: Calibration, records: Sequence[RequestRecord]) -> _Figures:
    slo = cal.config.slo
    window = measured_window_ns(records)
    duration = (window[1] - window[0]) / NS_PER_S if window else 0.0
    rates = throughput(records, slo, duration)
    ok = [r for r in records if r.ok]
    return _Figures(
        ttft=_figures(summarize(ttft_series_ms(records))), itl=_figures(summarize(itl_per_chunk_series_ms(records))),
        itl_token=_figures(summarize(itl_per_token_series_ms(records))),
        tpot=_figures(summarize(tpot_series_ms(records))), e2e=_figures(summarize(e2e_series_ms(records))),
        output_tps=rates.output_tokens_per_s, qualified_tps=rates.qualified_tokens_per_s,
        slo_met=sum(meets_slo(r, slo) for r in ok) / len(ok) if ok else None,
        cost=_cost(cal, rates.qualified_tokens_per_s),
    )


def _simulate(cal: Calibration, spec: ArmSpec, k: int, profile: AcceptanceProfile | None,
              workload: Sequence[RequestShape], load: SimLoad, query: PredictionQuery) -> _Runs:
    jitter = cal.jitter.get(spec.method)
    limits = cal.limits(spec.name)

    def at(k_now: int, scale: float, bound: Bound) -> tuple[LinearStep, Speculation | None]:
        speculation = None if profile is None or k_now == 0 else Speculation(
            k=k_now, per_position=profile.per_position(k_now, bound), draft_rate=profile.rate(bound, k_now),
            proposed_share=profile.proposed_share)
        return cal.law.linear(spec.method, k_now).scaled(scale), speculation

    def run(scale: float, bound: Bound) -> Simulated:
        law, speculation = at(k, scale, bound)
        schedule = spec.schedule
        by_batch = None if schedule is None else (lambda batch: at(k_at_batch(schedule, batch), scale, bound))
        rng = np.random.default_rng(query.seed)

        def requests(count: int) -> Simulated:
            return simulate(law, spec.method, workload, load, limits, speculation, requests=count,
                            overhead_ms=cal.overhead_ms, rng=rng, jitter=jitter, by_batch=by_batch)

        if query.cell_requests is None:
            return requests(query.requests)
        return simulate_cells(requests, query.requests, query.cell_requests)

    point = run(1.0, "point")
    scales = cal.law.replicate_scales([point.mean_batch])
    low_q, high_q = (float(np.percentile(scales, q)) for q in INTERVAL_QUANTILES)
    half_noise = (cal.noise_floor or 0.0) / 2.0
    slow = run(max(high_q, 1.0) * (1.0 + half_noise), "low")
    fast = run(max(min(low_q, 1.0) * (1.0 - half_noise), 0.05), "high")

    def acceptance(bound: Bound) -> tuple[float, float] | None:
        if profile is None:
            return None
        return profile.mean_acceptance_length(k, bound), profile.tokens_per_step(k, bound)

    return _Runs(point, slow, fast, {"point": acceptance("point"), "slow": acceptance("low"),
                                     "fast": acceptance("high")})


def _bounds(*values: float | None) -> Bounds:
    known = [v for v in values if v is not None]
    return Bounds(low=min(known), high=max(known)) if known else Bounds(low=None, high=None)


def _pbounds(*figures: Percentiles) -> PercentileBounds:
    return PercentileBounds(p50=_bounds(*(f.p50 for f in figures)), p95=_bounds(*(f.p95 for f in figures)),
                            p99=_bounds(*(f.p99 for f in figures)))


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _extrapolates(cal: Calibration, spec: ArmSpec, k: int, profile: AcceptanceProfile | None, load: SimLoad,
                  point: Simulated, prompt_class: str) -> list[str]:
    out: list[str] = []
    if profile is not None and profile.extrapolates(k):
        q = profile.conditional[-1].value
        out.append(f"k {k} > largest measured {profile.measured_positions} for arm {spec.name} on {prompt_class}: "
                   f"acceptance past position {profile.measured_positions} holds the last measured conditional "
                   f"ratio {q:.2f}")
    measured_k = cal.measured_k.get(spec.name, ())
    if k and measured_k and not min(measured_k) <= k <= max(measured_k):
        out.append(f"k {k} outside the k the step law saw for arm {spec.name} ({', '.join(map(str, measured_k))})")
    if k and f"{spec.method}:draft_pass" in cal.law.dropped and k not in measured_k:
        out.append(f"k {k} not measured and the data could not tell {spec.method}:draft_pass (the cost of one more "
                   "draft pass) from the fixed cost: taken as 0 ms")
    if isinstance(load, ClosedLoad):
        if not cal.concurrency:
            out.append(f"concurrency {load.concurrency}: the sweep measured no closed-loop load")
        elif load.concurrency > max(cal.concurrency):
            out.append(f"concurrency {load.concurrency} > largest measured {max(cal.concurrency)}")
        elif load.concurrency < min(cal.concurrency):
            out.append(f"concurrency {load.concurrency} < smallest measured {min(cal.concurrency)}")
    else:
        if not cal.rates_per_s:
            out.append(f"rate {load.rate_per_s:g}/s: the sweep measured no open-loop load (queueing is simulated, "
                       "not calibrated)")
        elif not min(cal.rates_per_s) <= load.rate_per_s <= max(cal.rates_per_s):
            out.append(f"rate {load.rate_per_s:g}/s outside the measured rates "
                       f"({', '.join(f'{r:g}' for r in cal.rates_per_s)})")
    measured_load = (isinstance(load, ClosedLoad) and load.concurrency in cal.concurrency) or (
        isinstance(load, PoissonLoad) and load.rate_per_s in cal.rates_per_s)
    if "decode_seq" in cal.law.dropped and not measured_load:
        out.append("the step law could not tell the cost of one more decoding sequence from the fixed cost (every "
                   "fitted request ran at the same batch): taken as 0 ms, so a larger batch's throughput is overstated")
    if point.mean_batch.decode_seqs > cal.max_decode_seqs * 1.05:
        out.append(f"mean decode batch {point.mean_batch.decode_seqs:.1f} > largest the step law was fitted on "
                   f"({cal.max_decode_seqs:.1f})")
    return out


BaselineKey = tuple[str, SimLoad, int, int, int | None]
"""(prompt class, load, simulated requests, seed, requests per cell): what the baseline's simulation
depends on."""


class Predictor:
    """``predict`` over many cells of one calibration: the baseline is simulated once per prompt class,
    load, request count and seed and shared by every prediction there (each equals ``predict``'s)."""

    def __init__(self, cal: Calibration) -> None:
        self.calibration = cal
        self._baseline: dict[BaselineKey, dict[Run, _Figures]] = {}

    def predict(self, query: PredictionQuery) -> Prediction:
        """As ``predict(calibration, query)``."""
        return _predict(self.calibration, query, self._baseline)


def predict(cal: Calibration, query: PredictionQuery) -> Prediction:
    """Predict one cell; ``InputError`` for an unknown arm, class or sampling, or an arm and class
    without the measured acceptance it needs."""
    return _predict(cal, query, {})


def _runs_figures(cal: Calibration, runs: _Runs) -> dict[Run, _Figures]:
    return {"point": _measure(cal, runs.point.records), "slow": _measure(cal, runs.slow.records),
            "fast": _measure(cal, runs.fast.records)}


def _predict(cal: Calibration, query: PredictionQuery, baseline: dict[BaselineKey, dict[Run, _Figures]]) -> Prediction:
    spec, k = _resolve_arm(cal, query.arm, query.k)
    classes = [p.name for p in cal.config.prompt_classes]
    if query.prompt_class not in classes:
        raise InputError(f"--prompt-class {query.prompt_class}: not a prompt class of sweep {cal.sweep_id} "
                         f"({', '.join(classes)})")
    samplings = [s.name for s in cal.config.sampling]
    sampling = query.sampling or samplings[0]
    if sampling not in samplings:
        raise InputError(f"--sampling {sampling}: not a sampling mode of sweep {cal.sweep_id} ({', '.join(samplings)})")
    if (query.concurrency is None) == (query.rate_per_s is None):
        raise InputError("give exactly one of --concurrency or --rate")
    load: SimLoad
    mode: Literal["concurrency", "rate"]
    if query.concurrency is not None:
        if query.concurrency < 1:
            raise InputError(f"--concurrency must be a positive integer (got {query.concurrency})")
        load, mode, value = ClosedLoad(query.concurrency), "concurrency", float(query.concurrency)
    else:
        rate = float(query.rate_per_s or 0.0)
        if not rate > 0:
            raise InputError(f"--rate must be positive (got {query.rate_per_s})")
        load, mode, value = PoissonLoad(rate), "rate", rate
    shapes = cal.workloads.get(query.prompt_class)
    if not shapes:
        raise InputError(f"{cal.sweep_id}: no usable cell of prompt class {query.prompt_class} to take its request "
                         "lengths from")
    if spec.method not in cal.law.methods:
        raise InputError(f"{cal.sweep_id}: no usable cell of arm {spec.name} to fit its step time on")
    profile = None
    if spec.method != "baseline":
        source = spec.policy_of or spec.name  # a measured k policy drafts as the arm it was derived from
        profile = cal.acceptance.get((source, query.prompt_class, sampling))
        if profile is None:
            why = cal.acceptance_missing.get((source, query.prompt_class, sampling))
            raise InputError(f"{cal.sweep_id}: no usable cell of arm {source} on {query.prompt_class} "
                             f"({sampling}) to take its acceptance from" + (f": {why}" if why else ""))
    runs = _simulate(cal, spec, k, profile, shapes, load, query)
    key: BaselineKey = (query.prompt_class, load, query.requests, query.seed, query.cell_requests)
    figures = _runs_figures(cal, runs)
    base_figures: dict[Run, _Figures] | None = None
    if spec.method == "baseline":
        baseline.setdefault(key, figures)
    else:
        if key not in baseline:
            baseline[key] = _runs_figures(cal, _simulate(cal, cal.config.baseline, 0, None, shapes, load, query))
        base_figures = baseline[key]
    p, slow, fast = figures["point"], figures["slow"], figures["fast"]
    speedup = speedup_bounds = None
    if base_figures is not None:
        speedup = _ratio(p.qualified_tps, base_figures["point"].qualified_tps)
        speedup_bounds = _bounds(_ratio(slow.qualified_tps, base_figures["fast"].qualified_tps),
                                 _ratio(fast.qualified_tps, base_figures["slow"].qualified_tps), speedup)
    accept = runs.acceptance
    plan_arm = spec.name if spec.method == "baseline" or spec.policy_of else f"{spec.name}-k{k}"
    notes = [f"calibrated on {cal.sweep_id}: step law residual {cal.law.residual_rel:.0%} rms per request; "
             f"request overhead {cal.overhead_ms:.1f} ms"]
    if cal.law.dropped:
        notes.append(f"the data could not identify {', '.join(cal.law.dropped)}: taken as 0 ms")
    if cal.law.narrow_below:
        coef = cal.law.coefficients()
        notes.append(f"steps of at most {cal.law.narrow_below - 0.5:.0f} rows take a slower kernel path: "
                     f"+{coef.get('narrow_step', 0.0):.2f} ms and +{coef.get('narrow_row', 0.0):.2f} ms per row")
    if cal.noise_floor is not None:
        notes.append(f"the sweep's largest baseline spread ((max - min) / mean of a repeated configuration) is "
                     f"{cal.noise_floor:.0%}; the interval includes it")
    if runs.point.kv_limited_steps:
        notes.append(f"the KV pool ({cal.limits(spec.name).kv_tokens} tokens) held requests back in "
                     f"{runs.point.kv_limited_steps} steps")
    if isinstance(load, ClosedLoad) and load.concurrency > cal.max_num_seqs:
        notes.append(f"concurrency {load.concurrency} > max_num_seqs {cal.max_num_seqs}: requests queue")
    return Prediction(
        calibrated_on=cal.sweep_id, arm=plan_arm, method=spec.method, k=k or None, prompt_class=query.prompt_class,
        sampling=sampling, load_mode=mode, load_value=value,
        measured_cell=(plan_arm, query.prompt_class, mode, value, sampling) in cal.measured_cells,
        ttft_ms=p.ttft, itl_ms=p.itl, itl_per_token_ms=p.itl_token, tpot_ms=p.tpot, e2e_ms=p.e2e,
        output_tokens_per_s=p.output_tps, qualified_tokens_per_s=p.qualified_tps, slo_met_fraction=p.slo_met,
        mean_acceptance_length=accept["point"][0] if accept["point"] else None,
        tokens_per_step=accept["point"][1] if accept["point"] else None,
        speedup=speedup, cost_per_million_usd=p.cost,
        baseline_cost_per_million_usd=base_figures["point"].cost if base_figures else p.cost,
        mean_step_ms=cal.law.step_ms(runs.point.mean_batch),
        mean_decode_seqs=runs.point.mean_batch.decode_seqs, simulated_requests=query.requests,
        interval=PredictionInterval(
            ttft_ms=_pbounds(p.ttft, slow.ttft, fast.ttft), itl_ms=_pbounds(p.itl, slow.itl, fast.itl),
            itl_per_token_ms=_pbounds(p.itl_token, slow.itl_token, fast.itl_token),
            tpot_ms=_pbounds(p.tpot, slow.tpot, fast.tpot), e2e_ms=_pbounds(p.e2e, slow.e2e, fast.e2e),
            output_tokens_per_s=_bounds(p.output_tps, slow.output_tps, fast.output_tps),
            qualified_tokens_per_s=_bounds(p.qualified_tps, slow.qualified_tps, fast.qualified_tps),
            mean_acceptance_length=None if not accept["point"] else _bounds(
                *(a[0] for a in accept.values() if a)),
            tokens_per_step=None if not accept["point"] else _bounds(*(a[1] for a in accept.values() if a)),
            speedup=speedup_bounds, cost_per_million_usd=_bounds(p.cost, slow.cost, fast.cost),
            basis="step law at its bootstrap 2.5-97.5 % over requests, acceptance at its Wilson 95 % ends, "
                  "steps widened by half the sweep's largest baseline spread; three simulated runs (slow, point, fast)",
        ),
        extrapolates=_extrapolates(cal, spec, k, profile, load, runs.point, query.prompt_class),
        notes=notes,
    )
