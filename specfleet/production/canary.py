"""The canary's verdict (seed, "Production gates, drift monitoring and rollback": "route a small
share of traffic to a speculative replica and compare acceptance, ITL percentiles and
quality-gate scores with a matched baseline replica"). Pure: the figures come in measured.

Per prompt class the candidate is compared with the baseline replica that served the same prompts
in the same order at the same load, at the same time: paired, prompt by prompt. Each class makes
four claims in one family (``specfleet.verdicts.rule``): more SLO-qualified tokens/s, fewer, a
faster and a slower SLO-percentile ITL. Pairing leaves only what two identical servers measuring
the same prompts side by side differ by: one window's run-to-run noise on each of two server
lives, which the sweep given with ``--from`` estimated (its repeated and bracketing baseline cells,
with its ``analysis.noise_history``); the intervals carry it, corrected over every claim of the
canary. Without a sweep there is no noise estimate: no interval states a confidence and none of
the claims can be made.

- ``rollback``: some class is worse (fewer tokens/s or slower ITL, adopted by the one rule), misses
  the SLO where the baseline meets it, scores lower than the quality tolerance allows, or accepts
  fewer tokens per step than the sweep's break-even for its arm.
- ``promote``: nothing of the above, every class compared, every class serves more SLO-qualified
  tokens/s (adopted by the one rule), and every class passed its scored set.
- ``hold``: the rest: the difference is within the noise, there is no noise estimate (no
  ``--from``), a class could not be compared (a replica's cell is not usable: its client
  saturated, or too many of its requests failed), or a class has no scored set to pass. A hold
  says which of the rule's two non-adopts it is (``hold``): ``reject`` where this canary cannot
  promote whatever more it measures (a class without a scored set, the candidate's own cell not
  usable), else ``inconclusive`` (within the noise, no noise estimate, the baseline's cell not
  usable): a longer or repeated canary could decide it.

Like with like (``specfleet.production.replica_age``): the sweep's noise covers servers of like
age. Where the candidate and the replica it is compared with differ in age by more than
``--max-age-gap``, or an age cannot be read, the throughput, ITL and SLO findings are shown
(``not_covered_findings``) but neither promote nor roll back: ``hold`` (inconclusive) saying so.
Quality and tokens per step against the break-even do not depend on server speed: they still
roll back. With a fresh baseline twin (``--baseline-twin``) the candidate is compared with the
twin, and each class's ``age_difference`` is the long-running baseline against the twin.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from specfleet.contract.base import RecordModel
from specfleet.contract.checks import AnalysisSpec
from specfleet.contract.workload import SLOSpec
from specfleet.production.replica_age import AgeCoverage, Replica
from specfleet.results.cell import CellStatus
from specfleet.stats.bootstrap import Interval, speedup_text
from specfleet.stats.quality import QualityResult
from specfleet.stats.runs import ConfigKey, Metric, RunValue, percentile_run, rate_run
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.cell import Comparison, slo_holds
from specfleet.verdicts.rule import Claim, ClaimResult, Family

Verdict = Literal["promote", "hold", "rollback"]
HoldKind = Literal["reject", "inconclusive"]
REPLICAS: tuple[Replica, Replica] = ("baseline", "candidate")
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


class AgeDifference(RecordModel):
    """One class's long-running baseline against the fresh twin beside it: the age difference, measured."""

    qualified_tps_speedup: Interval | None = Field(
        description="The twin's SLO-qualified tokens/s over the baseline's, corrected over these claims.")
    itl_speedup: Interval | None = Field(
        description="The baseline's ITL over the twin's (above 1: the twin is faster), corrected likewise.")
    finding: str


class ClassComparison(RecordModel):
    prompt_class: str
    comparison: Comparison | None = Field(
        description="The candidate against the reference replica (the twin where one was measured, else the "
        "baseline: its figures are the comparison's baseline_*); None when the class could not be compared "
        "(``not_compared`` says why).")
    baseline_acceptance: AcceptanceFigure = Field(description="The reference replica's.")
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
    scored: bool = Field(True, description="The class has a scored set: without one it cannot promote.")
    not_covered_findings: list[str] = Field(
        default_factory=list, description="What the throughput, ITL and SLO comparisons found where the replicas' "
        "ages are not covered (``age.covered`` false): shown, not acted on.")
    age_difference: AgeDifference | None = Field(
        None, description="With a twin: the long-running baseline against it on this class; None without one, "
        "or with the reason in ``finding`` where a cell was not usable.")

    @model_validator(mode="after")
    def _compared_or_why_not(self) -> "ClassComparison":
        if (self.comparison is None) != bool(self.unusable_cells) or (self.comparison is None) != (
                self.not_compared is not None):
            raise ValueError("a class is compared, or it has unusable cells and says why it was not compared")
        return self


