"""Measurement on real vLLM CPU arms with the fixture models: acceptance, latency, accounting and
equivalence on the reference sweep's arms; a server killed mid-cell, and one that cannot start,
each with its own server and no orphan process left.

A taken port is the one start failure started for real here: every start failure takes the
same path (the process exits before /health answers, and the message carries vLLM's first
error and the log's tail). What vLLM writes for a folder that is not a model and for a KV cache
larger than memory is kept as stored log text (``tests/unit/tasks/engine/data/``), and the parsing of
it is tested there."""

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from specfleet.contract import SweepConfig, arm_plans, cell_identities
from specfleet.contract.prompts import PromptItem
from specfleet.contract.server_args import server_args, server_env
from specfleet.measure.acceptance import NO_SERVER_FIGURES
from specfleet.results import ArmTiming
from specfleet_tasks.arm.lifecycle import run_arm
from specfleet_tasks.engine.server import ArmServer, ArmStartError
from specfleet_tasks.plan.prompt_sets import load_prompt_class
from specfleet_tasks.store.parquet import read_records_parquet
from specfleet_tasks.store.results import ResultsStore
from tests.integration.idle_servers import server_config
from tests.integration.processes import live_engine_pids, new_server_serving
from tests.integration.reference import ARMS, GREEDY_PROMPTS, GREEDY_TOKENS, MAX_TOKENS, REQUESTS, ReferenceSweep
from tests.integration.sweep_configs import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

KILL_AFTER = 4
"""The server is killed once it has served this many of the first cell's 30 requests. The 26 left
(at concurrency 1, several seconds) leave room for the killer's 0.2 s poll and a loaded CI
machine's stalls: with 12 a request, the killer once fired only in the second cell. Requests
after the kill fail at once (connection refused), so the margin costs no time in the first cell;
the second cell's 30 show the restarted server measures a whole cell."""


@pytest.fixture(scope="module")
def config() -> SweepConfig:
    """The test servers' config at concurrency 1 then 2, 30 requests per cell, no warm-up."""
    config = server_config()
    load = config.load.model_copy(update={"concurrency": [1, 2], "requests_per_cell": 30, "warmup_requests": 0})
    return config.model_copy(update={"load": load})


@pytest.fixture(scope="module")
def prompts(config: SweepConfig) -> dict[str, list[PromptItem]]:
    return {p.name: load_prompt_class(p, ROOT / "configs") for p in config.prompt_classes}


# --- the reference sweep's arms: baseline, draft_model k=2, ngram k=3 at concurrency 2 ----------

def test_every_arm_started_and_measured(reference: ReferenceSweep) -> None:
    arms = {arm["arm"] + ("-end" if arm["phase"] == "baseline_end" else ""): arm
            for arm in reference.summary()["arms"]}
    assert set(arms) == {*ARMS, "baseline-end"}
    cells = reference.cells()
    for name, arm in arms.items():
        assert arm["error"] is None and arm["cells_measured"] == 1
        timing = ArmTiming.model_validate(arm["timing"])
        assert timing.server_starts == 1 and timing.restarts == 0 and timing.startup_s > 0
        assert timing.measured_s > 0 and timing.warmup_s > 0
        assert (timing.probe_s > 0) == (name != "baseline-end")  # the closing baseline runs no probes
        assert arm["measured_fraction"] is not None and 0 < arm["measured_fraction"] < 1
        assert reference.store.records_path(cells[name].key).exists()


def test_acceptance_counters_moved_and_are_consistent(reference: ReferenceSweep) -> None:
    cells = reference.cells()
    assert cells["baseline"].spec_decode is None
    for name, k in (("draft-k2", 2), ("ngram-k3", 3)):
        spec = cells[name].spec_decode
        assert spec is not None, cells[name].spec_decode_unavailable
        assert spec.num_drafts > 0 and spec.num_draft_tokens > 0
        assert spec.acceptance_rate is not None and 0 < spec.acceptance_rate <= 1
        assert spec.mean_acceptance_length is not None and 1 < spec.mean_acceptance_length <= k + 1
        per_pos = spec.acceptance_per_position
        assert len(per_pos) == k
        assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))
        # the sweep started the arm with --per-request-spec-decode-metrics: vLLM's own figure per request
        per_request = cells[name].request_acceptance
        assert per_request is not None
        server = per_request.request_mean_acceptance_length
        assert server.requests + server.requests_without == REQUESTS and server.requests > 0
        assert server.missing is None or NO_SERVER_FIGURES not in server.missing
        assert server.token_weighted_mean == pytest.approx(spec.mean_acceptance_length, rel=1e-9)
        assert per_request.tokens_per_step is not None and 1 <= per_request.tokens_per_step <= k + 1
    baseline = cells["baseline"].request_acceptance
    assert baseline is not None and baseline.request_mean_acceptance_length.requests == 0


