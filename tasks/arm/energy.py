"""Energy over a measured window: NVML's GPU energy counter, else RAPL, else nothing.

Never reports 0 J for "could not measure": a missing reading is ``joules=None`` with the
reason (docs/measurement.md, "Energy").
"""

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
    """Sum of ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since driver load) over GPUs."""

    handles: list[object]
    source: EnergySource = "nvml"

    def read_j(self) -> float:
        import pynvml

        total_mj = sum(int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles)
        return total_mj / 1000.0


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


def nvml_counter() -> tuple[NvmlCounter | None, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        if not handles:
            return None, "NVML found no GPU"
        for handle in handles:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return NvmlCounter(handles), ""
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


def find_counter(prefer_gpu: bool = True, rapl_root: Path = RAPL_ROOT) -> tuple[EnergyCounter | None, str]:
    """The first counter that reads, and the reasons the others did not."""
    reasons = []
    finders = (nvml_counter, lambda: rapl_counter(rapl_root)) if prefer_gpu else (lambda: rapl_counter(rapl_root),)
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