class CanaryResult(RecordModel):
    verdict: Verdict
    reason: str
    noise_floor: float | None = Field(description="The sweep's replica-to-replica noise (relative spread of one "
                                      "window on another server); None without --from.")
    noise_source: str
    comparisons: int | None = Field(None, description="Claims of the canary its intervals are corrected for.")
    sweep_id: str | None
    arm: str | None = Field(description="The sweep's arm the candidate runs (its break-even), if known.")
    rollback_server_args: list[str] | None = Field(
        description="The speculation-off server arguments the sweep stored for the same target: what a "
        "rollback deploys.")
    classes: list[ClassComparison]
    age: AgeCoverage = Field(description="The replicas' ages and whether the throughput and ITL claims are covered.")
    hold: HoldKind | None = Field(
        None, description="A hold's kind, derived from the classes: reject (cannot promote whatever more is "
        "measured: a class without a scored set, the candidate's cell not usable) or inconclusive (more "
        "measurement could decide it); None for promote and rollback.")

    @model_validator(mode="after")
    def _derive_hold(self) -> "CanaryResult":
        object.__setattr__(self, "hold", hold_kind(self.classes) if self.verdict == "hold" else None)
        return self


@dataclass(frozen=True)
class PairedClass:
    """One class both replicas measured usably: request i of each served the same prompt."""

    name: str
    baseline: CellSample
    candidate: CellSample
    sides: tuple[Replica, Replica] = REPLICAS
    """Which replicas ``baseline`` and ``candidate`` are: the twin against the candidate, or the
    baseline against the twin for the age difference."""

    @property
    def replicas(self) -> tuple[CellSample, CellSample]:
        return self.baseline, self.candidate


def canary_family(classes: Sequence[PairedClass], noise_runs: Sequence[RunValue], noise: Mapping[Metric, RunNoise],
                  slo: SLOSpec, analysis: AnalysisSpec) -> tuple[Family, dict[str, dict[str, Claim]]]:
    """Every class's runs (both figures, both replicas) and claims in one family beside the sweep's
    repeated runs, which its noise estimate comes from: tokens/s higher (``faster``) and lower
    (``slower``), ITL faster (``itl_faster``) and slower (``itl_slower``). Both replicas served the
    same prompts in the same order at the same time: their difference is the replica-to-replica
    noise the sweep measured, one window on each of two servers."""
    family = Family(list(noise_runs), noise, analysis.confidence, analysis.error_control, analysis.seed)
    claims = {paired.name: _class_claims(family, paired, slo) for paired in classes}
    return family, claims


def _class_claims(family: Family, paired: PairedClass, slo: SLOSpec) -> dict[str, Claim]:
    ident = paired.baseline.cell.identity
    config: ConfigKey = (paired.name, ident.load_mode, ident.load_value, "canary")
    claims: dict[str, Claim] = {}
    figures: tuple[tuple[Metric, list[RunValue | None], tuple[str, str]], ...] = (
        ("qualified_tokens_per_s", [rate_run(s, config) for s in paired.replicas], ("faster", "slower")),
        ("itl", [percentile_run(s, config, slo.percentile) for s in paired.replicas], ("itl_slower", "itl_faster")))
    for metric, values, names in figures:
        if values[0] is None or values[1] is None:
            continue
        at = len(family.runs)
        family.runs = [*family.runs, *(RunValue(metric, f"{replica} / {paired.name}", f"canary-{replica}", config,
                                                f"canary:{replica}", value.log_value)
                                       for replica, value in zip(paired.sides, values, strict=True) if value)]
        log = values[1].log_value - values[0].log_value
        for key, sign in zip(names, (1.0, -1.0), strict=True):
            claims[key] = family.add(Claim(f"canary:{paired.name}:{key}", "canary", sign * log,
                                           {at: -sign, at + 1: sign}, metric=metric))
    return claims


