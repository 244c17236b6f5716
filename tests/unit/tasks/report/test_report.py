"""``specfleet report`` over two small synthetic sweeps (test fixtures: real ``CellResult`` and
``RequestRecord`` objects, assembled by the metrics code and stored as the sweep stores them).

The first sweep is aggregated as the flow does (``summary.json``); the second stops before
aggregating, so its decisions are recomputed, and one of its decisions flips."""

import base64
import dataclasses
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from specfleet.contract import CellIdentity, SweepConfig
from specfleet.economics.theory import implied_alpha
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import ClassAnswers, QualityProbe, item_answers
from specfleet.gates.scored_set import ScoredSet
from specfleet.measure.acceptance import NO_SERVER_FIGURES
from specfleet.measure.metrics import assemble_cell
from specfleet.report.sweep_report import SweepReport
from specfleet.results import EnergyReading, KVCacheInfo, SpecDecodeStats
from specfleet.results.records import RequestRecord
from specfleet_cli.report import report
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.report.content import ReportContent, build_content
from specfleet_tasks.report.markdown import render_markdown
from specfleet_tasks.report.predicted import PredictedView, predicted_view
from specfleet_tasks.report.publish import log_to_sweep_run
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.store.sweep import StoredSweep
from tests.support.sweep_data import TOKENS, fake_models, records

CONFIG = """
name: report-sweep
models: {{target: {{path: {target}}}, draft: {{path: {draft}}}}}
arms:
  - {{name: baseline, method: baseline}}
  - {{name: draft, method: draft_model, k: [2, 3]}}
  - {{name: ngram, method: ngram, k: [3]}}
load: {{concurrency: [1, 4], requests_per_cell: 24}}
prompt_classes:
  - {{name: code, source: jsonl, path: code.jsonl, max_output_tokens: {tokens}, scored_set: scored.jsonl}}
  - {{name: chat, source: jsonl, path: code.jsonl, max_output_tokens: {tokens}}}
slo: {{ttft_ms: 50, itl_ms: 20}}
hardware: {{accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 100, price_is_illustrative: true}}
equivalence:
  prompts: 2
  stochastic: {{tokens_per_sample: 2, min_detectable_tv: 0.5, max_samples_per_prompt: 40}}
  quality_tolerance: 0.2
analysis: {{bootstrap_resamples: 200}}
"""
# Window seconds per (arm, class, concurrency): 32 tokens over it give qualified tokens/s. The
# closing baseline's windows, a percent or less from the opening's, set the run-to-run noise.
BASELINE_S = 4.0
BASELINE_END_S = {("code", 1): 4.03, ("code", 4): 3.98, ("chat", 1): 3.97, ("chat", 4): 4.01}
DURATION_S = {
    ("draft-k2", "code", 1): 2.0, ("draft-k2", "code", 4): 2.6, ("draft-k2", "chat", 1): 3.0,
    ("draft-k2", "chat", 4): 4.1, ("draft-k3", "code", 1): 2.2, ("draft-k3", "code", 4): 3.4,
    ("draft-k3", "chat", 1): 6.0,
}
FAILED = ("draft-k3", "chat", 4)  # its server failed: a cell with no comparison
SECTIONS = ("decision", "heatmaps", "speedup", "acceptance", "latency", "kv", "energy", "theory", "predicted",
            "negative", "equivalence", "contract", "diff")


def _spec(ident: CellIdentity) -> SpecDecodeStats | None:
    if ident.method != "draft_model" or ident.k is None:
        return None
    reach = [80, 60, 45][: ident.k] if ident.prompt_class == "code" else [60, 35, 20][: ident.k]
    accepted = sum(reach)
    return SpecDecodeStats(num_drafts=100, num_draft_tokens=100 * ident.k, num_accepted_tokens=accepted,
                           accepted_per_position=reach, acceptance_rate=accepted / (100 * ident.k),
                           mean_acceptance_length=1 + accepted / 100, acceptance_per_position=[n / 100 for n in reach])


