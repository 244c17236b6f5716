"""Measurement on real vLLM CPU arms with the fixture models: acceptance, latency, accounting,
equivalence, a server killed mid-cell, and no orphan processes."""

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from specfleet.contract import SweepConfig, arm_plans, cell_identities, parse_sweep_config
from specfleet.prompts import PromptItem
from specfleet.server_args import server_args, server_env
from tasks.arm import ArmOutcome, run_arm
from tasks.engine.ports import free_port
from tasks.engine.server import ArmServer, ArmStartError
from tasks.loadgen import read_records_parquet
from tasks.prompt_sets import load_prompt_class
from tasks.store import ResultsStore
from tests.integration.conftest import ROOT, live_engine_pids, new_server_serving

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
        timing = outcome.timing
        assert timing.server_starts == 1 and timing.restarts == 0 and timing.startup_s > 0
        assert timing.probe_s > 0 and timing.measured_s > 0 and timing.warmup_s > 0
        assert timing.measured_fraction is not None and 0 < timing.measured_fraction < 1
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
    arms, store = outcomes
    for outcome in arms.values():
        cell = outcome.cells[0]
        assert cell.completed == 8 and cell.failed == 0
        assert not [r for r in cell.reasons if "accounting" in r], cell.reasons
        assert cell.throughput.output_tokens == 8 * 32
        for series in (cell.ttft_ms, cell.e2e_ms, cell.itl_per_chunk_ms, cell.tpot_ms):
            assert series.p50 is not None and series.p95 is not None and series.p99 is not None
            assert 0 <= series.p50.value <= series.p95.value <= series.p99.value
        for series in (cell.ttft_ms, cell.e2e_ms, cell.tpot_ms):
            assert series.p50 is not None and series.p50.value > 0
        assert cell.itl_per_chunk_ms.mean is not None and cell.itl_per_chunk_ms.mean > 0
        gaps = [gap for r in read_records_parquet(store.records_path(cell.key)) for gap in r.itl_per_chunk_ns]
        assert len(gaps) == cell.itl_per_chunk_ms.count
        assert cell.chunks_read_together_fraction == sum(1 for gap in gaps if gap == 0) / len(gaps)
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


def _kill_the_engine_after(requests: int, engines_before: set[int], timeout_s: float = 600.0) -> None:
    """SIGKILL the process group of the first new vLLM API server once it has served ``requests``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc = new_server_serving(engines_before, requests)
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            return
        time.sleep(0.2)


def test_a_server_killed_mid_cell_fails_that_cell_and_restarts_for_the_rest(
    config: SweepConfig, prompts: dict[str, list[PromptItem]], fixture_models: dict[str, str], tmp_path: Path,
    no_orphans: None,
) -> None:
    config = config.model_copy(update={"load": config.load.model_copy(
        update={"concurrency": [1, 2], "requests_per_cell": 40, "warmup_requests": 0})})
    store = ResultsStore(tmp_path, "kill-test")
    arm = arm_plans(config)[0]
    cells = [(c, c.key("kill")) for c in cell_identities(config, arm)]
    killer = threading.Thread(target=_kill_the_engine_after, args=(4, live_engine_pids()), daemon=True)
    killer.start()
    outcome = run_arm(config, arm, cells, fixture_models, prompts, store, probe=False)
    killer.join(timeout=5)

    killed, after = outcome.cells
    assert killed.status == "failed" and "the server died during the cell" in killed.reasons
    assert any(reason.startswith("server log ") for reason in killed.reasons)
    assert killed.completed >= 4 and killed.failed > 0
    assert after.status != "failed" and after.completed == 40
    assert outcome.timing.server_starts == 2 and outcome.timing.restarts == 1
    assert outcome.error is not None and "server died during cell" in outcome.error
    stored = json.loads(store.cell_path(killed.key).read_text())
    assert stored["status"] == "failed" and stored["completed"] == killed.completed
    records = read_records_parquet(store.records_path(killed.key))
    assert sum(1 for r in records if r.ok) == killed.completed
    assert any(r.error for r in records)
    assert store.complete_keys() == {after.key}  # --resume measures only the killed cell


def _never_healthy(config: SweepConfig, fixture_models: dict[str, str], tmp_path: Path, port: int,
                   resolved: dict[str, str] | None = None) -> str:
    """Start the baseline's server as a sweep would; return the start error it must raise."""
    arm = arm_plans(config)[0]
    args = server_args(config.engine, config.models.target, arm, resolved or fixture_models, port, "t")
    server = ArmServer(args, server_env(config.engine, arm), "127.0.0.1", port, tmp_path / "server.log",
                       startup_timeout_s=300)
    with pytest.raises(ArmStartError) as failure:
        server.start()
    assert not server.alive()
    return str(failure.value)


def test_a_taken_port_fails_the_start_with_the_servers_own_error(
    config: SweepConfig, fixture_models: dict[str, str], tmp_path: Path, no_orphans: None
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        message = _never_healthy(config, fixture_models, tmp_path, taken.getsockname()[1])
    assert "before becoming healthy" in message and "Address already in use" in message


def test_a_folder_that_is_not_a_model_fails_the_start_with_the_servers_own_error(
    config: SweepConfig, fixture_models: dict[str, str], tmp_path: Path, no_orphans: None
) -> None:
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    message = _never_healthy(config, fixture_models, tmp_path, free_port(),
                             fixture_models | {"fixture:target": str(broken)})
    assert "before becoming healthy" in message and str(tmp_path / "server.log") in message
    assert "Error" in message.split("ends:", 1)[1]


def test_not_enough_memory_fails_the_start_with_the_servers_own_error(
    config: SweepConfig, fixture_models: dict[str, str], tmp_path: Path, no_orphans: None
) -> None:
    """A KV cache larger than this machine's memory (vLLM checks before allocating it)."""
    hungry = config.model_copy(update={"engine": config.engine.model_copy(update={"cpu_kvcache_space_gib": 4096})})
    message = _never_healthy(hungry, fixture_models, tmp_path, free_port())
    assert "before becoming healthy" in message and "less than requested memory for kv" in message