def class_claims(paired: PairedClass, results: Mapping[str, ClaimResult], claims: Mapping[str, Claim],
                 slo: SLOSpec, noise: Mapping[Metric, RunNoise]) -> tuple[Comparison, "ClassClaims"]:
    """The class's figures as a sweep's cell shows them, and its decided claims."""
    base, cand = paired.baseline, paired.candidate
    base_ok, _, base_itl = slo_holds([base], slo)
    cand_ok, cand_ttft, cand_itl = slo_holds([cand], slo)

    def result(key: str) -> ClaimResult | None:
        return results.get(claims[key].key) if key in claims else None

    faster, itl = result("faster"), result("itl_faster")
    comparison = Comparison(
        basis="runs" if noise["qualified_tokens_per_s"].estimated else "none", baseline_runs=1,
        candidate_runs=1, baseline_qualified_tokens_per_s=base.qualified_tokens_per_s,
        candidate_qualified_tokens_per_s=cand.qualified_tokens_per_s,
        qualified_tps_speedup=faster.marginal if faster else None,
        qualified_tps_speedup_corrected=faster.corrected if faster else None,
        itl_statistic=slo.itl_statistic, slo_percentile=slo.percentile, baseline_itl_ms=base_itl,
        candidate_itl_ms=cand_itl, itl_speedup=itl.marginal if itl else None, candidate_ttft_ms=cand_ttft,
        baseline_slo_holds=base_ok, candidate_slo_holds=cand_ok, acceptance_rate=None, mean_acceptance_length=None,
        tokens_per_step=None, engine_version=cand.cell.engine_version)
    return comparison, ClassClaims(result("faster"), result("slower"), result("itl_slower"))


@dataclass(frozen=True)
class ClassClaims:
    """One class's three claims, decided: more tokens/s, fewer tokens/s, slower ITL."""

    faster: ClaimResult | None
    slower: ClaimResult | None
    itl_slower: ClaimResult | None


def compare_class(prompt_class: str, comparison: Comparison, claims: ClassClaims,
                  baseline_acceptance: AcceptanceFigure, candidate_acceptance: AcceptanceFigure,
                  candidate_tokens_per_step: float | None, break_even_acceptance: float | None,
                  quality: QualityResult | None, scored: bool, covered: bool = True) -> ClassComparison:
    """One class's findings: worse or better as the one rule decides them. Where the replicas' ages
    are not covered, what the speed comparisons found is kept apart and counts for nothing."""
    worse: list[str] = []
    better: list[str] = []
    if claims.slower is not None and claims.slower.adopted:
        worse.append(f"SLO-qualified tokens/s {_ratio(claims.faster)}, lower beyond the noise "
                     f"({_level(claims.slower)})")
    if claims.faster is not None and claims.faster.adopted:
        better.append(f"SLO-qualified tokens/s {_ratio(claims.faster)}, higher beyond the noise "
                      f"({_level(claims.faster)})")
    if claims.itl_slower is not None and claims.itl_slower.adopted:
        worse.append(f"p{comparison.slo_percentile:g} ITL {comparison.candidate_itl_ms:.1f} ms against "
                     f"{comparison.baseline_itl_ms:.1f} ms, slower beyond the noise ({_level(claims.itl_slower)})")
    if comparison.baseline_slo_holds and not comparison.candidate_slo_holds:
        worse.append("misses the SLO where the baseline meets it")
    speed = [] if covered else [*worse, *better]
    if not covered:
        worse, better = [], []
    worse.extend(_apart_findings(quality, candidate_tokens_per_step, break_even_acceptance))
    return ClassComparison(
        prompt_class=prompt_class, comparison=comparison, baseline_acceptance=baseline_acceptance,
        candidate_acceptance=candidate_acceptance, candidate_tokens_per_step=candidate_tokens_per_step,
        break_even_acceptance=break_even_acceptance, quality=quality,
        findings=worse or better, worse=bool(worse), better=bool(better) and not worse, scored=scored,
        not_covered_findings=speed)


def _ratio(result: ClaimResult | None) -> str:
    if result is None:
        return "(no figure)"
    c = result.corrected
    return speedup_text(c.estimate, c.low, c.high, digits=3)


def _level(result: ClaimResult) -> str:
    return f"corrected for {result.comparisons} comparisons" if result.comparisons > 1 else "this comparison alone"


