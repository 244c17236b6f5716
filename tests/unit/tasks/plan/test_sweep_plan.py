"""The sweep plan: stages in order, stable keys, resume skips complete cells and refuses a
changed fingerprint; aggregation reads gates from stored probes and samples from Parquet."""

from pathlib import Path

import pytest

from specfleet.errors import InputError
from specfleet.gates.quality import ClassAnswers, QualityProbe, item_answers
from specfleet.report.sweep_report import REPORT_FILE, SweepReport, run_status
from specfleet.verdicts.table import DecisionRow
from specfleet_cli.render import print_sweep_summary
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import SWEEP_FILE, SweepPlan, plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.report.tables import COST_COLUMNS, markdown_table
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.store.sweep import StoredSweep
from tests.support.sweep_data import records, store_cell, write_config


def _plan(tmp_path: Path, resume: str | None = None) -> SweepPlan:
    return plan_sweep(tmp_path / "sweep.yaml", resume, tmp_path / "results")


def _measure(plan: SweepPlan, arms: set[str], phase: str = "main", gap_ms: int = 5) -> None:
    for key, ident in plan.cells.items():
        if ident.arm in arms and ident.phase == phase:
            store_cell(plan.store, plan.config, ident, key, records(gap_ms=gap_ms))


def _probe(plan: SweepPlan, arm: str, tokens: list[int], repeat: bool = False) -> None:
    greedy = {"p0": tokens, "p1": [7, 8]}
    payload: dict[str, object] = {"arm": arm, "greedy": greedy} | ({"greedy_repeat": greedy} if repeat else {})
    plan.store.write_json(f"equivalence/{arm}.json", payload)


SCORED = '{"id": "q1", "prompt": "1 + 1 =", "reference": 2, "scorer": "numeric"}\n' \
         '{"id": "q2", "prompt": "2 + 2 =", "reference": "4", "scorer": "contains"}\n'


def _with_quality(tmp_path: Path, scored: str = SCORED) -> None:
    """The unit config with a scored set for its class and a quality tolerance."""
    config = write_config(tmp_path)
    (tmp_path / "scored.jsonl").write_text(scored)
    text = config.read_text().replace("max_output_tokens: 8}", "max_output_tokens: 8, scored_set: scored.jsonl}")
    config.write_text(text.replace("equivalence: {prompts: 2}", "equivalence: {prompts: 2, quality_tolerance: 0.1}"))


def _answer(plan: SweepPlan, arm: str, text: str) -> None:
    scored = plan.scored_sets["code"]
    assert scored is not None
    answers = item_answers(scored.items, dict(zip(("q1", "q2"), text.split(), strict=True)), {})
    code = ClassAnswers(source=scored.source, sha256=scored.sha256, answers={"greedy": answers})
    plan.store.write_json(f"quality/{arm}.json", QualityProbe(arm=arm, classes={"code": code}))


