"""Energy over a measured window: NVML's GPU energy counter, else RAPL, else nothing.

Never reports 0 J for "could not measure": a missing reading is ``joules=None`` with the
reason (docs/measurement.md, "Energy"). NVML sees every GPU of the node whatever
``CUDA_VISIBLE_DEVICES`` says, so a GPU arm counts only the devices its server sees: the entries
of ``CUDA_VISIBLE_DEVICES`` in the server's environment (the GPUs Ray assigned the arm's task,
unless the config's env sets its own) matched to NVML devices by UUID, or by position in PCI bus
order where CUDA numbers them that way.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from specfleet.results import EnergyReading

RAPL_ROOT = Path("/sys/class/powercap")
EnergySource = Literal["nvml", "rapl"]


class EnergyCounter(Protocol):
    source: EnergySource

    def read_j(self) -> float: ...


@dataclass
class NvmlCounter:
    """Sum of ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load) over the server's GPUs."""

    handles: list[object]
    nvml: "Nvml"
    source: EnergySource = "nvml"

    def read_j(self) -> float:
        return sum(self.nvml.energy_mj(h) for h in self.handles) / 1000.0


@dataclass
class RaplCounter:
    """Sum of package-level ``energy_uj`` counters, unwrapped against ``max_energy_range_uj``."""

    zones: list[Path]
    source: EnergySource = "rapl"

    def __post_init__(self) -> None:
        self._last = [self._raw(z) for z in self.zones]
        self._ranges = [int((z / "max_energy_range_uj").read_text()) for z in self.zones]
        self._total_uj = 0

    @staticmethod
    def _raw(zone: Path) -> int:
        return int((zone / "energy_uj").read_text())

    def read_j(self) -> float:
        for i, zone in enumerate(self.zones):
            now = self._raw(zone)
            step = now - self._last[i]
            self._total_uj += step if step >= 0 else step + self._ranges[i]
            self._last[i] = now
        return self._total_uj / 1e6


@dataclass(frozen=True)
class NvmlDevice:
    """One GPU as NVML lists it."""

    handle: object
    uuid: str
    pci_bus_id: str
    name: str


class Nvml(Protocol):
    """The part of NVML the counter needs (``pynvml``; a test double in the tests)."""

    def devices(self) -> list[NvmlDevice]: ...

    def energy_mj(self, handle: object) -> int: ...


class Pynvml:
    """NVML through ``nvidia-ml-py``."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml

    def devices(self) -> list[NvmlDevice]:
        found = []
        for index in range(self._nvml.nvmlDeviceGetCount()):
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            found.append(NvmlDevice(handle, _text(self._nvml.nvmlDeviceGetUUID(handle)),
                                    _text(self._nvml.nvmlDeviceGetPciInfo(handle).busId),
                                    _text(self._nvml.nvmlDeviceGetName(handle))))
        return found

    def energy_mj(self, handle: object) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def server_devices(devices: list[NvmlDevice], environ: Mapping[str, str]) -> tuple[list[NvmlDevice] | None, str]:
    """The NVML devices a server started with ``environ`` uses, or None and why they cannot be
    told apart. CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; among
    GPUs of one model that is PCI bus order too, which is where an index names an NVML device."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return devices, ""
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if not entries:
        return None, "CUDA_VISIBLE_DEVICES is empty: the server sees no GPU"
    by_bus = sorted(devices, key=lambda d: d.pci_bus_id.lower())
    pci_order = environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len({d.name for d in devices}) == 1
    chosen: list[NvmlDevice] = []
    for entry in entries:
        if entry.startswith("MIG-"):
            return None, f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}): NVML counts energy per whole GPU"
        if entry.isdigit():
            if not pci_order:
                return None, ("CUDA_VISIBLE_DEVICES gives indices on a node of mixed GPUs, which CUDA numbers fastest "
                              "first and NVML does not: set CUDA_DEVICE_ORDER=PCI_BUS_ID or name the GPUs by UUID")
            if int(entry) >= len(by_bus):
                return None, f"CUDA_VISIBLE_DEVICES index {entry}: NVML lists {len(by_bus)} GPUs"
            chosen.append(by_bus[int(entry)])
            continue
        matches = [d for d in devices if d.uuid.startswith(entry)]
        if len(matches) != 1:
            return None, f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(matches)} NVML GPUs by UUID"
        chosen.append(matches[0])
    return list(dict.fromkeys(chosen)), ""


def nvml_counter(environ: Mapping[str, str] | None = None, nvml: Nvml | None = None) -> tuple[NvmlCounter | None, str]:
    """NVML's counter over the GPUs a server started with ``environ`` (this process's when None) uses."""
    try:
        api = nvml if nvml is not None else Pynvml()
        devices = api.devices()
        if not devices:
            return None, "NVML found no GPU"
        used, why = server_devices(devices, os.environ if environ is None else environ)
        if used is None:
            return None, f"NVML: {why}"
        for device in used:
            api.energy_mj(device.handle)
        return NvmlCounter([d.handle for d in used], api), ""
    except Exception as err:  # pynvml raises NVMLError subclasses and OSError when no driver
        return None, f"NVML unavailable ({type(err).__name__}: {err})"


def rapl_counter(root: Path = RAPL_ROOT) -> tuple[RaplCounter | None, str]:
    zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not zones:
        return None, f"no RAPL package zones under {root}"
    try:
        return RaplCounter(zones), ""
    except (OSError, ValueError) as err:
        return None, f"RAPL not readable ({type(err).__name__})"


def find_counter(prefer_gpu: bool = True, rapl_root: Path = RAPL_ROOT,
                 environ: Mapping[str, str] | None = None) -> tuple[EnergyCounter | None, str]:
    """The first counter that reads, and the reasons the others did not; ``environ`` is the
    measured server's environment (this process's when None), which says which GPUs it uses."""
    reasons = []
    finders = ((lambda: nvml_counter(environ), lambda: rapl_counter(rapl_root)) if prefer_gpu
               else (lambda: rapl_counter(rapl_root),))
    for finder in finders:
        counter, reason = finder()
        if counter is not None:
            return counter, ""
        reasons.append(reason)
    return None, "; ".join(reasons)


class EnergyWindow:
    """``begin()`` then ``end()`` -> the window's ``EnergyReading`` (joules None when unmeasured)."""

    def __init__(self, counter: EnergyCounter | None, reason: str) -> None:
        self.counter = counter
        self.reason = reason
        self._start_j: float | None = None

    def begin(self) -> None:
        self._start_j = self.counter.read_j() if self.counter is not None else None

    def end(self) -> EnergyReading:
        if self.counter is None or self._start_j is None:
            return EnergyReading(source="none", joules=None, reason=self.reason or "no energy counter")
        source: EnergySource = self.counter.source
        return EnergyReading(source=source, joules=self.counter.read_j() - self._start_j)
