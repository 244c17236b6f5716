"""Synthetic sweep inputs for unit tests: stand-in checkpoint folders, a small config, and
cells assembled by the real metrics code from exact integer request records."""

import json
from pathlib import Path

from specfleet.contract import CellIdentity, SweepConfig, parse_sweep_config
from specfleet.measure.metrics import assemble_cell
from specfleet.results import CellResult, EnergyReading, SpecDecodeStats
from specfleet.results.records import RequestRecord
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.store.results import ResultsStore
from tests.support.records import paced_record

TOKENS = 8


def fake_models(root: Path) -> tuple[Path, Path]:
    """Folders with checkpoint-like files: enough to resolve and fingerprint, never served."""
    for name in ("target", "draft"):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"name": name}))
        (folder / "model.safetensors").write_bytes(name.encode() * 16)
        (folder / "tokenizer.json").write_text("{}")
    (root / "code.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"x{i} ="}) + "\n"
                                             for i in range(4)))
    return root / "target", root / "draft"


def write_config(root: Path, secret_env: str | None = None) -> Path:
    target, draft = fake_models(root)
    engine = f"engine: {{api_key_env: {secret_env}, env: {{HF_TOKEN: hf-literal}}}}\n" if secret_env else ""
    text = f"""
name: unit-sweep
models: {{target: {{path: {target}}}, draft: {{path: {draft}}}}}
{engine}arms:
  - {{name: baseline, method: baseline}}
  - {{name: draft, method: draft_model, k: [2]}}
load: {{concurrency: [1], requests_per_cell: 4}}
prompt_classes: [{{name: code, source: jsonl, path: code.jsonl, max_output_tokens: {TOKENS}}}]
slo: {{ttft_ms: 50, itl_ms: 20}}
hardware: {{accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 100}}
equivalence: {{prompts: 2}}
analysis: {{bootstrap_resamples: 200}}
"""
    path = root / "sweep.yaml"
    path.write_text(text)
    return path


def load(path: Path) -> SweepConfig:
    return parse_sweep_config(path.read_text(), str(path))


def records(gap_ms: int, tokens_per_chunk: int = 1, n: int = 4) -> list[RequestRecord]:
    """``n`` requests of ``TOKENS`` tokens each, TTFT 10 ms, one chunk every ``gap_ms``."""
    return [paced_record(i, gap_ms, TOKENS // tokens_per_chunk, tokens_per_chunk, usage_completion_tokens=TOKENS,
                         finish_reason="length", max_tokens=TOKENS) for i in range(n)]


def store_cell(store: ResultsStore, config: SweepConfig, ident: CellIdentity, key: str,
               reqs: list[RequestRecord], status_failed: bool = False, duration_s: float = 4.0) -> CellResult:
    records_file = store.write_records(key, reqs)
    spec = None if ident.k is None else SpecDecodeStats(
        num_drafts=10, num_draft_tokens=20, num_accepted_tokens=15, accepted_per_position=[8, 7],
        acceptance_rate=0.75, mean_acceptance_length=2.5, acceptance_per_position=[0.8, 0.7])
    cell = assemble_cell(ident, key, reqs, slo=config.slo, duration_s=duration_s, requests_planned=len(reqs),
                         ignore_eos=True, max_error_fraction=0.05,
                         energy=EnergyReading(source="none", joules=None, reason="no counter here"),
                         spec_decode=spec, server_failed=status_failed,
                         records_file=records_file, started_at=f"t-{key}")
    store.write_cell(cell)
    return cell


def stored_sweep(root: Path, failed: bool = False) -> SweepPlan:
    """The ``write_config`` sweep planned under ``root / "results"`` with every cell stored: the
    baseline's chunks 5 ms apart, the draft's two tokens a chunk 8 ms apart."""
    plan = plan_sweep(write_config(root), None, root / "results")
    for key, ident in plan.cells.items():
        reqs = records(5) if ident.k is None else records(8, tokens_per_chunk=2)
        store_cell(plan.store, plan.config, ident, key, reqs, status_failed=failed)
    return plan
