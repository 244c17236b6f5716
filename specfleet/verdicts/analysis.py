"""A sweep's analysis from its stored measurements: the equivalence and quality gates, every
cell's decision, the k policies and the verdicts at the traffic mix. The sweep's aggregate step
and a report of a sweep that stopped before aggregating both call ``analyse_sweep``, so a verdict
has one way to be made: every claim (cells, classes, arms at the mix, every k assignment a policy
could choose) goes into one family, decided at once by ``specfleet.verdicts.rule``."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.matrix import SYNTHETIC_LABEL
from specfleet.errors import InputError
from specfleet.gates.equivalence import ArmEquivalence, EquivalenceProbe, arm_equivalence
from specfleet.gates.quality import QualityCheck, QualityProbe, SliceKey, quality_checks, quality_samplings
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.quality import GateResult
from specfleet.stats.runs import RunValue
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.cell import Decision, cell_cases, decide_cases
from specfleet.verdicts.evidence import Evidence
from specfleet.verdicts.kpolicy import KPolicy, KPolicyReport, k_policy_reports
from specfleet.verdicts.mix import MixClaims, MixVerdict
from specfleet.verdicts.nights import Nights
from specfleet.verdicts.policy_arm import (
    DerivedPolicies,
    PolicyComparison,
    compare_policies_measured,
    with_recommendations,
)
from specfleet.verdicts.sequential import Look


@dataclass(frozen=True)
class SweepAnalysis:
    equivalence: list[ArmEquivalence]
    quality: list[QualityCheck]
    decisions: list[Decision]
    policies: list[KPolicyReport]
    mix: list[MixVerdict]
    mix_note: str | None
    """Why there is no verdict at the traffic mix; None when ``mix`` was formed."""
    noise: list[RunNoise]
    """The sweep's run-to-run noise per figure (SLO-qualified tokens/s, ITL): the noise floor."""
    synthetic_cells: list[str] = field(default_factory=list)
    """Labels of the cells measured at synthetic acceptance: calibration only, never decided on."""
    policy_comparisons: list[PolicyComparison] = field(default_factory=list)
    """Each measured k policy's verdict beside the composed one (``policy.measure``)."""
    look: Look | None = None
    """With ``analysis.nights``: which look of its sequence the sweep is, at what confidence it decided."""

    @property
    def gates(self) -> dict[str, list[GateResult]]:
        """The equivalence gates per speculative arm; an arm without a greedy result has none (its decisions
        say so). The quality gates, one per arm, prompt class and sampling mode, are in ``quality``."""
        return {e.arm: e.gates for e in self.equivalence if e.greedy is not None}

    @property
    def notes(self) -> list[str]:
        mix = [self.mix_note] if self.mix_note else []
        synthetic = [f"{len(self.synthetic_cells)} cells measured at synthetic acceptance ({SYNTHETIC_LABEL}): "
                     "they calibrate the performance model's step cost; no gate, decision, policy or verdict reads "
                     "them"] if self.synthetic_cells else []
        return [*mix, *synthetic, *(f"{e.arm}: {reason}" for e in self.equivalence for reason in e.unavailable)]


@dataclass(frozen=True)
class Verdicts:
    """What the one family decides: every cell's decision, the k policies, the verdicts at the mix."""

    decisions: list[Decision]
    policies: list[KPolicyReport]
    mix: list[MixVerdict]
    mix_note: str | None
    noise: list[RunNoise]


