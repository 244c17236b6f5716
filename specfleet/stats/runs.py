"""One measured run of a cell as the decision rule sees it: the log of a figure (SLO-qualified
tokens/s, or the SLO-percentile ITL) and the server life that measured it.

Every arm serves a configuration's prompts in the same order (docs/measurement.md,
"Comparability"), so two runs of a configuration differ by their run-to-run noise alone, the
requests' own timing inside a window included: that is what the repeated runs measure
(``specfleet.stats.variance``) and what every interval carries. The prompts themselves are the
config's: a saving is claimed for the prompt sets the sweep measured, which stand for the fleet's
traffic as well as the config's prompt sets do.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from specfleet.contract.matrix import CellIdentity
from specfleet.stats.samples import CellSample

ConfigKey = tuple[str, str, float, str]
"""What runs of different arms are matched on: prompt class, load mode, load value, sampling."""


def config_key(identity: CellIdentity) -> ConfigKey:
    """What baseline and speculative cells are matched on: prompt class, load and sampling."""
    return (identity.prompt_class, identity.load_mode, identity.load_value, identity.sampling)
Metric = Literal["qualified_tokens_per_s", "itl"]


@dataclass(frozen=True)
class RunValue:
    """One usable run: ``log_value`` = log of the figure."""

    metric: Metric
    label: str
    arm: str
    config: ConfigKey
    server: str
    """The server life that measured it: runs of one server share its offset (``variance``)."""
    log_value: float


def server_of(sample: CellSample) -> str:
    """The server life a cell was measured on; cells stored before it was recorded share one per
    arm and phase (repeats and replica checks then read as one server's)."""
    cell = sample.cell
    ident = cell.identity
    return cell.server or f"{ident.arm}/{ident.phase}" + ("/check" if ident.replica_check else "")


def rate_run(sample: CellSample, config: ConfigKey) -> RunValue | None:
    """The run's SLO-qualified tokens per second, or None when it is 0 (no request met the SLO)."""
    rate = sample.qualified_tokens_per_s  # a usable cell without a rate is an error, never 0
    if rate <= 0:
        return None
    ident = sample.cell.identity
    return RunValue("qualified_tokens_per_s", ident.label, ident.arm, config, server_of(sample), float(np.log(rate)))


def percentile_run(sample: CellSample, config: ConfigKey, q: float) -> RunValue | None:
    """The run's q-th percentile of its SLO-bound ITL gaps pooled, or None without a positive one."""
    pooled = sample.pooled_itl_ms()
    if pooled.size == 0:
        return None
    point = float(np.percentile(pooled, q))
    if point <= 0:
        return None
    ident = sample.cell.identity
    return RunValue("itl", ident.label, ident.arm, config, server_of(sample), float(np.log(point)))


@dataclass(frozen=True)
class RunTable:
    """Every usable run of a sweep for one metric, and where each (arm, configuration) has its runs."""

    runs: list[RunValue]
    index: dict[tuple[str, ConfigKey], list[int]]
    """Positions in the family's run list (``offset`` + position here)."""
    offset: int = 0

    @classmethod
    def of(cls, runs: Sequence[RunValue], offset: int = 0) -> "RunTable":
        index: dict[tuple[str, ConfigKey], list[int]] = {}
        for i, run in enumerate(runs):
            index.setdefault((run.arm, run.config), []).append(offset + i)
        return cls(list(runs), index, offset)

    def has(self, arm: str, config: ConfigKey) -> bool:
        return (arm, config) in self.index

    def log_mean(self, arm: str, config: ConfigKey) -> float:
        """The arm's figure at the configuration: the mean of its runs' logs (their geometric mean)."""
        return float(np.mean([self.runs[i - self.offset].log_value for i in self.index[(arm, config)]]))

    def weights(self, arm: str, config: ConfigKey, scale: float = 1.0) -> dict[int, float]:
        """The gradient of ``scale`` x log_mean over the run values."""
        runs = self.index[(arm, config)]
        return {i: scale / len(runs) for i in runs}

    def count(self, arm: str, config: ConfigKey) -> int:
        return len(self.index.get((arm, config), []))


def add_weights(*parts: dict[int, float]) -> dict[int, float]:
    """The sum of sparse gradients."""
    out: dict[int, float] = {}
    for part in parts:
        for i, w in part.items():
            out[i] = out.get(i, 0.0) + w
    return out
