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
- ``promote``: nothing of the above, every class compared, and every class serves more SLO-qualified
  tokens/s beyond the noise.
- ``hold``: the rest: the difference is within the noise, or a class could not be compared (a
  replica's cell is not usable, e.g. its client saturated: a measurement that says nothing about
  the candidate, neither bad input nor a reason to roll back).
"""

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from specfleet.contract.base import RecordModel
from specfleet.decisions import Comparison
from specfleet.results.cell import CellStatus
from specfleet.stats.quality import QualityResult

Verdict = Literal["promote", "hold", "rollback"]
Replica = Literal["baseline", "candidate"]
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


class UnusableCell(RecordModel):
    """A replica's measured cell on one class that is not usable: its own status and reasons."""

    replica: Replica
    status: CellStatus
    reasons: list[str]

    def describe(self) -> str:
        return f"the {self.replica}'s cell is {self.status}: {'; '.join(self.reasons)}"

    def acceptance(self) -> AcceptanceFigure:
        """No figure from a cell that is not usable (a saturated client merges chunks, for one)."""
        return AcceptanceFigure(value=None, source="none", requests=0, note=f"not compared: {self.describe()}")


class ClassComparison(RecordModel):
    prompt_class: str
    comparison: Comparison | None = Field(
        description="None when the class could not be compared (``not_compared`` says why).")
    baseline_acceptance: AcceptanceFigure
    candidate_acceptance: AcceptanceFigure
    candidate_tokens_per_step: float | None = Field(
        description="The client's estimate over all engine steps (vLLM's per-request figure counts only "
        "steps that drafted): what the break-even is compared with. None when the candidate's cell is not usable.")
    break_even_acceptance: float | None = Field(
        description="The sweep's break-even tokens per step for the candidate's arm at this load; None "
        "without a sweep or where it has none.")
    quality: QualityResult | None = Field(
        description="None where the class has no scored set, or (``quality_note``) a replica of a class not "
        "compared could not answer it.")
    findings: list[str] = Field(
        description="Why this class is worse (rollback) or better (promote); empty: within the noise, or not "
        "compared.")
    worse: bool
    better: bool
    not_compared: str | None = Field(
        None, description="Why the class could not be compared (from ``unusable_cells``); None when it was.")
    unusable_cells: list[UnusableCell] = Field(
        default_factory=list, description="The replicas' cells on this class that are not usable.")
    quality_note: str | None = Field(None, description="Why ``quality`` is None although the class has a scored set.")

    @model_validator(mode="after")
    def _compared_or_why_not(self) -> "ClassComparison":
        if (self.comparison is None) != bool(self.unusable_cells) or (self.comparison is None) != (
                self.not_compared is not None):
            raise ValueError("a class is compared, or it has unusable cells and says why it was not compared")
        return self


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
    worse.extend(_apart_findings(quality, candidate_tokens_per_step, break_even_acceptance))
    return ClassComparison(
        prompt_class=prompt_class, comparison=comparison, baseline_acceptance=baseline_acceptance,
        candidate_acceptance=candidate_acceptance, candidate_tokens_per_step=candidate_tokens_per_step,
        break_even_acceptance=break_even_acceptance, quality=quality,
        findings=worse or better, worse=bool(worse), better=bool(better) and not worse)


def uncompared_class(prompt_class: str, unusable: Sequence[UnusableCell], baseline_acceptance: AcceptanceFigure,
                     candidate_acceptance: AcceptanceFigure, candidate_tokens_per_step: float | None,
                     break_even_acceptance: float | None, quality: QualityResult | None,
                     quality_note: str | None = None) -> ClassComparison:
    """A class a replica's unusable cell keeps from being compared: never better; worse only on
    what needs no comparison of the two cells (the scored set's answers; the candidate's tokens
    per step against the break-even, when its cell is usable)."""
    if not unusable:
        raise ValueError("a class not compared needs the cell that kept it from being compared")
    if any(cell.replica == "candidate" for cell in unusable) and candidate_tokens_per_step is not None:
        raise ValueError("no tokens per step from the candidate's unusable cell")
    worse = _apart_findings(quality, candidate_tokens_per_step, break_even_acceptance)
    return ClassComparison(
        prompt_class=prompt_class, comparison=None, baseline_acceptance=baseline_acceptance,
        candidate_acceptance=candidate_acceptance, candidate_tokens_per_step=candidate_tokens_per_step,
        break_even_acceptance=break_even_acceptance, quality=quality, findings=worse, worse=bool(worse),
        better=False, not_compared="; ".join(cell.describe() for cell in unusable), unusable_cells=list(unusable),
        quality_note=quality_note)


def _apart_findings(quality: QualityResult | None, per_step: float | None, break_even: float | None) -> list[str]:
    """What is worse without comparing the two cells: quality, and tokens per step below the break-even."""
    worse = [f"quality: {quality.gate().detail}"] if quality is not None and not quality.passed else []
    if per_step is not None and break_even is not None and per_step < break_even:
        worse.append(f"{per_step:.2f} tokens per step, below the sweep's break-even {break_even:.2f}")
    return worse


def canary_verdict(classes: Sequence[ClassComparison]) -> tuple[Verdict, str]:
    """``rollback`` if any class is worse, ``promote`` if every class is compared and better, else
    ``hold`` (naming the classes not compared)."""
    worse = [c for c in classes if c.worse]
    uncompared = "; ".join(f"{c.prompt_class} could not be compared ({c.not_compared})"
                           for c in classes if c.not_compared)
    if worse:
        found = "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in worse)
        return "rollback", f"{found}; {uncompared}" if uncompared else found
    if classes and all(c.better for c in classes):
        return "promote", "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in classes)
    within = [c.prompt_class for c in classes if not c.better and c.not_compared is None]
    noise = f"within the noise on {', '.join(within)}"
    if not uncompared:
        return "hold", f"{noise}: no class worse, not every class better"
    return "hold", f"{uncompared}: no promote without every class compared" + (f"; {noise}" if within else "")


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