def analyse_sweep(config: SweepConfig, cells: Sequence[CellResult], records: Mapping[str, Sequence[RequestRecord]],
                  probes: Mapping[str, EquivalenceProbe], quality_probes: Mapping[str, QualityProbe],
                  engine_findings: Sequence[str] = (), history: Sequence[RunValue] = (),
                  derived: DerivedPolicies | None = None,
                  composed_mix: Sequence[MixVerdict] | None = None, nights: Nights | None = None) -> SweepAnalysis:
    """``records`` by cell key (usable cells without records get no sample); ``probes`` and
    ``quality_probes`` by arm. Each decision consumes its arm's equivalence gates and its slice's
    quality gate. ``engine_findings``: defects of the installed engine that taint every sampled
    result of a speculative arm (its stochastic gate and its decisions at temperature > 0 name them).
    ``history``: earlier sweeps' repeated runs pooled into the noise (``analysis.noise_history``).
    ``derived``: the k policies the sweep measured as arms (their arms are in ``config``);
    ``composed_mix``: a follow-up's composed verdicts, from the sweep that chose them. ``nights``: the
    sweep as a look of a sequence (``analysis.nights``): decided at the look's confidence over its own
    runs and the earlier looks', the previous look's decided verdicts kept."""
    if nights is not None:
        config = config.model_copy(update={"analysis": config.analysis.model_copy(
            update={"confidence": nights.look.confidence})})
    synthetic = [c for c in cells if c.identity.synthetic]
    cells = [c for c in cells if not c.identity.synthetic]
    equivalence = arm_equivalence(config, [p for p in arm_plans(config) if not p.synthetic], probes, engine_findings)
    quality = sweep_quality(config, quality_probes, engine_findings)
    samples = {c.key: CellSample.from_records(c, records[c.key], config.slo)
               for c in cells if c.usable and c.key in records}
    gates = {e.arm: e.gates for e in equivalence if e.greedy is not None}
    verdicts = decide_sweep(config, cells, samples, gates, {q.key: q.gate() for q in quality},
                            baseline_output_tokens(cells, records), history,
                            [p.policy for p in derived.policies] if derived is not None else [],
                            nights.runs if nights is not None else ())
    decisions = [_with_findings(d, config, engine_findings) for d in verdicts.decisions]
    mix = verdicts.mix
    if nights is not None:
        decisions, mix = nights.carry_decisions(decisions), nights.carry_mix(mix)
    comparisons = [] if derived is None else compare_policies_measured(derived, mix, verdicts.policies,
                                                                       composed_mix)
    return SweepAnalysis(equivalence, quality, decisions, with_recommendations(verdicts.policies, comparisons),
                         mix, verdicts.mix_note, verdicts.noise, [c.identity.label for c in synthetic],
                         comparisons, nights.look if nights is not None else None)


def decide_sweep(config: SweepConfig, cells: Sequence[CellResult], samples: Mapping[str, CellSample],
                 gates: Mapping[str, Sequence[GateResult]], quality: Mapping[SliceKey, GateResult],
                 output_tokens_per_request: Mapping[str, float], history: Sequence[RunValue] = (),
                 measured_policies: Sequence[KPolicy] = (), sequence: Sequence[RunValue] = ()) -> Verdicts:
    """Every claim of the sweep in one family, decided at once: cells, classes, arms at the mix and
    every k assignment a policy could choose; then the decisions, the policies and the verdicts
    (``measured_policies``: those the sweep measured as arms, each composed too; ``sequence``: the earlier
    looks' runs, ``analysis.nights``)."""
    evidence = Evidence.of(cells, samples, config.slo, config.analysis, arm_plans(config)[0].arm, history, sequence)
    cases = cell_cases(cells, samples, config, evidence, gates, quality)
    try:
        mix_claims: MixClaims | None = MixClaims.add_to(evidence, cases, config, output_tokens_per_request)
        mix_note = None
    except InputError as error:  # request shares of a class the baseline never served
        mix_claims, mix_note = None, f"no verdict at the traffic mix: {error}"
    results = evidence.decide()
    decisions = decide_cases(cases, results, config, evidence)
    policies = k_policy_reports(decisions, cells, config)
    mix = mix_claims.verdicts(results, decisions, policies, measured_policies) if mix_claims is not None else []
    return Verdicts(decisions, policies, mix, mix_note, list(evidence.noise.values()))


def baseline_output_tokens(cells: Sequence[CellResult],
                           records: Mapping[str, Sequence[RequestRecord]]) -> dict[str, float]:
    """Mean output tokens per completed request of each prompt class on the baseline's usable cells:
    what turns a traffic block's request shares into token shares."""
    tokens: dict[str, list[int]] = {}
    for cell in cells:
        if cell.identity.method == "baseline" and cell.usable:
            tokens.setdefault(cell.identity.prompt_class, []).extend(
                r.streamed_tokens for r in records.get(cell.key, ()) if r.ok)
    return {name: sum(counts) / len(counts) for name, counts in tokens.items() if counts}


def sweep_quality(config: SweepConfig, quality_probes: Mapping[str, QualityProbe],
                  engine_findings: Sequence[str] = ()) -> list[QualityCheck]:
    """The quality gates, those at a temperature above 0 carrying the engine findings."""
    return [check.model_copy(update={"engine_findings": list(engine_findings)})
            if _sampled(config, check.sampling, engine_findings) else check
            for check in quality_checks(config, quality_probes)]


def _sampled(config: SweepConfig, sampling: str, engine_findings: Sequence[str]) -> bool:
    """Whether results at this sampling mode carry the engine findings: any mode above temperature 0."""
    spec = next(s for s in quality_samplings(config) if s.name == sampling)
    return bool(engine_findings) and not spec.greedy


def _with_findings(decision: Decision, config: SweepConfig, engine_findings: Sequence[str]) -> Decision:
    if not _sampled(config, decision.slice.sampling, engine_findings):
        return decision
    return decision.model_copy(update={"reason": "; ".join([decision.reason, *engine_findings])})
