"""Benchmark results are data: typed records under benchmarks/results/, rendered into docs/results.md and the
README's "is it good?" table, which a test keeps in step with them."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks.results_page import PAGE, README, latest, main, page, readme_table, with_readme_table
from benchmarks.results_record import RESULTS_DIR, BenchmarkResult, read_results, write_result


def test_the_page_and_the_readme_table_are_generated_from_the_records() -> None:
    records = read_results(RESULTS_DIR)
    assert {r.benchmark for _, r in records} >= {"model_accuracy", "plan_accuracy", "decision_calibration",
                                                  "client_capacity", "stage_timing"}
    assert PAGE.read_text(encoding="utf-8") == page(records), "run python -m benchmarks.results_page"
    readme = README.read_text(encoding="utf-8")
    assert readme == with_readme_table(readme, readme_table(records)), "run python -m benchmarks.results_page"
    assert main(["--check"]) == 0


def test_the_check_fails_on_a_stale_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stale = tmp_path / "results.md"
    stale.write_text(PAGE.read_text(encoding="utf-8").replace("met", "unmet", 1), encoding="utf-8")
    monkeypatch.setattr("benchmarks.results_page.PAGE", stale)
    assert main(["--check"]) == 1


def test_a_written_record_reads_back_and_is_the_newest(benchmark_results: Path) -> None:
    write_result("stage_timing", "under 1 s", True, {"first_stage_s": 0.5, "later_stage_s": None}, note="test")
    write_result("stage_timing", "under 1 s", False, {"first_stage_s": 1.5, "later_stage_s": 0.01})
    records = read_results(benchmark_results)
    assert [r.figures["first_stage_s"] for _, r in records] == [0.5, 1.5]
    assert records[0][1].figures["later_stage_s"] is None  # not measured stays None, never 0
    assert [r.met for _, r in latest(records)] == [False]
    assert records[0][1].machine.split("-core ")[0].isdigit() and records[0][1].date is not None


def test_a_record_with_an_unknown_key_is_refused(benchmark_results: Path) -> None:
    path = write_result("stage_timing", "under 1 s", True, {"first_stage_s": 0.5})
    record = json.loads(path.read_text(encoding="utf-8"))
    with pytest.raises(ValidationError, match="extra"):
        BenchmarkResult.model_validate(record | {"speedup": 2})