def uncompared_class(prompt_class: str, unusable: Sequence[UnusableCell], baseline_acceptance: AcceptanceFigure,
                     candidate_acceptance: AcceptanceFigure, candidate_tokens_per_step: float | None,
                     break_even_acceptance: float | None, quality: QualityResult | None,
                     quality_note: str | None = None, scored: bool = True) -> ClassComparison:
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
        quality_note=quality_note, scored=scored)


def _apart_findings(quality: QualityResult | None, per_step: float | None, break_even: float | None) -> list[str]:
    """What is worse without comparing the two cells: quality, and tokens per step below the break-even."""
    worse = [f"quality: {quality.gate().detail}"] if quality is not None and not quality.passed else []
    if per_step is not None and break_even is not None and per_step < break_even:
        worse.append(f"{per_step:.2f} tokens per step, below the sweep's break-even {break_even:.2f}")
    return worse


def canary_verdict(classes: Sequence[ClassComparison], noise_estimated: bool,
                   not_covered: str | None = None) -> tuple[Verdict, str]:
    """``rollback`` if any class is worse, ``promote`` if every class is compared, better and passed
    its scored set (which needs a noise estimate), else ``hold`` naming what kept it from promoting.
    ``not_covered``: why the replicas' ages leave the throughput and ITL claims uncovered (their
    findings are then kept out of ``worse`` and ``better`` by ``compare_class``)."""
    worse = [c for c in classes if c.worse]
    uncompared = "; ".join(f"{c.prompt_class} could not be compared ({c.not_compared})"
                           for c in classes if c.not_compared)
    if worse:
        found = "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in worse)
        if not_covered:
            found += (" (quality and tokens per step do not depend on server speed: they roll back whatever "
                      f"the servers' ages); throughput and ITL not covered: {not_covered}")
        return "rollback", f"{found}; {uncompared}" if uncompared else found
    unscored = [c.prompt_class for c in classes if not c.scored or c.quality is None]
    if classes and all(c.better for c in classes) and not unscored:
        return "promote", "; ".join(f"{c.prompt_class}: {', '.join(c.findings)}" for c in classes)
    why = []
    if not_covered:
        why.append(f"{not_covered}: nothing is promoted or rolled back on throughput or ITL")
    if not noise_estimated:
        why.append("no noise estimate (no --from sweep): nothing is beyond the noise, so nothing is promoted "
                   "or rolled back on throughput or ITL")
    if uncompared:
        why.append(f"{uncompared}: no promote without every class compared")
    if unscored:
        why.append(f"no scored set answered for {', '.join(unscored)}: a class without one cannot promote")
    within = [c.prompt_class for c in classes if not c.better and c.not_compared is None]
    if within and noise_estimated and not not_covered:
        why.append(f"within the noise on {', '.join(within)}")
    return "hold", "; ".join(why) + ("" if uncompared or unscored or not noise_estimated or not_covered else
                                     ": no class worse, not every class better")


def age_difference(results: Mapping[str, ClaimResult] | None, claims: Mapping[str, Claim] | None,
                   why_not: str | None = None) -> AgeDifference:
    """The long-running baseline against the twin on one class (the claims of the pair baseline,
    twin, decided in a family of their own: ``faster`` is the twin over the baseline), or why it
    was not measured."""
    if results is None or claims is None:
        return AgeDifference(qualified_tps_speedup=None, itl_speedup=None, finding=f"not measured: {why_not}")
    faster, slower, itl = (results.get(claims[key].key) if key in claims else None
                           for key in ("faster", "slower", "itl_faster"))
    figure = f"the fresh twin serves {_ratio(faster)} the long-running baseline's SLO-qualified tokens/s"
    if faster is not None and faster.adopted:
        finding = f"{figure}: faster, beyond the noise"
    elif slower is not None and slower.adopted:
        finding = f"{figure}: slower, beyond the noise"
    else:
        finding = f"{figure}: within the noise"
    return AgeDifference(qualified_tps_speedup=None if faster is None else faster.corrected,
                         itl_speedup=None if itl is None else itl.corrected, finding=finding)


def hold_kind(classes: Sequence[ClassComparison]) -> HoldKind:
    """A hold is a reject where some class cannot promote whatever more is measured (no scored set,
    or the candidate's own cell not usable), else inconclusive."""
    blocked = any(not c.scored or any(u.replica == "candidate" for u in c.unusable_cells) for c in classes)
    return "reject" if blocked else "inconclusive"


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
