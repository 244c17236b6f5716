"""Energy: RAPL counters read and unwrap; no counter means None with a reason, never 0."""

from pathlib import Path

import pytest

from specfleet_tasks.arm.energy import (
    EnergyWindow,
    NvmlDevice,
    find_counter,
    nvml_counter,
    rapl_counter,
    server_devices,
)


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


class FakeNvml:
    """NVML's view of a node (a test double): devices listed in NVML's own order, which is not
    the PCI bus order, each with an energy counter the test advances."""

    def __init__(self, devices: list[NvmlDevice]) -> None:
        self._devices = devices
        self.mj = {id(d.handle): 0 for d in devices}

    def devices(self) -> list[NvmlDevice]:
        return list(self._devices)

    def energy_mj(self, handle: object) -> int:
        return self.mj[id(handle)]


def _node(names: tuple[str, ...] = ("NVIDIA H200",) * 4) -> list[NvmlDevice]:
    buses = ["00000000:CA:00.0", "00000000:1B:00.0", "00000000:8A:00.0", "00000000:3D:00.0"]
    return [NvmlDevice(handle=object(), uuid=f"GPU-{i}{i}{i}{i}-aaaa", pci_bus_id=bus, name=name)
            for i, (bus, name) in enumerate(zip(buses, names, strict=True))]


def test_an_arm_counts_only_the_gpus_its_server_sees() -> None:
    """Ray gave the arm CUDA devices 1 and 2: in PCI bus order (1B, 3D, 8A, CA) those are the
    devices on 3D and 8A, NVML's 3 and 2; the other two GPUs' energy is not the arm's."""
    devices = _node()
    nvml = FakeNvml(devices)
    counter, reason = nvml_counter({"CUDA_VISIBLE_DEVICES": "1,2"}, nvml)
    assert counter is not None and reason == ""
    window = EnergyWindow(counter, reason)
    window.begin()
    for index, joules in enumerate((1000, 10, 200, 30)):
        nvml.mj[id(devices[index].handle)] += joules * 1000
    reading = window.end()
    assert reading.source == "nvml" and reading.joules == pytest.approx(200 + 30)


def test_devices_map_by_uuid_and_by_pci_bus_order() -> None:
    devices = _node()
    assert server_devices(devices, {"CUDA_VISIBLE_DEVICES": "GPU-3333,GPU-0000-aaaa"}) == ([devices[3], devices[0]], "")
    assert server_devices(devices, {"CUDA_VISIBLE_DEVICES": "0"}) == ([devices[1]], "")  # bus 1B comes first
    assert server_devices(devices, {}) == (devices, "")  # no CUDA_VISIBLE_DEVICES: the server sees every GPU
    mixed = _node(("NVIDIA H200", "NVIDIA H100", "NVIDIA H200", "NVIDIA H200"))
    ordered = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert server_devices(mixed, ordered) == ([mixed[1]], "")


@pytest.mark.parametrize(("visible", "order", "why"), [
    ("0", None, "mixed GPUs, which CUDA numbers fastest first"),
    ("MIG-1234", None, "MIG instance"),
    ("GPU-", None, "matches 4 NVML GPUs"),
    ("7", "PCI_BUS_ID", "index 7: NVML lists 4 GPUs"),
    ("", None, "the server sees no GPU"),
])
def test_gpus_that_cannot_be_told_apart_give_no_reading_and_say_why(visible: str, order: str | None,
                                                                    why: str) -> None:
    mixed = _node(("NVIDIA H200", "NVIDIA H100", "NVIDIA H200", "NVIDIA H200"))
    environ = {"CUDA_VISIBLE_DEVICES": visible} | ({"CUDA_DEVICE_ORDER": order} if order else {})
    counter, reason = nvml_counter(environ, FakeNvml(mixed))
    assert counter is None and reason.startswith("NVML: ") and why in reason
    reading = EnergyWindow(counter, reason).end()
    assert reading.joules is None and reading.reason == reason