REQUESTS = 24
"""Per cell: enough that a cell's request-level spread is known (with 4, three degrees of freedom
leave every interval wide)."""


def _requests(ident: CellIdentity) -> list[RequestRecord]:
    """Half the requests stream a chunk every 5 ms, half every 7 ms (2 tokens a chunk when speculating)."""
    per_chunk = 1 if ident.k is None else 2
    fast, slow = records(5, per_chunk, REQUESTS), records(7, per_chunk, REQUESTS)
    return [fast[i] if i % 2 == 0 else slow[i] for i in range(len(fast))]


def _store_cell(store: ResultsStore, config: SweepConfig, ident: CellIdentity, key: str, scale: float) -> None:
    where = (ident.arm, ident.prompt_class, ident.concurrency)
    duration = BASELINE_END_S[(ident.prompt_class, ident.concurrency)] if ident.phase == "baseline_end" else (
        BASELINE_S if ident.k is None else DURATION_S.get(where, 3.0) * scale)
    reqs = _requests(ident)
    records_file = store.write_records(key, reqs)
    measured = ident.arm == "draft-k2"
    energy = EnergyReading(source="nvml", joules=40.0 * duration) if measured else EnergyReading(
        source="none", joules=None, reason="no NVML device on this host")
    kv = None if ident.method == "ngram" else KVCacheInfo(
        kv_cache_size_tokens=200_000 if ident.k is None else 173_000, kv_cache_max_concurrency=24.4)
    cell = assemble_cell(ident, key, reqs, slo=config.slo, duration_s=duration, requests_planned=len(reqs),
                         ignore_eos=True, max_error_fraction=0.05, energy=energy, spec_decode=_spec(ident),
                         spec_decode_unavailable="ngram: counters not exposed" if ident.method == "ngram" else None,
                         kv_cache=kv, server_failed=where == FAILED, engine_version="0.32.0",
                         records_file=records_file, started_at=f"t-{key}")
    store.write_cell(cell)


SCORED = "".join(json.dumps({"id": f"q{i}", "prompt": f"{i} + {i} =", "reference": 2 * i, "scorer": "numeric"}) + "\n"
                 for i in range(1, 9))
ANSWERS = {"baseline": " 2 4 6 8 10 12 14 0", "draft-k2": " 2 4 6 8 10 12 14 0", "draft-k3": " 2 4 6 8 10 12 14 16",
           "ngram-k3": " 2 4 0 0 0 0 14 0"}
"""Each arm's answers to q1..q8 (the code class's scored set): draft-k3 does better, ngram-k3 worse."""


def _store_quality(store: ResultsStore, scored: ScoredSet) -> None:
    for arm, text in ANSWERS.items():
        answers = dict(zip((item.id for item in scored.items), text.split(), strict=True))
        code = ClassAnswers(source=scored.source, sha256=scored.sha256,
                            answers={"greedy": item_answers(scored.items, answers, {})})
        store.write_json(f"quality/{arm}.json", QualityProbe(arm=arm, classes={"code": code, "chat": None}))


def _store_probes(store: ResultsStore) -> None:
    greedy = {"p0": [1, 2, 3], "p1": [4, 5, 6]}
    sampled = {pid: [[1, 2]] * 20 + [[1, 3]] * 20 for pid in greedy}
    store.write_json("equivalence/baseline.json",
                     EquivalenceProbe(arm="baseline", greedy=greedy, greedy_repeat=greedy, stochastic=sampled))
    for arm in ("draft-k2", "draft-k3"):
        store.write_json(f"equivalence/{arm}.json", EquivalenceProbe(arm=arm, greedy=greedy, stochastic=sampled))
    diverging = {"p0": [1, 2, 9], "p1": [4, 5, 6]}
    store.write_json("equivalence/ngram-k3.json", EquivalenceProbe(arm="ngram-k3", greedy=diverging))


