"""The held-out quality gates of a sweep: per speculative arm, prompt class and sampling mode,
from the answers each arm stored.

Seed, "An equivalence test that survives numerics": "Add a held-out task-quality gate for both
lossless and lossy methods." Every arm, the baseline included, answers each class's scored set
(``specfleet.gates.scored_set``) on its idle server before its cells, at greedy and at each sampling
mode; the gate (``specfleet.stats.quality.quality_gate``) compares a candidate's per-item scores
with the baseline's. A gate that cannot run says why (``quality_not_run``); it never passes.
"""

import zlib
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field, model_validator

from specfleet.contract import SamplingSpec, SweepConfig, arm_plans
from specfleet.contract.base import RecordModel
from specfleet.gates.scored_set import ScoredItem, score_answers
from specfleet.stats.quality import GateResult, QualityResult, quality_gate, quality_not_run

SliceKey = tuple[str, str, str]
"""(arm, prompt class, sampling mode): what one quality gate covers."""


class ItemAnswer(RecordModel):
    """One arm's answer to one scored item."""

    answer: str | None = Field(description="The generated text; None when the request failed (error says why).")
    error: str | None = None
    score: float | None = Field(description="The item's scorer on the answer, in [0, 1]; None without an answer.")


class ClassAnswers(RecordModel):
    """One arm's answers to one prompt class's scored set, per sampling mode."""

    source: str = Field(description="The scored set's file.")
    sha256: str = Field(description="Of the scored set's text (specfleet.gates.scored_set.ScoredSet).")
    answers: dict[str, dict[str, ItemAnswer]] = Field(description="Sampling mode -> item id -> answer.")

    def scores(self, sampling: str) -> dict[str, float | None]:
        return {item: answer.score for item, answer in self.answers[sampling].items()}


class QualityProbe(RecordModel):
    """What one arm's quality probe stored (``quality/<arm>.json``)."""

    arm: str
    classes: dict[str, ClassAnswers | None] = Field(
        description="By prompt class; None: the class has no scored set, so its gate cannot run.")


class QualityCheck(RecordModel):
    """The quality gate of one speculative arm on one prompt class at one sampling mode."""

    arm: str
    prompt_class: str
    sampling: str
    result: QualityResult | None = Field(None, description="None when the gate did not run (not_run says why).")
    not_run: str | None = Field(None, description="Why the gate did not run (it has not passed).")

    @model_validator(mode="after")
    def _result_or_why(self) -> "QualityCheck":
        if (self.result is None) == (self.not_run is None):
            raise ValueError("give exactly one of result or not_run")
        return self

    @property
    def key(self) -> SliceKey:
        return (self.arm, self.prompt_class, self.sampling)

    engine_findings: list[str] = Field(
        default_factory=list, description="Engine defects that taint these sampled answers (engine_findings).")

    def gate(self) -> GateResult:
        gate = (self.result.gate() if self.result is not None
                else quality_not_run(f"{self.prompt_class}/{self.sampling}: {self.not_run}"))
        if not self.engine_findings:
            return gate
        return gate.model_copy(update={"detail": "; ".join([gate.detail, *self.engine_findings])})


def quality_samplings(config: SweepConfig) -> list[SamplingSpec]:
    """The sweep's sampling modes, with a greedy one first when none is greedy: every arm answers
    the scored sets at greedy and at each sampling mode."""
    if any(s.greedy for s in config.sampling):
        return list(config.sampling)
    name = "greedy" if all(s.name != "greedy" for s in config.sampling) else "greedy-quality"
    return [SamplingSpec(name=name), *config.sampling]


def item_answers(items: Sequence[ScoredItem], answers: Mapping[str, str | None],
                 errors: Mapping[str, str]) -> dict[str, ItemAnswer]:
    """Each item's answer (None where its request failed: ``errors`` says why) with its score."""
    scores = score_answers(items, answers)
    return {item.id: ItemAnswer(answer=answers.get(item.id), error=errors.get(item.id), score=scores[item.id])
            for item in items}


def quality_checks(config: SweepConfig, probes: Mapping[str, QualityProbe]) -> list[QualityCheck]:
    """One check per speculative arm x prompt class x quality sampling mode; ``probes`` by arm."""
    plans = arm_plans(config)
    baseline = plans[0].arm
    out = []
    for plan in plans[1:]:
        if plan.synthetic:  # a calibration arm: its outputs are not the target's, and nothing decides on it
            continue
        for pc in config.prompt_classes:
            for sampling in quality_samplings(config):
                key = (plan.arm, pc.name, sampling.name)
                why = _why_not(config, key, probes.get(baseline), probes.get(plan.arm), baseline)
                result = None if why is not None else _gate(config, key, probes[baseline], probes[plan.arm])
                out.append(QualityCheck(arm=plan.arm, prompt_class=pc.name, sampling=sampling.name, result=result,
                                        not_run=why))
    return out


def _why_not(config: SweepConfig, key: SliceKey, baseline: QualityProbe | None, candidate: QualityProbe | None,
             baseline_arm: str) -> str | None:
    arm, prompt_class, sampling = key
    if config.equivalence.quality_tolerance is None:
        return "equivalence.quality_tolerance is unset"
    for name, probe in ((baseline_arm, baseline), (arm, candidate)):
        if probe is None or prompt_class not in probe.classes:
            return f"no stored quality answers of {name} for prompt class {prompt_class!r}"
    assert baseline is not None and candidate is not None
    base, cand = baseline.classes[prompt_class], candidate.classes[prompt_class]
    if base is None or cand is None:
        return f"prompt class {prompt_class!r} has no scored set (prompt_classes[].scored_set)"
    if base.sha256 != cand.sha256:
        return f"{baseline_arm} and {arm} answered different versions of {base.source}"
    for name, answers in ((baseline_arm, base), (arm, cand)):
        if sampling not in answers.answers:
            return f"no stored answers of {name} at sampling {sampling!r}"
    return None


def _gate(config: SweepConfig, key: SliceKey, baseline: QualityProbe, candidate: QualityProbe) -> QualityResult:
    arm, prompt_class, sampling = key
    tolerance = config.equivalence.quality_tolerance
    base, cand = baseline.classes[prompt_class], candidate.classes[prompt_class]
    assert tolerance is not None and base is not None and cand is not None  # _why_not said so
    rng = np.random.default_rng([config.analysis.seed, zlib.crc32("/".join(key).encode())])
    return quality_gate(base.scores(sampling), cand.scores(sampling), prompt_class=prompt_class, sampling=sampling,
                        tolerance=tolerance, confidence=config.analysis.confidence,
                        resamples=config.analysis.bootstrap_resamples, rng=rng)