def test_new_sweep_plans_baseline_speculative_then_baseline_end(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    assert plan.sweep_id.startswith("unit-sweep-") and not plan.resumed
    assert (plan.store.dir / "sweep.json").is_file()
    stages = list(plan.stages())
    assert [label for label, _ in stages] == ["baseline", "speculative arms", "baseline (end)"]
    assert [w.arm.arm for _, work in stages for w in work] == ["baseline", "draft-k2", "baseline"]
    assert [w.probe for _, work in stages for w in work] == [True, True, False]
    assert [w.quality_probe for w in plan.work] == [False] * 3  # no quality_tolerance: nothing would read answers
    assert plan.scored_sets == {"code": None}
    assert len(plan.cells) == plan.pending_cells == 3
    assert _plan(tmp_path).cells.keys() == plan.cells.keys()  # keys are stable across sweeps


def test_resume_measures_only_missing_cells_and_reuses_probes(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    _measure(plan, {"baseline", "draft-k2"})
    _probe(plan, "baseline", [1, 2], repeat=True)
    resumed = _plan(tmp_path, plan.sweep_id)
    assert resumed.resumed and resumed.sweep_id == plan.sweep_id
    assert [(w.arm.arm, w.phase, w.probe) for w in resumed.work] == [("baseline", "baseline_end", False)]
    _measure(plan, {"baseline"}, phase="baseline_end")
    assert _plan(tmp_path, plan.sweep_id).work == []  # a finished sweep measures nothing


def test_the_scored_sets_are_answered_once_per_arm_and_reused_on_resume(tmp_path: Path) -> None:
    _with_quality(tmp_path)
    plan = _plan(tmp_path)
    scored = plan.scored_sets["code"]
    assert scored is not None and [i.id for i in scored.items] == ["q1", "q2"]
    assert scored.source == str(tmp_path / "scored.jsonl")  # relative to the config's folder
    assert [(w.arm.arm, w.phase, w.quality_probe) for w in plan.work] == [
        ("baseline", "main", True), ("draft-k2", "main", True), ("baseline", "baseline_end", False)]
    _answer(plan, "baseline", "2 4")
    resumed = _plan(tmp_path, plan.sweep_id)
    assert [(w.arm.arm, w.quality_probe) for w in resumed.work if w.phase == "main"] == [
        ("baseline", False), ("draft-k2", True)]


def test_a_bad_scored_set_line_stops_the_plan_naming_file_and_line(tmp_path: Path) -> None:
    _with_quality(tmp_path, SCORED + '{"id": "q3", "prompt": "x", "reference": "y", "scorer": "fuzzy"}\n')
    with pytest.raises(InputError, match=r"scored.jsonl:3: scorer: .*unknown scorer"):
        _plan(tmp_path)
    (tmp_path / "scored.jsonl").unlink()
    with pytest.raises(InputError, match=r"scored.jsonl: scored set of class 'code' not found"):
        _plan(tmp_path)


def test_aggregate_makes_the_quality_gate_of_each_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _with_quality(tmp_path)
    plan = _plan(tmp_path)
    _measure(plan, {"baseline", "draft-k2"})
    _measure(plan, {"baseline"}, phase="baseline_end")
    _probe(plan, "baseline", [1, 2], repeat=True)
    _probe(plan, "draft-k2", [1, 2])
    _answer(plan, "baseline", "2 4")
    _answer(plan, "draft-k2", "2 5")  # q2 wrong: the mean drops by 0.5, over the tolerance 0.1
    summary = aggregate(plan, [])
    [check] = summary.quality
    assert check.result is not None and (check.result.baseline_mean, check.result.candidate_mean) == (1.0, 0.5)
    [decision] = summary.decisions
    assert decision.reason_code == "gate_failed" and decision.reason.startswith("quality: code/greedy: candidate 0.500")
    assert [g.gate for g in decision.gates] == ["greedy_exact_match", "quality"]
    assert "- draft-k2: quality FAILED: code/greedy: candidate 0.500 vs baseline 1.000 over 2 items" in \
        summary_markdown(summary)
    older = {k: v for k, v in summary.model_dump(mode="json").items() if k != "quality"}  # before the gate
    assert SweepReport.model_validate(older).quality == []
    print_sweep_summary(summary, "sqlite:///mlflow.db")  # the CLI prints it beside the greedy gate
    printed = capsys.readouterr().out
    assert "draft-k2: greedy_exact_match passed" in printed and "draft-k2: quality FAILED: code/greedy" in printed


def test_resume_refuses_unknown_id_and_changed_draft(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    with pytest.raises(InputError, match="no sweep with this id"):
        _plan(tmp_path, "nope")
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(InputError, match="draft changed"):
        _plan(tmp_path, plan.sweep_id)


def test_aggregate_gates_decisions_and_failures(tmp_path: Path) -> None:
    write_config(tmp_path)
    plan = _plan(tmp_path)
    _measure(plan, {"baseline"}, gap_ms=5)
    _measure(plan, {"baseline"}, phase="baseline_end", gap_ms=5)
    _probe(plan, "baseline", [1, 2], repeat=True)
    _probe(plan, "draft-k2", [1, 3])  # diverges at position 1: the greedy gate fails
    summary = aggregate(plan, [])
    assert summary.cells_complete == 2 and summary.servers_started == 0
    assert summary.failed_cells == ["draft-k2 / code / c1 / greedy / r0: not measured"]
    assert run_status(summary) == "FAILED"
    assert not summary.gates["draft-k2"][0].passed
    assert summary.cost_table == []  # an unmeasured arm has no decision: it is listed as failed
    _measure(plan, {"draft-k2"}, gap_ms=4)
    summary = aggregate(plan, [])
    assert not summary.failed_cells and run_status(summary) == "FINISHED"
    row = summary.cost_table[0]
    assert row.reason_code == "gate_failed" and row.acceptance_rate == 0.75
    assert [q.not_run for q in summary.quality] == ["equivalence.quality_tolerance is unset"]
    markdown = summary_markdown(summary)
    assert "| draft_model | 2 | code | c1 | 0.75 |" in markdown
    assert "greedy_exact_match FAILED" in markdown and "speculation adopted at no level" in markdown


def test_unmeasured_figures_print_as_na() -> None:
    unmeasured = dict.fromkeys(DecisionRow.model_fields)
    row = DecisionRow.model_validate(unmeasured | {
        "method": "ngram", "k": 3, "prompt_class": "chat", "concurrency": 4, "load_mode": "concurrency",
        "load_value": 4.0, "verdict": "reject", "reason_code": "baseline_not_usable", "reason": "no baseline",
        "engine": "vllm", "hardware": "cpu", "sampling": "greedy"})
    table = markdown_table([row], COST_COLUMNS)
    assert "| ngram | 3 | chat | c4 | n/a | n/a | n/a |" in table and "baseline_not_usable" in table


def _stored_sweep(results: Path, template: SweepPlan, sweep_id: str, phases: set[tuple[str, str]],
                  name: str = "unit-sweep") -> None:
    """A sweep as an earlier run left it: ``template``'s fingerprint, its cells of (arm, phase) in ``phases``."""
    store = ResultsStore(results, sweep_id)
    store.write_json(SWEEP_FILE, {"name": name, "config": str(template.config_path),
                                  "fingerprint": template.fingerprint.model_dump(mode="json")})
    for key, ident in template.cells.items():
        if (ident.arm, ident.phase) in phases:
            store_cell(store, template.config, ident, key, records(gap_ms=5))


def test_continue_picks_the_newest_unfinished_sweep_of_the_config(tmp_path: Path) -> None:
    write_config(tmp_path)
    template = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "elsewhere")
    results = tmp_path / "results"
    every = {("baseline", "main"), ("draft-k2", "main"), ("baseline", "baseline_end")}
    _stored_sweep(results, template, "unit-sweep-20260101T000000Z-aaaa", {("baseline", "main")})
    _stored_sweep(results, template, "unit-sweep-20260102T000000Z-bbbb", every - {("baseline", "baseline_end")})
    _stored_sweep(results, template, "unit-sweep-20260103T000000Z-cccc", every)  # finished
    _stored_sweep(results, template, "unit-sweep-20260104T000000Z-dddd", set(), name="another-config")

    def _continue() -> SweepPlan:
        return plan_sweep(tmp_path / "sweep.yaml", None, results, "7h", continue_sweep=True)

    plan = _continue()
    assert (plan.sweep_id, plan.resumed) == ("unit-sweep-20260102T000000Z-bbbb", True)
    assert plan.origin == "--continue: sweep unit-sweep-20260102T000000Z-bbbb, 1 of 3 cells left to measure"
    assert [(w.arm.arm, w.phase) for w in plan.work] == [("baseline", "baseline_end")]
    _measure(plan, {"baseline"}, phase="baseline_end")
    plan = _continue()  # that one is finished now: the next newest unfinished one
    assert plan.sweep_id == "unit-sweep-20260101T000000Z-aaaa"
    assert [(w.arm.arm, w.phase) for w in plan.work] == [("draft-k2", "main"), ("baseline", "baseline_end")]
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"retrained")
    plan = _continue()
    assert plan.origin == ("--continue: draft changed since sweep unit-sweep-20260101T000000Z-aaaa started; "
                           "starting a new sweep")
    assert not plan.resumed and plan.sweep_id.startswith("unit-sweep-2") and plan.pending_cells == 3
    for sweep in ("unit-sweep-20260101T000000Z-aaaa", plan.sweep_id):
        _stored_sweep(results, plan, sweep, every)
    assert _continue().origin == (f"--continue: every sweep of config 'unit-sweep' under {results} is finished; "
                                  "starting a new sweep")


def test_a_scheduled_first_night_with_continue_starts_the_first_sweep(tmp_path: Path) -> None:
    """The CLI refuses --continue without an earlier sweep (exit 2); the flow, as the nightly
    deployment runs it, starts the first one and says so."""
    write_config(tmp_path)
    results = tmp_path / "results"
    plan = plan_sweep(tmp_path / "sweep.yaml", None, results, "7h", continue_sweep=True)
    assert not plan.resumed and plan.pending_cells == 3
    assert plan.origin == f"--continue: no earlier sweep of config 'unit-sweep' under {results}; starting the first"
    with pytest.raises(InputError, match="--continue and --resume"):
        plan_sweep(tmp_path / "sweep.yaml", plan.sweep_id, results, "7h", continue_sweep=True)


def test_continued_nights_are_the_looks_of_one_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """With analysis.nights, each finished night continued is the next look: it says so in its plan,
    summary and terminal, pools the earlier look's runs, keeps its decided verdicts (naming the sweep),
    and measures their cells last; after the last look a new sequence starts."""
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("analysis: {bootstrap_resamples: 200}", "analysis: {bootstrap_resamples: "
                                             "200, nights: {looks: 2, spending: bonferroni}}"))
    ids = iter(f"unit-sweep-2026010{n}T000000Z-aaaa" for n in range(1, 4))
    monkeypatch.setattr("specfleet_tasks.plan.sweep_plan.new_sweep_id", lambda name: next(ids))
    results = tmp_path / "results"

    def night() -> tuple[SweepPlan, SweepReport]:
        plan = plan_sweep(path, None, results, "7h", continue_sweep=True)
        _measure(plan, {"baseline", "draft-k2"})
        _measure(plan, {"baseline"}, phase="baseline_end")
        _probe(plan, "baseline", [1, 2], repeat=True)
        _probe(plan, "draft-k2", [1, 3])  # the greedy gate fails: a reject, whatever the runs say
        summary = aggregate(plan, [])
        plan.store.write_json(REPORT_FILE, summary)
        return plan, summary

    plan, first = night()
    assert plan.origin is not None and plan.origin.endswith(
        "; analysis.nights: look 1 of 2 (bonferroni spending), decided at confidence 0.975")
    assert first.look is not None and (first.look.look, first.look.confidence) == (1, 0.975)
    [decision] = first.decisions
    assert decision.verdict == "reject" and decision.carried is None
    plan, second = night()
    assert plan.origin is not None and plan.origin.endswith(
        "look 2 of 2 (bonferroni spending), decided at confidence 0.975; 1 pending cells of claims look 1 decided "
        "are measured last (their verdicts are kept), the inconclusive claims' first")
    assert StoredSweep(plan.store.dir, config=plan.config).decided_before() == {
        ("draft-k2", "code", "concurrency", 1.0, "greedy")}
    assert second.look is not None and second.look.earlier_sweeps == ["unit-sweep-20260101T000000Z-aaaa"]
    [decision] = second.decisions
    assert decision.carried is not None and decision.carried.sweep == "unit-sweep-20260101T000000Z-aaaa"
    assert decision.comparison is not None and decision.comparison.baseline_runs == 4  # both nights' runs
    print_sweep_summary(second, "sqlite:///mlflow.db")
    printed = capsys.readouterr().out
    assert "look 2 of 2 (bonferroni spending), decided at confidence 0.975, over its own runs and those of 1 " \
           "earlier looks" in printed
    assert "draft-k2 code c1 greedy: reject carried from look 1 (sweep unit-sweep-20260101T000000Z-aaaa)" in printed
    plan, third = night()
    assert third.look is not None and (third.look.look, third.look.earlier_sweeps) == (1, [])