def _sweep(config_path: Path, results: Path, scale: float) -> SweepPlan:
    plan = plan_sweep(config_path, None, results)
    for key, ident in plan.cells.items():
        _store_cell(plan.store, plan.config, ident, key, scale)
    _store_probes(plan.store)
    scored = plan.scored_sets["code"]
    assert scored is not None and plan.scored_sets["chat"] is None
    _store_quality(plan.store, scored)
    return plan


@dataclass(frozen=True)
class Sweeps:
    root: Path
    first: SweepPlan
    second: SweepPlan
    summary: SweepReport
    """What the aggregate step produced for the first sweep, before it was written."""


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Sweeps:
    root = tmp_path_factory.mktemp("report")
    target, draft = fake_models(root)
    config = root / "sweep.yaml"
    config.write_text(CONFIG.format(target=target, draft=draft, tokens=TOKENS))
    (root / "scored.jsonl").write_text(SCORED)
    first = _sweep(config, root / "results", scale=1.0)
    summary = aggregate(first, [])
    first.store.write_json("summary.json", summary)  # as the flow writes it
    return Sweeps(root, first, _sweep(config, root / "results", scale=1.5), summary)  # no summary: recomputed


def _cli(*args: str) -> tuple[int, str]:
    app = typer.Typer()
    app.command()(report)
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_report_has_every_section_and_only_embedded_figures(sweeps: Sweeps, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    out = sweeps.root / "out"
    code, output = _cli(sweeps.first.sweep_id, "--against", sweeps.second.sweep_id, "--out", str(out),
                        "--results-dir", str(sweeps.root / "results"),
                        "--tracking-uri", f"http://127.0.0.1:{free_port()}")
    assert code == 0, output
    assert "MLflow: not logged: http://127.0.0.1" in output and "unreachable" in output
    html = (out / "report.html").read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html, section
    images = re.findall(r'<img [^>]*src="([^"]*)"', html)
    # a heat map per speculative arm; speedup, acceptance, latency, KV, energy, theory; predicted across load and k
    assert len(images) == 3 + 6 + 2
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""",
                         html, re.IGNORECASE)
    assert "<script" not in html.lower() and "<link" not in html.lower()
    for text in ("implied alpha (model)", "Modelled", "num_speculative_tokens_per_batch_size",
                 "no NVML device on this host", "ngram: counters not exposed", "candidate_not_usable",
                 "gate_failed", "permutation chi-square", "sha256", "0.32.0", "Prices are illustrative",
                 "Held-out quality", "prompt class &#39;chat&#39; has no scored set", "quality_not_run",
                 "<th>PREDICTED SLO-qualified tok/s [interval]</th>",
                 "PREDICTED, not measured (performance model calibrated on",
                 "Acceptance length per request", "<th>T, tokens per step (all steps)</th>"):
        assert text in html, text
    # the quality gate's scores with their paired interval: ngram-k3 answered 3 of 8 right, the baseline 7
    assert re.search(r'<td>ngram-k3</td><td>code</td><td>greedy</td><td class="num">8</td><td class="num">0.875</td>'
                     r'<td class="num">0.375</td><td class="num">-0.500 \[-0.875, -0.2\d\d\]</td>'
                     r'<td class="num">0.2</td><td class="reject">FAIL</td>', re.sub(r">\s+<", "><", html))
    assert "recomputed from the stored cells" not in html  # the first sweep has its summary.json
    assert 'class="flip"' in html
    markdown = (out / "report.md").read_text()
    for text in ("## Verdict per prompt class", "| code | **adopt** | draft-k2 (draft_model, k=2) |",
                 "num_speculative_tokens_per_batch_size", "## Negative-result cells (rejected)",
                 "## Inconclusive: this sweep could not tell", "## Equivalence and quality gates",
                 "- draft-k3: quality passed: code/greedy: candidate 1.000 vs baseline 0.875 over 8 items",
                 "- draft-k2: quality gate not run: chat/greedy: prompt class 'chat' has no scored set",
                 f"## Against sweep {sweeps.second.sweep_id}", "decisions flipped", "## Measured and predicted",
                 "| accept len (drafted steps) | tok/step (all steps) |", "## Acceptance length per request",
                 "| draft-k2 | code | greedy | 2.40 | n/a | n/a | 2.00 [2.00 2.00 2.00] | 2.00 (+0.00) | 48 |"):
        assert text in markdown, text
    # the report opens with the verdict at the traffic mix, each arm's and the k policy's
    assert markdown.index("## Verdict at the traffic mix") < markdown.index("## Verdict per prompt class")
    assert html.index('<section id="mix">') < html.index('<section id="decision">')
    summary = SweepReport.model_validate_json((sweeps.first.store.dir / "summary.json").read_text())
    assert summary.mix and all(f"**{v.headline}**" in markdown for v in summary.mix)
    assert any(v.name == "draft-k-policy" for v in summary.mix)


def test_decisions_per_class_and_recomputed_sweep(sweeps: Sweeps) -> None:
    first, second = (StoredSweep(s.store.dir) for s in (sweeps.first, sweeps.second))
    stored = json.loads((sweeps.first.store.dir / "summary.json").read_text())
    assert [d.model_dump(mode="json") for d in first.report.decisions] == stored["decisions"]
    assert second.report.decided_by.startswith("recomputed")
    content = build_content(first, 0.05, against=second, with_predicted=False)
    verdicts = {v.prompt_class: v for v in content.report.class_verdicts}
    code = verdicts["code"]
    assert code.verdict == "adopt" and code.arm == "draft-k2" and code.figures is not None
    low, high = code.figures.pessimistic_saving_fraction, code.figures.optimistic_saving_fraction
    assert low is not None and high is not None and 0 < low <= high  # the corrected bounds' savings
    assert code.comparisons is not None and code.comparisons > 1
    assert code.speculative_config is not None and code.speculative_config["method"] == "draft_model"
    assert content.diff is not None and content.diff.flipped
    assert all(r.this is not None and r.other is not None for r in content.diff.flipped)
    heat = {m.arm: m for m in content.maps}
    chat_c1 = heat["draft-k3"].cells[("chat", "c1")]
    assert chat_c1.speedup is not None and chat_c1.speedup.estimate < 1.0 and chat_c1.verdict != "adopt"
    assert heat["draft-k3"].cells[("chat", "c4")].speedup is None
    kv = {r.arm: r for r in content.kv}
    assert kv["draft-k2"].draft_cost == pytest.approx(0.135) and kv["ngram-k3"].tokens is None
    energy = [r for r in content.energy if r.arm == "draft-k2"]
    assert energy and all(r.j_per_qualified_token is not None for r in energy)


def test_acceptance_is_named_apart_and_speedup_is_read_from_tokens_per_step(sweeps: Sweeps) -> None:
    """Speculating cells stream 2 tokens a chunk while their counters say 1 + 140 / 100 drafts: the
    cost table shows both, the per-request view pools both loads, and the model's implied alpha
    is read from the tokens per step over all steps, never from the length conditional on drafting."""
    content = build_content(StoredSweep(sweeps.first.store.dir), 0.05, with_predicted=False)
    row = next(r for r in content.report.cost_table
               if (r.method, r.k, r.prompt_class, r.concurrency) == ("draft_model", 2, "code", 1))
    assert row.mean_acceptance_length == pytest.approx(2.4) and row.tokens_per_step == pytest.approx(2.0)
    theory = next(t for t in content.theory if (t.arm, t.row, t.load) == ("draft-k2", "code", "c1"))
    assert theory.tokens_per_step == pytest.approx(2.0) and theory.mean_acceptance_length == pytest.approx(2.4)
    assert theory.implied_alpha == pytest.approx(implied_alpha(2.0, 2))
    acceptance = {(a.arm, a.prompt_class): a for a in content.acceptance_rows}
    assert ("baseline", "code") not in acceptance
    draft = acceptance[("draft-k2", "code")]
    assert draft.cells == 2 and draft.counter_mean_acceptance_length == pytest.approx(2.4)
    assert draft.client_mean_acceptance_length.requests == 48 and draft.client_mean_acceptance_length.p50 == 2.0
    assert draft.request_mean_acceptance_length.requests == 0  # this sweep's servers sent no per-request figures
    assert draft.request_mean_acceptance_length.missing == f"48 of 48 requests: {NO_SERVER_FIGURES}"
    assert ("draft-k3", "chat") in acceptance and acceptance[("draft-k3", "chat")].cells == 1  # its c4 failed


def test_unknown_sweep_exits_2_with_one_line(sweeps: Sweeps) -> None:
    code, output = _cli("no-such-sweep", "--results-dir", str(sweeps.root / "results"))
    assert code == 2 and output.strip().count("\n") == 0 and "no-such-sweep" in output


def test_no_tracking_store_is_reported_not_created(tmp_path: Path) -> None:
    absent = tmp_path / "absent.db"
    line = log_to_sweep_run(f"sqlite:///{absent}", "report-sweep", "any", [])
    assert line.startswith("MLflow: not logged: no tracking store") and not absent.exists()


def test_latency_caveat_names_where_chunks_came_in_one_read(sweeps: Sweeps) -> None:
    """Stamping every three chunks with one arrival (as one network read does) makes two of
    three gaps 0 ms: the report names that arm and load, and only that one."""
    from specfleet_tasks.report.measures import main_cells, read_together_notes

    data = StoredSweep(sweeps.first.store.dir)
    assert read_together_notes(data) == []
    keys = {c.key for c in main_cells(data) if c.identity.arm == "draft-k2" and c.identity.load_value == 4}
    assert keys

    def read_in_threes(r: RequestRecord) -> RequestRecord:
        return dataclasses.replace(r, chunk_ns=tuple(r.chunk_ns[i - i % 3] for i in range(len(r.chunk_ns))))

    records = {key: [read_in_threes(r) for r in recs] if key in keys else recs for key, recs in data.records.items()}
    read = StoredSweep(sweeps.first.store.dir)
    vars(read)["records"] = records  # the cached records, as if the stored chunks had come in threes
    [note] = read_together_notes(read)
    assert note.startswith("draft-k2 at c4: 6") and "chunks read together" in note


def _same(logged: BaseModel, made: BaseModel) -> bool:
    """Field for field; floats to the 10 decimal places MLflow's tables keep."""
    a, b = logged.model_dump(), made.model_dump()
    return a.keys() == b.keys() and all(
        math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-10) if isinstance(b[k], float) and a[k] is not None
        else a[k] == b[k]
        for k in b)


