"""Measurement on real vLLM CPU arms with the fixture models: acceptance, latency, accounting,
equivalence, a server killed mid-cell, and no orphan processes."""

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from specfleet.contract import SweepConfig, arm_plans, cell_identities, parse_sweep_config
from specfleet.prompts import PromptItem
from specfleet.results import CellResult
from tasks.arm import ArmOutcome, _server, cell_plan, run_arm
from tasks.cell import Endpoint, measure_cell
from tasks.energy import EnergyWindow
from tasks.prompt_sets import load_prompt_class
from tasks.store import ResultsStore
from tests.integration.conftest import ROOT, live_engine_pids

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

CONFIG = """
name: measure-test
models: {target: {path: "fixture:target", dtype: float32}, draft: {path: "fixture:draft", dtype: float32}}
engine: {max_model_len: 1024, max_num_seqs: 8, cpu_kvcache_space_gib: 1, startup_timeout_s: 400,
         env: {VLLM_USE_V2_MODEL_RUNNER: "0"}}
arms:
  - {name: baseline, method: baseline}
  - {name: draft, method: draft_model, k: [3]}
  - {name: ngram, method: ngram, k: [3], prompt_lookup_min: 2, prompt_lookup_max: 5}
load: {concurrency: [2], warmup_requests: 1, requests_per_cell: 8, request_timeout_s: 120}
prompt_classes: [{name: code, max_output_tokens: 32}]
slo: {ttft_ms: 60000, itl_ms: 60000}
hardware: {accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 100}
equivalence: {prompt_class: code, prompts: 4, greedy_max_tokens: 24}
"""


@pytest.fixture(scope="module")
def config() -> SweepConfig:
    return parse_sweep_config(CONFIG, "measure-test")


@pytest.fixture(scope="module")
def prompts(config: SweepConfig) -> dict[str, list[PromptItem]]:
    return {p.name: load_prompt_class(p, ROOT / "configs") for p in config.prompt_classes}


@pytest.fixture(scope="module")
def outcomes(
    config: SweepConfig, prompts: dict[str, list[PromptItem]], fixture_models: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, ArmOutcome], ResultsStore]:
    store = ResultsStore(tmp_path_factory.mktemp("results"), "measure-test")
    engines_before = live_engine_pids()
    found = {}
    for arm in arm_plans(config):
        cells = [(c, c.key("test")) for c in cell_identities(config, arm)]
        found[arm.arm] = run_arm(config, arm, cells, fixture_models, prompts, store)
    assert live_engine_pids() <= engines_before, "an arm left its engine running"
    return found, store


def test_every_arm_started_and_measured(outcomes: tuple[dict[str, ArmOutcome], ResultsStore]) -> None:
    arms, store = outcomes
    assert set(arms) == {"baseline", "draft-k3", "ngram-k3"}
    for outcome in arms.values():
        assert outcome.error is None
        assert outcome.startup_s is not None and outcome.startup_s > 0
        assert len(outcome.cells) == 1
        assert (store.dir / "cells" / f"{outcome.cells[0].key}.json").exists()
        assert (store.dir / "records" / f"{outcome.cells[0].key}.parquet").exists()


def test_acceptance_counters_moved_and_are_consistent(outcomes: tuple[dict[str, ArmOutcome], ResultsStore]) -> None:
    arms, _ = outcomes
    assert arms["baseline"].cells[0].spec_decode is None
    for name in ("draft-k3", "ngram-k3"):
        spec = arms[name].cells[0].spec_decode
        assert spec is not None, arms[name].cells[0].spec_decode_unavailable
        assert spec.num_drafts > 0 and spec.num_draft_tokens > 0
        assert spec.acceptance_rate is not None and 0 < spec.acceptance_rate <= 1
        assert spec.mean_acceptance_length is not None and 1 < spec.mean_acceptance_length <= 3 + 1
        per_pos = spec.acceptance_per_position
        assert len(per_pos) == 3
        assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))


def test_latencies_and_token_accounting(outcomes: tuple[dict[str, ArmOutcome], ResultsStore]) -> None:
    arms, _ = outcomes
    for outcome in arms.values():
        cell = outcome.cells[0]
        assert cell.completed == 8 and cell.failed == 0
        assert not [r for r in cell.reasons if "accounting" in r], cell.reasons
        assert cell.throughput.output_tokens == 8 * 32
        for series in (cell.ttft_ms, cell.e2e_ms, cell.itl_per_chunk_ms, cell.tpot_ms):
            assert series.p50 is not None and series.p95 is not None and series.p99 is not None
            assert 0 < series.p50.value <= series.p95.value <= series.p99.value
        assert cell.kv_cache is not None and cell.kv_cache.kv_cache_size_tokens
        assert cell.energy.source in {"none", "nvml", "rapl"}
        if cell.energy.source == "none":
            assert cell.energy.joules is None and cell.energy.reason


def test_greedy_outputs_match_the_baseline(outcomes: tuple[dict[str, ArmOutcome], ResultsStore]) -> None:
    _, store = outcomes
    baseline = json.loads((store.dir / "equivalence" / "baseline.json").read_text())
    assert baseline["greedy"] == baseline["greedy_repeat"]
    for name in ("draft-k3", "ngram-k3"):
        candidate = json.loads((store.dir / "equivalence" / f"{name}.json").read_text())
        assert candidate["greedy"] == baseline["greedy"]
        assert all(len(tokens) == 24 for tokens in candidate["greedy"].values())


def test_server_killed_mid_cell_keeps_completed_requests(
    config: SweepConfig, prompts: dict[str, list[PromptItem]], fixture_models: dict[str, str], tmp_path: Path,
    no_orphans: None,
) -> None:
    store = ResultsStore(tmp_path, "kill-test")
    arm = arm_plans(config)[0]
    identity = cell_identities(config, arm)[0]
    plan = cell_plan(config, identity, "killed", prompts["code"])
    plan = type(plan)(**{**plan.__dict__, "requests": 200})
    server = _server(config, arm, fixture_models, store.log_path(arm.arm))

    async def kill_after_some_finish() -> None:
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            while True:
                metrics = (await client.get("/metrics")).text
                done = [ln for ln in metrics.splitlines() if ln.startswith("vllm:request_success_total")]
                if sum(float(ln.rsplit(" ", 1)[1]) for ln in done) >= 4:
                    server.kill()
                    return
                await asyncio.sleep(0.2)

    async def scenario() -> CellResult:
        endpoint = Endpoint(server.base_url, "specfleet-target")
        killer = asyncio.create_task(kill_after_some_finish())
        cell = await measure_cell(endpoint, plan, EnergyWindow(None, "test"), store, server.alive)
        await killer
        return cell

    with server:
        cell = asyncio.run(scenario())
    assert cell.status == "failed"
    assert "the server died during the cell" in cell.reasons
    assert cell.completed >= 2 and cell.failed > 0
    stored = json.loads(store.cell_path("killed").read_text())
    assert stored["completed"] == cell.completed
    from tasks.loadgen import read_records_parquet

    records = read_records_parquet(store.records_path("killed"))
    assert sum(1 for r in records if r.ok) == cell.completed
    assert any(r.error for r in records)
