"""A benchmark's entry point records its result; in tests it goes to a temporary folder, never the repository's."""

from pathlib import Path

import pytest

from benchmarks.results_record import RESULTS_DIR_ENV


@pytest.fixture(autouse=True)
def benchmark_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "benchmark-results"
    monkeypatch.setenv(RESULTS_DIR_ENV, str(folder))
    return folder
