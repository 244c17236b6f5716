"""The canary's verdict (seed, "Production gates, drift monitoring and rollback": "route a small
share of traffic to a speculative replica and compare acceptance, ITL percentiles and
quality-gate scores with a matched baseline replica"). Pure: the figures come in measured.

Per prompt class the candidate is compared with the baseline replica that served the same prompts
in the same order at the same load, side by side (``specfleet.decisions.compare_cells``: SLO-qualified
tokens/s and SLO-percentile ITL as candidate-over-baseline speedups with bootstrap intervals over
requests). "Beyond the noise" means beyond the interval and, with a sweep (``--from``), beyond its
noise floor too: the spread of its repeated and bracketing baseline cells, which is what two
identical replicas differ by.

- ``rollback``: some class is worse beyond the noise (tokens/s or ITL), misses the SLO where the
  baseline meets it, scores lower than the quality tolerance allows, or accepts fewer tokens per
  step than the sweep's break-even for its arm.
- ``promote``: nothing of the above, and every class serves more SLO-qualified tokens/s beyond the noise.
- ``hold``: the rest (the difference is within the noise).
"""

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.decisions import Comparison
from specfleet.stats.quality import QualityResult

Verdict = Literal["promote", "hold", "rollback"]
VERDICT_EVENT = "specfleet.rollback.recommended"
"""The Prefect event a ``rollback`` verdict emits (``infra/prefect/prefect.yaml`` automates on it)."""


class AcceptanceFigure(RecordModel):
    """A replica's mean acceptance length on one class (tokens per engine step, bonus included)."""

    value: float | None
    source: Literal["vllm_per_request", "client_estimate", "none"] = Field(
        description="vLLM's per-request figure where the replica sends it, else the client's estimate "
        "from tokens per stream chunk; 'none' with the reason in ``note``.")
    requests: int = Field(description="Requests the mean is over.")
    note: str | None = None


class ClassComparison(RecordModel):
    prompt_class: str
    comparison: Comparison
    baseline_acceptance: AcceptanceFigure
    candidate_acceptance: AcceptanceFigure
    candidate_tokens_per_step: float | None = Field(
        description="The client's estimate over all engine steps (vLLM's per-request figure counts only "
        "steps that drafted): what the break-even is compared with.")
    break_even_acceptance: float | None = Field(
        description="The sweep's break-even tokens per step for the candidate's arm at this load; None "
        "without a sweep or where it has none.")
    quality: QualityResult | None = Field(description="None where the class has no scored set.")
    findings: list[str] = Field(
        description="Why this class is worse (rollback) or better (promote); empty: within the noise.")
    worse: bool
    better: bool


class CanaryResult(RecordModel):
    verdict: Verdict
    reason: str
    noise_floor: float | None = Field(description="The sweep's relative noise floor; None without --from.")
    noise_source: str
    sweep_id: str | None
    arm: str | None = Field(description="The sweep's arm the candidate runs (its break-even), if known.")
    rollback_server_args: list[str] | None = Field(
        description="The speculation-off server arguments the sweep stored for the same target: what a "
        "rollback deploys.")
    classes: list[ClassComparison]


def compare_class(prompt_class: str, comparison: Comparison, baseline_acceptance: AcceptanceFigure,
                  candidate_acceptance: AcceptanceFigure, candidate_tokens_per_step: float | None,
                  noise_floor: float | None, break_even_acceptance: float | None,
                  quality: QualityResult | None) -> ClassComparison:
    """One class's findings: worse or better beyond the interval and the noise floor."""
    noise = noise_floor or 0.0
    worse: list[str] = []
    better: list[str] = []
    tps = comparison.qualified_tps_speedup
    if tps is not None and tps.high is not None and tps.high < 1.0 - noise:
        worse.append(f"SLO-qualified tokens/s x{tps.estimate:.2f} [{tps.low:.2f}, {tps.high:.2f}], below 1 "
                     f"by more than the noise ({noise:.1%})")
    if tps is not None and tps.low is not None and tps.low > 1.0 + noise:
        better.append(f"SLO-qualified tokens/s x{tps.estimate:.2f} [{tps.low:.2f}, {tps.high:.2f}], above 1 "
                      f"by more than the noise ({noise:.1%})")
    itl = comparison.itl_speedup
    if itl is not None and itl.high is not None and itl.high < 1.0 - noise:
        worse.append(f"p{comparison.slo_percentile:g} ITL {comparison.candidate_itl_ms:.1f} ms against "
                     f"{comparison.baseline_itl_ms:.1f} ms, slower beyond the noise")
    if comparison.baseline_slo_holds and not comparison.candidate_slo_holds:
        worse.append("misses the SLO where the baseline meets it")
    if quality is not None and not quality.passed:
        worse.append(f"quality: {quality.gate().detail}")
    per_step = candidate_tokens_per_step
    if per_step is not None and break_even_acceptance is not None and per_step < break_even_acceptance:
        worse.append(f"{per_step:.2f} tokens per step, below the sweep's break-even {break_even_acceptance:.2f}")
    return ClassComparison(
        prompt_class=prompt_class, comparison=comparison, baseline_acceptance=baseline_acceptance,
        candidate_acceptance=candidate_acceptance, candidate_tokens_per_step=candidate_tokens_per_step,
        break_even_acceptance=break_even_acceptance, quality=quality,
        findings=worse or better, worse=bool(worse), better=bool(better) and not worse)


def canary_verdict(classes: Sequence[ClassComparison]) -> tuple[Verdict, str]:
    """``rollback`` if any class is worse, ``promote`` if every class is better, else ``hold``."""
    worse = [c for c in classes if c.worse]
    if worse:
        return "rollback", "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in worse)
    if classes and all(c.better for c in classes):
        return "promote", "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in classes)
    within = [c.prompt_class for c in classes if not c.better]
    return "hold", f"within the noise on {', '.join(within)}: no class worse, not every class better"


def acceptance_figure(vllm_per_request: Sequence[float | None], client_estimates: Sequence[float | None]
                      ) -> AcceptanceFigure:
    """The replica's mean over requests: vLLM's per-request figures where it sent any, else the
    client's estimates; None with the reason when neither exists (a baseline replica, or streams
    too short to estimate)."""
    for source, values in (("vllm_per_request", vllm_per_request), ("client_estimate", client_estimates)):
        found = [v for v in values if v is not None]
        if found:
            return AcceptanceFigure(value=sum(found) / len(found), source=source, requests=len(found))  # type: ignore[arg-type]
    return AcceptanceFigure(value=None, source="none", requests=0,
                            note="no request carried vLLM's per-request figure or enough chunks to estimate one")
