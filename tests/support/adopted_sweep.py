"""A small synthetic sweep that adopts a speculative arm, stored and aggregated as the flow does
(``summary.json`` from ``specfleet_tasks.analysis.summary.aggregate``): what ``specfleet monitor rules`` reads.

draft-k2 streams two tokens a chunk against the baseline's one, in half the window, on the seed's
three prompt classes, and passes its gates: it is adopted. ngram-k3 diverges from the baseline's
greedy text: rejected. The chunk gaps per concurrency level set the break-even (speculative gap /
baseline gap); the closing baseline's windows, a little apart from the opening's, the noise."""

import json
from dataclasses import dataclass
from pathlib import Path

from specfleet.contract import CellIdentity
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import ClassAnswers, QualityProbe, item_answers
from specfleet.measure.metrics import assemble_cell
from specfleet.report.sweep_report import SweepReport
from specfleet.results import EnergyReading, SpecDecodeStats
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from tests.support.sweep_data import TOKENS, fake_models, records

CONFIG = """
name: monitor-sweep
models: {{target: {{path: {target}}}, draft: {{path: {draft}}}}}
arms:
  - {{name: baseline, method: baseline}}
  - {{name: draft, method: draft_model, k: [2]}}
  - {{name: ngram, method: ngram, k: [3]}}
load: {{concurrency: [1, 4], requests_per_cell: 4}}
prompt_classes:
  - {{name: code, source: jsonl, path: code.jsonl, max_output_tokens: {tokens}, scored_set: scored.jsonl}}
  - {{name: chat, source: jsonl, path: code.jsonl, max_output_tokens: {tokens}, scored_set: scored.jsonl}}
  - {{name: extraction, source: jsonl, path: code.jsonl, max_output_tokens: {tokens}, scored_set: scored.jsonl}}
slo: {{ttft_ms: 50, itl_ms: 20}}
hardware: {{accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 100}}
equivalence: {{prompts: 2, quality_tolerance: 0.2}}
analysis: {{bootstrap_resamples: 200}}
"""
SCORED = "".join(json.dumps({"id": f"q{i}", "prompt": f"{i} + {i} =", "reference": 2 * i, "scorer": "numeric"}) + "\n"
                 for i in range(1, 5))
GAP_MS = {("baseline", 1): 5, ("baseline", 4): 6, ("draft-k2", 1): 7, ("draft-k2", 4): 10, ("ngram-k3", 1): 6,
          ("ngram-k3", 4): 8}
"""Chunk gap per (arm, concurrency): break-even of draft-k2 7/5 = 1.4 at 1 and 10/6 at 4."""
TOKENS_PER_CHUNK = {"baseline": 1, "draft-k2": 2, "ngram-k3": 1}
WINDOW_S = {"main": 4.0, "speculative": 2.0}
END_WINDOW_S = {("code", 1): 4.04, ("code", 4): 3.98, ("chat", 1): 3.96, ("chat", 4): 4.02, ("extraction", 1): 4.01,
                ("extraction", 4): 3.99}
"""Measured windows: the closing baseline's, a percent or less from the opening's, set the noise."""


@dataclass(frozen=True)
class AdoptedSweep:
    root: Path
    plan: SweepPlan
    summary: SweepReport

    @property
    def results(self) -> Path:
        return self.plan.store.root

    @property
    def sweep_id(self) -> str:
        return self.plan.sweep_id


def _spec(ident: CellIdentity) -> SpecDecodeStats | None:
    if ident.k is None:
        return None
    accepted = 12 if ident.method == "draft_model" else 3
    return SpecDecodeStats(num_drafts=12, num_draft_tokens=12 * ident.k, num_accepted_tokens=accepted,
                           accepted_per_position=[accepted], acceptance_rate=accepted / (12 * ident.k),
                           mean_acceptance_length=1 + accepted / 12, acceptance_per_position=[accepted / 12])


def _store(plan: SweepPlan, adopt: bool) -> None:
    store = plan.store
    for key, ident in plan.cells.items():
        reqs = records(GAP_MS[(ident.arm, ident.concurrency)], TOKENS_PER_CHUNK[ident.arm])
        window = (WINDOW_S["speculative"] if ident.k is not None else WINDOW_S["main"] if ident.phase == "main"
                  else END_WINDOW_S[(ident.prompt_class, ident.concurrency)])
        cell = assemble_cell(ident, key, reqs, slo=plan.config.slo, duration_s=window, requests_planned=len(reqs),
                             ignore_eos=True, max_error_fraction=0.05,
                             energy=EnergyReading(source="none", joules=None, reason="no counter here"),
                             spec_decode=_spec(ident), records_file=store.write_records(key, reqs),
                             started_at=f"t-{key}")
        store.write_cell(cell)
    greedy = {"p0": [1, 2, 3], "p1": [4, 5, 6]}
    store.write_json("equivalence/baseline.json", EquivalenceProbe(arm="baseline", greedy=greedy, greedy_repeat=greedy))
    diverging = greedy | {"p0": [1, 2, 9]}
    store.write_json("equivalence/draft-k2.json",
                     EquivalenceProbe(arm="draft-k2", greedy=greedy if adopt else diverging))
    store.write_json("equivalence/ngram-k3.json", EquivalenceProbe(arm="ngram-k3", greedy=diverging))
    scored = plan.scored_sets["code"]
    assert scored is not None
    answers = {item.id: str(2 * (i + 1)) for i, item in enumerate(scored.items)}
    for arm in ("baseline", "draft-k2", "ngram-k3"):
        every = ClassAnswers(source=scored.source, sha256=scored.sha256,
                             answers={"greedy": item_answers(scored.items, answers, {})})
        store.write_json(f"quality/{arm}.json", QualityProbe(arm=arm, classes=dict.fromkeys(
            ("code", "chat", "extraction"), every)))


def adopted_sweep(root: Path, adopt: bool = True) -> AdoptedSweep:
    """The sweep under ``root / "results"``, its config at ``root / "sweep.yaml"``; with ``adopt``
    False draft-k2 diverges from the baseline too, and nothing is adopted."""
    target, draft = fake_models(root)
    config = root / "sweep.yaml"
    config.write_text(CONFIG.format(target=target, draft=draft, tokens=TOKENS))
    (root / "scored.jsonl").write_text(SCORED)
    plan = plan_sweep(config, None, root / "results")
    _store(plan, adopt)
    summary = aggregate(plan, [])
    plan.store.write_json("summary.json", summary)  # as the flow writes it
    return AdoptedSweep(root, plan, summary)
