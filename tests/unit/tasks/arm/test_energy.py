"""Energy: RAPL counters read and unwrap; no counter means None with a reason, never 0."""

from pathlib import Path

import pytest

from tasks.arm.energy import EnergyWindow, find_counter, nvml_counter, rapl_counter


def _zone(root: Path, name: str, energy_uj: int, range_uj: int) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "energy_uj").write_text(str(energy_uj))
    (zone / "max_energy_range_uj").write_text(str(range_uj))
    return zone


def test_rapl_window_sums_packages_and_unwraps(tmp_path: Path) -> None:
    a = _zone(tmp_path, "intel-rapl:0", 900_000, 1_000_000)
    _zone(tmp_path, "intel-rapl:1", 100, 1_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5, 1_000_000)  # a sub-zone (core): not counted again
    counter, reason = rapl_counter(tmp_path)
    assert counter is not None and reason == ""
    window = EnergyWindow(counter, "")
    window.begin()
    (a / "energy_uj").write_text("200000")  # wrapped: +300,000 uJ
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("2000100")
    reading = window.end()
    assert reading.source == "rapl" and reading.reason is None
    assert reading.joules == pytest.approx(0.3 + 2.0)


def test_no_counter_gives_null_energy_with_reason(tmp_path: Path) -> None:
    counter, reason = rapl_counter(tmp_path)
    assert counter is None and "no RAPL" in reason
    window = EnergyWindow(None, reason)
    window.begin()
    reading = window.end()
    assert (reading.source, reading.joules, reading.reason) == ("none", None, reason)


def test_without_any_counter_every_reason_is_given(tmp_path: Path) -> None:
    """No NVML here (or there is, and it wins) and no RAPL zone under an empty folder: the
    reason names each source's own failure, in the order they were tried."""
    nvml, nvml_reason = nvml_counter()
    counter, reason = find_counter(rapl_root=tmp_path)
    if nvml is None:
        assert counter is None and reason == f"{nvml_reason}; no RAPL package zones under {tmp_path}"
    else:
        assert counter is not None and counter.source == "nvml" and reason == ""


def test_rapl_is_found_when_gpu_energy_is_not_asked_for(tmp_path: Path) -> None:
    assert find_counter(prefer_gpu=False, rapl_root=tmp_path) == (None, f"no RAPL package zones under {tmp_path}")
    _zone(tmp_path, "intel-rapl:0", 1_000, 1_000_000)
    counter, reason = find_counter(prefer_gpu=False, rapl_root=tmp_path)
    assert counter is not None and counter.source == "rapl" and reason == ""
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3000")
    assert counter.read_j() == pytest.approx(0.002)