def test_latencies_and_token_accounting(reference: ReferenceSweep) -> None:
    for cell in reference.cells().values():
        assert cell.completed == REQUESTS and cell.failed == 0
        assert not [r for r in cell.reasons if "accounting" in r], cell.reasons
        assert cell.throughput.output_tokens == REQUESTS * MAX_TOKENS
        for series in (cell.ttft_ms, cell.e2e_ms, cell.itl_per_chunk_ms, cell.tpot_ms):
            assert series.p50 is not None and series.p95 is not None and series.p99 is not None
            assert 0 <= series.p50.value <= series.p95.value <= series.p99.value
        for series in (cell.ttft_ms, cell.e2e_ms, cell.tpot_ms):
            assert series.p50 is not None and series.p50.value > 0
        assert cell.itl_per_chunk_ms.mean is not None and cell.itl_per_chunk_ms.mean > 0
        gaps = [gap for r in read_records_parquet(reference.store.records_path(cell.key)) for gap in r.itl_per_chunk_ns]
        assert len(gaps) == cell.itl_per_chunk_ms.count
        assert cell.chunks_read_together_fraction == sum(1 for gap in gaps if gap == 0) / len(gaps)
        assert cell.kv_cache is not None and cell.kv_cache.kv_cache_size_tokens
        assert cell.energy.source in {"none", "nvml", "rapl"}
        if cell.energy.source == "none":
            assert cell.energy.joules is None and cell.energy.reason


def test_greedy_outputs_match_the_baseline(reference: ReferenceSweep) -> None:
    equivalence = reference.store.dir / "equivalence"
    baseline = json.loads((equivalence / "baseline.json").read_text())
    assert baseline["greedy"] == baseline["greedy_repeat"] and len(baseline["greedy"]) == GREEDY_PROMPTS
    for name in ("draft-k2", "ngram-k3"):
        candidate = json.loads((equivalence / f"{name}.json").read_text())
        assert candidate["greedy"] == baseline["greedy"]
        assert all(len(tokens) == GREEDY_TOKENS for tokens in candidate["greedy"].values())


# --- servers of their own: killed mid-cell, or never healthy -------------------------------------

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
    store = ResultsStore(tmp_path, "kill-test")
    arm = arm_plans(config)[0]
    cells = [(c, c.key("kill")) for c in cell_identities(config, arm)]
    killer = threading.Thread(target=_kill_the_engine_after, args=(KILL_AFTER, live_engine_pids()), daemon=True)
    killer.start()
    outcome = run_arm(config, arm, cells, fixture_models, prompts, store, probe=False)
    killer.join(timeout=5)

    killed, after = outcome.cells
    assert killed.status == "failed" and "the server died during the cell" in killed.reasons, killed.reasons
    assert any(reason.startswith("server log ") for reason in killed.reasons)
    assert killed.completed >= KILL_AFTER and killed.failed > 0
    assert after.status != "failed" and after.completed == config.load.requests_per_cell
    assert outcome.timing.server_starts == 2 and outcome.timing.restarts == 1
    assert outcome.error is not None and "server died during cell" in outcome.error
    stored = json.loads(store.cell_path(killed.key).read_text())
    assert stored["status"] == "failed" and stored["completed"] == killed.completed
    records = read_records_parquet(store.records_path(killed.key))
    assert sum(1 for r in records if r.ok) == killed.completed
    assert any(r.error for r in records)
    assert store.complete_keys() == {after.key}  # --resume measures only the killed cell


def _never_healthy(config: SweepConfig, fixture_models: dict[str, str], tmp_path: Path, port: int) -> str:
    """Start the baseline's server as a sweep would; return the start error it must raise."""
    arm = arm_plans(config)[0]
    args = server_args(config.engine, config.models.target, arm, fixture_models, port, "t",
                       tensor_parallel_size=config.hardware.tensor_parallel_size)
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
