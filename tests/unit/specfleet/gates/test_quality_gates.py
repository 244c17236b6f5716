"""A sweep's quality gates from stored answers: one per speculative arm, prompt class and sampling
mode, paired with the baseline's; a gate that cannot run says why, and the sweep's analysis hands
each decision its slice's gate."""

from pathlib import Path

import pytest

from specfleet.contract import SweepConfig, parse_sweep_config
from specfleet.gates.quality import (
    ClassAnswers,
    QualityCheck,
    QualityProbe,
    item_answers,
    quality_checks,
    quality_samplings,
)
from specfleet.gates.scored_set import ScoredSet

ROOT = Path(__file__).resolve().parents[4]
DEMO = (ROOT / "configs" / "demo-cpu.yaml").read_text()
SCORED_TEXT = "".join(f'{{"id": "q{i}", "prompt": "{i} + {i} =", "reference": {2 * i}, "scorer": "numeric"}}\n'
                      for i in range(1, 5))
SCORED = ScoredSet.parse(SCORED_TEXT, "scored/code.jsonl")


def _config(**replace: str) -> SweepConfig:
    text = DEMO
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return parse_sweep_config(text, "demo-cpu.yaml")


def _answers(text: str, sampling: str = "greedy", scored: ScoredSet = SCORED) -> ClassAnswers:
    answers: dict[str, str | None] = dict(zip((i.id for i in scored.items), text.split(), strict=True))
    errors = {item: "HTTP 400: too long" for item, answer in answers.items() if answer == "-"}
    answers |= dict.fromkeys(errors)
    return ClassAnswers(source=scored.source, sha256=scored.sha256,
                        answers={sampling: item_answers(scored.items, answers, errors)})


def _probes(config: SweepConfig, by_arm: dict[str, str]) -> dict[str, QualityProbe]:
    """Each arm's answers to the code class's scored set; the other classes have none."""
    return {arm: QualityProbe(arm=arm, classes={pc.name: _answers(text) if pc.name == "code" else None
                                                for pc in config.prompt_classes})
            for arm, text in by_arm.items()}


def _check(checks: list[QualityCheck], arm: str, prompt_class: str = "code") -> QualityCheck:
    return next(c for c in checks if (c.arm, c.prompt_class, c.sampling) == (arm, prompt_class, "greedy"))


ALL_ARMS = {"baseline": "2 4 6 0", "draft-k2": "2 4 6 0", "draft-k4": "2 4 6 8", "ngram-k3": "2 0 0 0"}


def test_each_speculative_arm_class_and_sampling_gets_one_check() -> None:
    config = _config()
    checks = quality_checks(config, _probes(config, ALL_ARMS))
    assert [c.key for c in checks] == [(arm, pc, "greedy") for arm in ("draft-k2", "draft-k4", "ngram-k3")
                                       for pc in ("code", "extraction", "chat")]
    same, better, worse = (_check(checks, arm).result for arm in ("draft-k2", "draft-k4", "ngram-k3"))
    assert same is not None and same.passed and same.items == 4 and same.candidate_mean == same.baseline_mean == 0.75
    assert better is not None and better.passed and better.candidate_mean == 1.0
    assert worse is not None and not worse.passed and worse.difference is not None
    assert worse.difference.estimate == pytest.approx(-0.5) and worse.tolerance == 0.1
    assert checks == quality_checks(config, _probes(config, ALL_ARMS))  # seeded by analysis.seed


def test_an_unanswered_item_fails_the_gate_and_is_named() -> None:
    config = _config()
    result = _check(quality_checks(config, _probes(config, ALL_ARMS | {"draft-k2": "2 4 6 -"})), "draft-k2").result
    assert result is not None and not result.passed and result.candidate_unanswered == ["q4"]
    assert "no answer from the candidate for q4" in result.gate().detail