def test_report_and_mlflow_show_the_objects_the_aggregate_step_made(sweeps: Sweeps, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """summary.json round-trips: the report's decisions, rows and policies, and the MLflow tables,
    equal what ``aggregate`` returned (verdicts, intervals, costs), field for field."""
    from mlflow import MlflowClient

    from specfleet.verdicts.table import DecisionRow
    from specfleet_tasks.report.summary_md import summary_markdown
    from specfleet_tasks.tracking.runs import log_sweep_summary, open_sweep_run

    made = sweeps.summary
    verdicts = {d.verdict for d in made.decisions}
    assert verdicts == {"adopt", "reject", "inconclusive"}
    assert any(d.cost and d.cost.pessimistic_saving_fraction for d in made.decisions)
    data = StoredSweep(sweeps.first.store.dir)
    assert data.report.decided_by == "the sweep's summary.json"
    assert data.report == made
    content = build_content(data, draft_cost_ratio=0.05, with_predicted=False)
    assert content.report.cost_table == made.cost_table and content.report.negative_cells == made.negative_cells

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = open_sweep_run(uri, sweeps.first.config, sweeps.first.sweep_id, sweeps.first.fingerprint)
    log_sweep_summary(uri, parent, made, summary_markdown(made))
    client = MlflowClient(uri)
    experiment = client.get_run(parent).info.experiment_id
    table = client.load_table(experiment, "cost_table.json", run_ids=[parent])
    logged_rows = [DecisionRow.model_validate({k: (None if v != v else v) for k, v in row.items()})  # NaN: not measured
                   for row in table.to_dict("records")]
    assert len(logged_rows) == len(made.cost_table)
    assert all(_same(logged, row) for logged, row in zip(logged_rows, made.cost_table, strict=True))
    stored = json.loads(Path(client.download_artifacts(parent, "summary.json", str(tmp_path))).read_text())
    assert SweepReport.model_validate(stored) == made
    run = client.get_run(parent)
    quality = {k: v for k, v in run.data.metrics.items() if k.startswith("quality.ngram-k3.code.greedy.")}
    assert quality == pytest.approx({
        "quality.ngram-k3.code.greedy.score": 0.375, "quality.ngram-k3.code.greedy.baseline_score": 0.875,
        "quality.ngram-k3.code.greedy.difference": -0.5, "quality.ngram-k3.code.greedy.items": 8.0,
        "quality.ngram-k3.code.greedy.passed": 0.0,
        **{k: quality[k] for k in ("quality.ngram-k3.code.greedy.difference_low",
                                   "quality.ngram-k3.code.greedy.difference_high")}})
    assert -0.875 <= quality["quality.ngram-k3.code.greedy.difference_low"] < -0.2
    assert not any(k.startswith("quality.") and ".chat." in k for k in run.data.metrics)  # a gate not run: no figure
    assert run.data.tags["quality.draft-k2.chat.greedy.not_run"] == "prompt class 'chat' has no scored set " \
        "(prompt_classes[].scored_set)"


@pytest.fixture(scope="module")
def content(sweeps: Sweeps) -> ReportContent:
    """The first sweep's report, with the measured and predicted view."""
    return build_content(StoredSweep(sweeps.first.store.dir), 0.05)


def test_the_view_draws_measured_cells_and_marks_what_it_predicts(content: ReportContent) -> None:
    """Curves across concurrency (the measured 1 and 4, their midpoint 2, one step beyond: 8) and across
    k (1 to one past the largest measured, 3); each measured cell a point with its own interval."""
    view = content.predicted
    assert view is not None
    usable = [c for c in content.sweep.cells if c.usable]
    assert len(view.measured) == len(usable)
    for m in view.measured:
        t = m.qualified_tokens_per_s
        stored = next(c for c in usable if c.identity == m.identity).throughput.qualified_tokens_per_s
        assert t.estimate == stored and t.low is not None and t.high is not None and t.low <= t.estimate <= t.high
    curves = {(c.arm, c.prompt_class, c.at): c for c in view.across_concurrency}
    draft = curves[("draft-k2", "code", "k=2")]
    assert [p.load_value for p in draft.predicted] == [1, 2, 4, 8]
    assert draft.predicted[0].extrapolates == [] and draft.predicted[0].measured_cell
    assert [any(line.startswith("concurrency") for line in p.extrapolates) for p in draft.predicted] == \
        [False, False, False, True]
    assert "concurrency 8 > largest measured 4" in draft.predicted[-1].extrapolates
    assert {m.identity.load_value for m in draft.measured} == {1, 4}
    by_k = {(c.arm, c.prompt_class, c.at): c for c in view.across_k}
    assert [p.k for p in by_k[("draft", "chat", "c4")].predicted] == [1, 2, 3, 4]
    assert any(line.startswith("k 4 > largest measured 3") for line in by_k[("draft", "chat", "c4")].predicted[-1]
               .extrapolates)
    assert [m.identity.k for m in by_k[("draft", "chat", "c4")].measured] == [2]  # k3 chat c4 failed
    assert all(p.predicted and p.simulated_requests == view.requests_per_point for p in view.predictions)
    assert len({(p.arm, p.prompt_class, p.load_value) for p in view.predictions}) == len(view.predictions)


def test_what_the_model_cannot_predict_is_one_line_each_never_a_figure(content: ReportContent) -> None:
    """ngram has no spec-decode counters in this sweep: one line per class, and no ngram figure; a
    sweep with no usable cell: one line, nothing predicted."""
    view = content.predicted
    assert view is not None
    assert [line.partition(":")[0] for line in view.missing] == ["ngram on code", "ngram on chat"]
    assert all("no usable cell of arm ngram" in line for line in view.missing)
    assert not any(p.method == "ngram" for p in view.predictions)
    assert any("no spec-decode counters" in note for note in view.notes)
    failed = StoredSweep(content.sweep.dir)
    vars(failed)["cells"] = [c.model_copy(update={"status": "failed"}) for c in content.sweep.cells]  # as if stored so
    empty = predicted_view(failed)
    assert len(empty.missing) == 1 and "could not be calibrated" in empty.missing[0]
    assert empty.predictions == [] and empty.across_concurrency == [] and empty.measured == []


def test_predictions_enter_no_decision(content: ReportContent) -> None:
    """The report built with and without the view has the same decisions, verdicts, policies, gates and
    noise floors, and its markdown differs by the view's section alone."""
    with_view = content
    without = dataclasses.replace(build_content(content.sweep, 0.05, with_predicted=False),
                                  generated_at=with_view.generated_at)
    assert with_view.predicted is not None and with_view.predicted.predictions and without.predicted is None
    assert dataclasses.replace(with_view, predicted=None) == without
    markdown, plain = render_markdown(with_view, "report.html"), render_markdown(without, "report.html")
    section = re.search(r"\n\n## Measured and predicted\n.*?(?=\n\n## |\n\Z)", markdown, re.DOTALL)
    assert section is not None and markdown.replace(section.group(0), "") == plain


SENTINEL = re.compile(r"(?<![\w.,])7[78]\d,?\d{3}(?:\.\d+)?(?![\w])")


def _with_sentinels(view: PredictedView) -> PredictedView:
    """The view with every predicted float replaced by a distinct number from 777001 up (no measured figure
    of this sweep comes near), so each one's place in the rendered text can be found."""
    from specfleet.perfmodel.prediction import Prediction

    counter = itertools.count(777_001)

    def swap(value: object) -> object:
        if isinstance(value, float):
            return float(next(counter))
        if isinstance(value, dict):
            return {key: swap(v) for key, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    made = {id(p): Prediction.model_validate({key: value if key == "load_value" else swap(value)
                                              for key, value in p.model_dump().items()}) for p in view.predictions}
    return dataclasses.replace(
        view, predictions=[made[id(p)] for p in view.predictions],
        across_concurrency=[dataclasses.replace(c, predicted=[made[id(p)] for p in c.predicted])
                            for c in view.across_concurrency],
        across_k=[dataclasses.replace(c, predicted=[made[id(p)] for p in c.predicted]) for c in view.across_k])


def test_every_predicted_value_in_the_markdown_sits_under_a_predicted_label(content: ReportContent) -> None:
    assert content.predicted is not None
    view = _with_sentinels(content.predicted)
    markdown = render_markdown(dataclasses.replace(content, predicted=view), "report.html")
    heading, header, shown = "", list[str](), set[float]()
    for line in markdown.splitlines():
        heading = line if line.startswith("#") else heading
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] if line.startswith("|") else None
        if cells is None:
            header = []
        elif not header:
            header = cells
        for i, cell in enumerate(cells or [line]):
            for value in SENTINEL.findall(cell):
                assert cells is not None and "PREDICTED" in header[i], f"{value} outside a PREDICTED column: {line}"
                assert "PREDICTED" in heading, f"{value} in a table titled {heading!r}"
                shown.add(float(value.replace(",", "")))
    points = {p.qualified_tokens_per_s for p in view.predictions}
    bounds = {b for p in view.predictions for b in (p.interval.qualified_tokens_per_s.low,
                                                     p.interval.qualified_tokens_per_s.high)}
    assert points and points | bounds <= shown
