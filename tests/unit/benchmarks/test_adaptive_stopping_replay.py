"""The adaptive-stopping replay over a stored sweep (records from the sweep test fixture)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.adaptive_stopping import budget_precision, main, replay_cell
from specfleet.contract import CellIdentity, SLOSpec
from specfleet.contract.fingerprint import Fingerprint
from specfleet.contract.workload import AdaptiveStoppingSpec
from specfleet.results.records import RequestRecord
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.store.sweep import SWEEP_FILE, SweepRecord
from tests.support.records import MS
from tests.support.sweep_data import load, records, store_cell, write_config

SLO = SLOSpec(ttft_ms=50, itl_ms=20)  # the fixture config's SLO


def _spec(n: int, target: float) -> AdaptiveStoppingSpec:
    return AdaptiveStoppingSpec(relative_half_width=target, min_requests=4, max_requests=n, check_every=1)


def _replay(reqs: list[RequestRecord], target: float) -> tuple[int, str]:
    result = replay_cell(reqs, SLO, 0.95, _spec(len(reqs), target), budget_precision(reqs, SLO, 0.95))
    return result.used_requests, result.reason


def _shifted(record: RequestRecord, send_ns: int, slower_by_ms: int) -> RequestRecord:
    """The record re-sent at ``send_ns``, each gap ``slower_by_ms`` longer."""
    chunks = tuple(send_ns + (t - record.send_ns) + j * slower_by_ms * MS for j, t in enumerate(record.chunk_ns))
    return replace(record, send_ns=send_ns, chunk_ns=chunks, end_ns=chunks[-1])


def test_identical_serial_requests_stop_at_min_requests() -> None:
    assert _replay(records(10, n=12), target=0.05) == (4, "precise")


def test_requests_in_flight_at_the_stop_count_as_used() -> None:
    # Four at a time (concurrency 4): the first four complete in index order, the next four are sent
    # before the fourth completes, so stopping at four completions has used eight requests.
    base = records(10, n=12)
    overlapped = [_shifted(r, (i // 4) * 60 * MS, 0) for i, r in enumerate(base)]
    assert _replay(overlapped, target=0.05) == (8, "precise")


def test_noisy_requests_need_the_whole_budget_for_a_tight_target() -> None:
    rng = np.random.default_rng(3)
    noisy = [_shifted(r, r.send_ns, int(rng.integers(0, 10))) for r in records(5, n=12)]
    assert _replay(noisy, target=0.001) == (12, "max_requests")


def test_main_replays_the_newest_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = write_config(tmp_path)
    config = load(config_path)
    store = ResultsStore(tmp_path / "results", "unit-sweep-1")
    store.write_json(SWEEP_FILE, SweepRecord(name=config.name, config_source=str(config_path), config=config,
                                             fingerprint=Fingerprint(target=None, tokenizer=None, engine="vllm",
                                                                     engine_version=None)))
    ident = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=1.0,
                         prompt_class="code", sampling="greedy", repeat=0)
    store_cell(store, config, ident, "k1", records(10, n=12))
    assert main([str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "baseline / code / c1" in out and "all cells" in out


def test_main_without_results_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nothing")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no sweep results" in out