@pytest.mark.parametrize(("change", "why"), [
    ("tolerance", "equivalence.quality_tolerance is unset"),
    ("no_set", "prompt class 'code' has no scored set (prompt_classes[].scored_set)"),
    ("no_probe", "no stored quality answers of draft-k2 for prompt class 'code'"),
    ("edited_set", "baseline and draft-k2 answered different versions of scored/code.jsonl"),
    ("no_sampling", "no stored answers of draft-k2 at sampling 'greedy'"),
])
def test_a_gate_that_cannot_run_says_why_and_has_not_passed(change: str, why: str) -> None:
    config = _config(**({"  quality_tolerance: 0.1\n": ""} if change == "tolerance" else {}))
    probes = _probes(config, ALL_ARMS)
    candidate = probes["draft-k2"].classes
    if change == "no_set":
        candidate["code"] = None
    elif change == "no_probe":
        del probes["draft-k2"]
    elif change == "edited_set":
        edited = SCORED_TEXT.replace('"numeric"}', '"numeric", "tolerance": 0.5}')
        candidate["code"] = _answers("2 4 6 0", scored=ScoredSet.parse(edited, "scored/code.jsonl"))
    elif change == "no_sampling":
        candidate["code"] = _answers("2 4 6 0", sampling="t07")
    check = _check(quality_checks(config, probes), "draft-k2")
    assert check.result is None and check.not_run == why
    gate = check.gate()
    assert (gate.ran, gate.passed, gate.detail) == (False, False, f"quality gate not run: code/greedy: {why}")


def test_a_class_without_a_scored_set_is_not_run_for_every_arm() -> None:
    config = _config()
    checks = quality_checks(config, _probes(config, ALL_ARMS))
    assert {c.not_run for c in checks if c.prompt_class == "chat"} == {
        "prompt class 'chat' has no scored set (prompt_classes[].scored_set)"}


def test_a_greedy_mode_is_added_when_the_sweep_samples_only() -> None:
    hot = _config(**{"- {name: greedy, temperature: 0.0}": "- {name: t07, temperature: 0.7, top_p: 0.95, seed: 3}",
                     "sampling: {greedy: 1.0}": "sampling: {t07: 1.0}"})
    assert [(s.name, s.temperature, s.seed) for s in quality_samplings(hot)] == [("greedy", 0.0, 0), ("t07", 0.7, 3)]
    both = _config(**{"- {name: greedy, temperature: 0.0}": "- {name: greedy, temperature: 0.0}\n  - {name: t1, "
                                                            "temperature: 1.0}"})
    assert [s.name for s in quality_samplings(both)] == ["greedy", "t1"]
    odd = _config(**{"- {name: greedy, temperature: 0.0}": "- {name: greedy, temperature: 0.5}"})
    assert [s.name for s in quality_samplings(odd)] == ["greedy-quality", "greedy"]


def test_a_failed_request_keeps_its_error_and_no_score() -> None:
    answers = _answers("2 - 6 0").answers["greedy"]
    assert answers["q2"].answer is None and answers["q2"].score is None and answers["q2"].error == "HTTP 400: too long"
    assert answers["q1"].score == 1.0 and answers["q4"].score == 0.0 and answers["q4"].error is None


def test_the_gpu_pilot_says_its_quality_gate_did_not_run() -> None:
    """configs/llama70b-h200.yaml sets a tolerance but ships no scored sets: every slice is named."""
    pilot = parse_sweep_config((ROOT / "configs" / "llama70b-h200.yaml").read_text(), "llama70b-h200.yaml")
    assert pilot.equivalence.quality_tolerance is not None
    assert all(pc.scored_set is None for pc in pilot.prompt_classes)
    probes = {arm: QualityProbe(arm=arm, classes=dict.fromkeys(pc.name for pc in pilot.prompt_classes))
              for arm in ("baseline", "draft1b-k2")}
    check = _check(quality_checks(pilot, probes), "draft1b-k2", "rag")
    assert check.gate().detail == "quality gate not run: rag/greedy: prompt class 'rag' has no scored set " \
                                  "(prompt_classes[].scored_set)"
