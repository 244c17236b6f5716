"""What a drift monitor compares a live speculative server with, from the sweep that adopted its arm
(seed, "Production gates": "track rolling mean acceptance length ... Compare it with the measured
speculative-iteration/baseline-step cost ratio ... alert when that ratio no longer shows a decode benefit").

Per concurrency level the sweep measured (a live server's load bucket), pooled over the prompt
classes measured there, in the sweep's proportions:

- step times: the mean chunk gap of the baseline's usable cells (both phases) and of the arm's.
  Under vLLM each content chunk after a request's first is one engine step, so these are the mean
  baseline and speculative step times at that load.
- break-even tokens per decode step: speculative step / baseline step. A speculative server makes
  its tokens as fast as the baseline when each of its steps carries this many tokens per request.
- tokens per decode step the arm made: its streams' tokens per content chunk after each request's
  first, the last chunk included, as vLLM's own counters count it (generation tokens less first
  tokens, over inter-token-latency observations), so the live figure and this one are the same
  quantity. Over all steps, not only those that drafted: for ngram, which proposes nothing without
  a match, ``1 + accepted / drafts`` counts only steps that drafted and reads higher.
- drift floor: that figure less the sweep's noise floor (its run-to-run noise in SLO-qualified
  tokens/s, pooled over every repeated cell, ``specfleet.stats.variance``): at the same step time,
  tokens per step and decode throughput fall by the same fraction, so a fall beyond the noise
  floor is one the sweep would have told from noise.

A figure that cannot be formed is None, with the reason in the bucket's notes.
"""

import math
from collections.abc import Mapping, Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import arm_plans
from specfleet.contract.server_args import DeploymentArgs
from specfleet.contract.sweep import SweepConfig
from specfleet.errors import InputError
from specfleet.measure.acceptance import counter_mean_acceptance_length
from specfleet.results.cell import CellResult
from specfleet.results.records import RequestRecord
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.mix import MixVerdict


class LoadBucket(RecordModel):
    """One concurrency level the sweep measured, and the figures the alerts compare with there."""

    concurrency: int
    running_above: float | None = Field(
        description="The bucket holds servers whose mean running requests is above this (None: from 0).")
    running_up_to: float | None = Field(description="... and at most this (None: no upper bound).")
    baseline_step_ms: float | None
    speculative_step_ms: float | None
    break_even_tokens_per_step: float | None = Field(description="Speculative step / baseline step.")
    tokens_per_step: float | None = Field(description="Tokens per decode step the arm's cells made.")
    acceptance_length: float | None = Field(description="1 + accepted / drafts of the arm's cells (vLLM's counters).")
    noise_floor: float | None
    drift_floor_tokens_per_step: float | None = Field(description="tokens_per_step x (1 - noise_floor).")
    notes: list[str] = Field(default_factory=list, description="Why a figure is None, and what to know.")


class MonitorBasis(RecordModel):
    sweep_id: str
    arm: str
    method: str
    k: int
    sampling: str
    adopted: bool = Field(description="Whether the sweep adopted the arm at its traffic mix (else named by hand).")
    buckets: list[LoadBucket]
    rollback_command: str = Field(description="The speculation-off server: the replica's rollback.")


def running_bounds(levels: Sequence[int]) -> list[tuple[float | None, float | None]]:
    """Per level, the running-requests interval nearest it on a log scale, ties to the lower
    (``specfleet.production.traffic_estimate.nearest_level``): the bounds are the geometric means of neighbours."""
    cuts = [math.sqrt(low * high) for low, high in zip(levels, levels[1:], strict=False)]
    return [(cuts[i - 1] if i > 0 else None, cuts[i] if i < len(cuts) else None) for i in range(len(levels))]


def mean_step_ms(cells: Sequence[CellResult]) -> float | None:
    """The mean chunk gap over the cells' gaps pooled (each cell's mean weighted by its count)."""
    pairs = [(c.itl_per_chunk_ms.mean, c.itl_per_chunk_ms.count) for c in cells
             if c.itl_per_chunk_ms.mean is not None and c.itl_per_chunk_ms.count > 0]
    gaps = sum(n for _, n in pairs)
    return sum(mean * n for mean, n in pairs) / gaps if gaps else None


def decode_tokens_per_step(records: Sequence[RequestRecord]) -> float | None:
    """Tokens per content chunk after each request's first (the prefill step's), the last included."""
    streamed = [r for r in records if r.ok and len(r.chunk_tokens) > 1]
    steps = sum(len(r.chunk_tokens) - 1 for r in streamed)
    return sum(sum(r.chunk_tokens[1:]) for r in streamed) / steps if steps else None


