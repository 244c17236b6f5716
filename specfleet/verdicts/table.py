"""Decisions as flat rows: the cost table, and, its rejected rows, the negative-result table (seed:
"A negative result should be published with the same detail as a positive one"). The sweep's report
shows both as views of its decisions (``specfleet.report.sweep_report``)."""

from collections.abc import Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.sweep import SweepConfig
from specfleet.verdicts.cell import Decision


class DecisionRow(RecordModel):
    verdict: str
    reason_code: str
    reason: str
    engine: str
    engine_version: str | None
    hardware: str
    load_mode: str
    load_value: float
    concurrency: int | None
    prompt_class: str
    sampling: str
    method: str
    k: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None = Field(description="1 + accepted / drafts: conditional on drafting.")
    tokens_per_step: float | None = Field(None, description="Tokens per engine step over all steps: what speedup "
                                          "follows (None in summaries written before it existed).")
    qualified_tps_speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    itl_speedup: float | None
    baseline_cost_per_million_usd: float | None
    candidate_cost_per_million_usd: float | None
    baseline_replicas: int | None
    candidate_replicas: int | None
    saving_fraction: float | None
    noise_floor: float | None
    detectable_saving_fraction: float | None = Field(
        None, description="The minimum detectable saving at 80 % power (None: no interval, or a summary written "
        "before it existed).")


def hardware_label(config: SweepConfig) -> str:
    """The hardware per replica as a row names it."""
    hw = config.hardware
    text = f"{hw.accelerators_per_replica} x {hw.accelerator} per replica, TP {hw.tensor_parallel_size}"
    return text + (" (illustrative price)" if hw.price_is_illustrative else "")


def decision_rows(decisions: Sequence[Decision], engine: str, hardware: str) -> list[DecisionRow]:
    """One row per decision, adopted, rejected or inconclusive, with the same columns; ``engine`` and
    ``hardware`` (``hardware_label``) as every row names them."""
    rows = []
    for d in decisions:
        s, c, cost = d.slice, d.comparison, d.cost
        tps = c.qualified_tps_speedup if c else None
        rows.append(DecisionRow(
            verdict=d.verdict, reason_code=d.reason_code, reason=d.reason, engine=engine,
            engine_version=c.engine_version if c else None, hardware=hardware,
            load_mode=s.load_mode, load_value=s.load_value,
            concurrency=int(s.load_value) if s.load_mode == "concurrency" else None,
            prompt_class=s.prompt_class, sampling=s.sampling, method=s.method, k=s.k,
            acceptance_rate=c.acceptance_rate if c else None,
            mean_acceptance_length=c.mean_acceptance_length if c else None,
            tokens_per_step=c.tokens_per_step if c else None,
            qualified_tps_speedup=tps.estimate if tps else None,
            speedup_low=tps.low if tps else None, speedup_high=tps.high if tps else None,
            itl_speedup=c.itl_speedup.estimate if c and c.itl_speedup else None,
            baseline_cost_per_million_usd=cost.baseline_cost_per_million_usd if cost else None,
            candidate_cost_per_million_usd=cost.candidate_cost_per_million_usd if cost else None,
            baseline_replicas=cost.baseline_replicas if cost else None,
            candidate_replicas=cost.candidate_replicas if cost else None,
            saving_fraction=cost.saving_fraction if cost else None,
            noise_floor=cost.noise_floor if cost else None,
            detectable_saving_fraction=d.detection.saving_fraction if d.detection else None,
        ))
    return rows

