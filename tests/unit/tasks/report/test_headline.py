"""What a sweep prints first: decisions that share a verdict and reason read as one line naming
their cells, gates that arms share as one line, and the verdicts at the mix with their checks."""

from specfleet.gates.quality import QualityCheck
from specfleet.stats.quality import GateResult
from specfleet.verdicts.cell import Decision, Slice
from specfleet_tasks.report.headline import grouped_decision_lines, grouped_gate_lines, mix_lines
from tests.support.mix_verdict import BASE, CAND, hand_config
from tests.support.synthetic_sweep import Sweep

GATE = "stochastic_distribution: distributions differ"


def rejected(arm: str, pc: str, load: int, code: str = "gate_failed", reason: str = GATE) -> Decision:
    where = Slice(arm=arm, method="draft_model", k=int(arm.rsplit("-k", 1)[1]), prompt_class=pc,
                  load_mode="concurrency", load_value=float(load), sampling="greedy")
    return Decision.model_validate({"slice": where, "verdict": "reject", "reason_code": code, "reason": reason,
                                    "comparison": None, "cost": None, "gates": []})


def test_decisions_sharing_a_verdict_and_reason_are_one_line_naming_the_cells() -> None:
    decisions = [rejected(arm, pc, load) for arm in ("draft-k2", "draft-k4") for pc in ("code", "chat")
                 for load in (1, 4)]
    decisions += [rejected("ngram-k3", "code", 1), rejected("ngram-k3", "chat", 4)]
    decisions += [rejected("draft-k2", "rag", 1, "within_noise", "saving +1.0% within noise 3.0%"),
                  rejected("draft-k2", "rag", 4, "within_noise", "saving +2.0% within noise 3.0%")]
    lag = "no usable baseline cell: client saturated: event-loop lag p99 {} ms > 250 ms"
    decisions += [rejected("ngram-k3", "rag", 4, "baseline_not_usable", lag.format(731.8)),
                  rejected("draft-k4", "rag", 4, "baseline_not_usable", lag.format(681.0))]
    assert grouped_decision_lines(decisions) == [
        f"reject 10 cells (draft-k2, draft-k4: code, chat at c1, c4; ngram-k3: code c1, chat c4): {GATE}",
        "inconclusive 2 cells (draft-k2: rag at c1, c4): within_noise (figures differ per cell: see the report)",
        "reject 2 cells (ngram-k3, draft-k4: rag at c4): no usable baseline cell: client saturated: ... "
        "(baseline_not_usable; figures differ per cell: see the report)",
    ]


def test_gates_that_arms_share_are_one_line() -> None:
    passed = GateResult(gate="greedy_exact_match", passed=True, detail="exact match 1.000")
    failed = GateResult(gate="stochastic_distribution", passed=False, detail="p=0.001")
    lines = grouped_gate_lines({"draft-k2": [passed, failed], "ngram-k3": [passed]}, [])
    assert lines == ["draft-k2, ngram-k3: greedy_exact_match passed: exact match 1.000",
                     "draft-k2: stochastic_distribution FAILED: p=0.001"]
    not_run = QualityCheck.model_validate({"arm": "draft-k2", "prompt_class": "chat", "sampling": "greedy",
                                           "result": None, "not_run": "no scored set"})
    assert grouped_gate_lines({}, [not_run])[0].startswith("draft-k2: ")


def test_mix_lines_state_the_mix_then_each_verdict_with_its_checks() -> None:
    cfg = hand_config()
    sweep = Sweep(cfg)
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)])
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)], phase="baseline_end")
    for ident in (c.identity for c in list(sweep.cells) if c.identity.phase == "main"):
        if (ident.prompt_class, ident.load_value) != ("chat", 4.0):
            arm = ident.model_copy(update={"arm": "draft-k2", "method": "draft_model", "k": 2})
            sweep.add(arm, CAND[(ident.prompt_class, ident.load_value)], "draft-k2/main")
    verdicts = [v for v in sweep.analyse().mix if v.name == "draft-k2"]
    lines = mix_lines(verdicts)
    assert lines[0].startswith("traffic mix: code 50%, chat 50% of tokens; c1 50%, c4 50%: traffic mix from the config")
    assert lines[1] == "left out of every verdict: chat c4 (not measured)"
    assert lines[2] == verdicts[0].headline and lines[2].startswith("PARTIAL (covers 75.0% of the mix)")
    assert lines[3].startswith("  entry gate: saving_beyond_noise ") and "; prompt_classes " in lines[3]
    assert lines[4] == "  other_gates passed (SLO and gates pass at all 3 measured cells)"
    assert "corrected for" in lines[2]
    assert mix_lines([]) == []