def choose_arm(sweep_id: str, config: SweepConfig, mix: Sequence[MixVerdict],
               arm: str | None) -> tuple[str, str, bool]:
    """The arm to watch, the sampling mode its figures come from, and whether the sweep adopted it:
    the named arm, else the adoptable verdict at the traffic mix whose corrected interval saves most
    at its low end (the intervals are simultaneous over the sweep's claims, so the pick is covered)."""
    speculative = [plan.arm for plan in arm_plans(config)[1:]]
    verdicts = [v for v in mix if v.name in speculative]
    if arm is not None:
        if arm not in speculative:
            raise InputError(f"--arm {arm}: not a speculative arm of sweep {sweep_id} "
                             f"(its arms: {', '.join(speculative) or 'none'})")
        own = sorted((v for v in verdicts if v.name == arm), key=lambda v: not v.adoptable)
        sampling = own[0].sampling if own else config.sampling[0].name
        return arm, sampling, bool(own) and own[0].adoptable
    adoptable = [v for v in verdicts if v.adoptable]
    if not adoptable:
        why = "it formed no verdict at the traffic mix" if not verdicts else "no verdict is adoptable"
        raise InputError(f"{sweep_id}: no speculative arm was adopted at the traffic mix ({why}); "
                         f"name one with --arm to watch it anyway")
    best = max(adoptable, key=lambda v: -math.inf if v.fleet.pessimistic_saving_fraction is None
               else v.fleet.pessimistic_saving_fraction)
    return best.name, best.sampling, True


def _bucket(level: int, bounds: tuple[float | None, float | None], base: Sequence[CellResult],
            spec: Sequence[CellResult], records: Mapping[str, Sequence[RequestRecord]], noise: float | None,
            arm: str) -> LoadBucket:
    notes = []
    base_ms, spec_ms = mean_step_ms(base), mean_step_ms(spec)
    if base_ms is None:
        notes.append(f"no usable baseline cell with chunk gaps at concurrency {level}: no break-even")
    if spec_ms is None:
        notes.append(f"no usable {arm} cell with chunk gaps at concurrency {level}: nothing to compare with")
    break_even = spec_ms / base_ms if spec_ms is not None and base_ms else None
    tokens = decode_tokens_per_step([r for c in spec for r in records.get(c.key, ())])
    if tokens is None and spec_ms is not None:
        notes.append(f"no stored request records of {arm} at concurrency {level}: no tokens per step, no drift floor")
    if noise is None:
        notes.append(f"no noise floor (no configuration of the sweep was measured twice): no drift alert at "
                     f"concurrency {level}")
    if tokens is not None and break_even is not None and tokens <= break_even:
        notes.append(f"the sweep's own {arm} cells at concurrency {level} made {tokens:.2f} tokens per step, not "
                     f"above the break-even {break_even:.2f}: speculation did not pay there, the alert fires at once")
    return LoadBucket(
        concurrency=level, running_above=bounds[0], running_up_to=bounds[1], baseline_step_ms=base_ms,
        speculative_step_ms=spec_ms, break_even_tokens_per_step=break_even, tokens_per_step=tokens,
        acceptance_length=counter_mean_acceptance_length(spec), noise_floor=noise,
        drift_floor_tokens_per_step=None if tokens is None or noise is None else tokens * (1.0 - noise),
        notes=notes,
    )


def monitor_basis(sweep_id: str, config: SweepConfig, cells: Sequence[CellResult],
                  records: Mapping[str, Sequence[RequestRecord]], mix: Sequence[MixVerdict],
                  deployment: DeploymentArgs, noise: Sequence[RunNoise], arm: str | None = None) -> MonitorBasis:
    """The figures per concurrency level for the adopted arm (or ``arm``); ``records`` by cell key."""
    chosen, sampling, adopted = choose_arm(sweep_id, config, mix, arm)
    levels = sorted(config.load.concurrency)
    if not levels:
        raise InputError(f"{sweep_id}: measured at request rates only; the alerts' load buckets are concurrency "
                         f"levels (vLLM's running-requests gauge)")
    plan = next(p for p in arm_plans(config) if p.arm == chosen)
    floor = next((n.relative_sd for n in noise if n.metric == "qualified_tokens_per_s"), None)

    def at(level: int, arm_id: str | None) -> list[CellResult]:
        return [c for c in cells if c.usable and c.identity.concurrency == level and c.identity.sampling == sampling
                and (c.identity.arm == arm_id if arm_id else c.identity.method == "baseline")]

    buckets = [_bucket(level, bounds, at(level, None), at(level, chosen), records, floor, chosen)
               for level, bounds in zip(levels, running_bounds(levels), strict=True)]
    if all(b.break_even_tokens_per_step is None for b in buckets):
        raise InputError(f"{sweep_id}: no break-even for {chosen} at any concurrency ({buckets[0].notes[0]})")
    assert plan.k is not None  # a speculative arm
    return MonitorBasis(sweep_id=sweep_id, arm=chosen, method=plan.method, k=plan.k, sampling=sampling,
                        adopted=adopted, buckets=buckets, rollback_command=deployment.command())
