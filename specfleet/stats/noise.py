"""The noise floor: run-to-run spread of the repeated baseline (seed: "Production gates").

The same baseline configuration is measured at the start (phase "main", every repeat) and
at the end of the sweep (phase "baseline_end"). Its relative spread in SLO-qualified
tokens per second is the smallest saving a decision may trust.
"""

from collections import defaultdict
from collections.abc import Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import CellIdentity
from specfleet.results.cell import CellResult

ConfigKey = tuple[str, str, float, str]


def config_key(identity: CellIdentity) -> ConfigKey:
    """What baseline and speculative cells are matched on: prompt class, load and sampling."""
    return (identity.prompt_class, identity.load_mode, identity.load_value, identity.sampling)


class NoiseFloor(RecordModel):
    prompt_class: str
    load_mode: str
    load_value: float
    sampling: str
    runs: list[str] = Field(description="Labels of the usable baseline cells measured.")
    qualified_tokens_per_s: list[float]
    relative_spread: float | None = Field(
        description="(max - min) / mean of qualified tokens per s; None with fewer than two runs."
    )

    @property
    def key(self) -> ConfigKey:
        return (self.prompt_class, self.load_mode, self.load_value, self.sampling)


def baseline_noise(cells: Sequence[CellResult]) -> dict[ConfigKey, NoiseFloor]:
    """Per configuration, the spread of every usable baseline run (both phases, all repeats)."""
    groups: dict[ConfigKey, list[CellResult]] = defaultdict(list)
    for cell in cells:
        if cell.identity.method == "baseline" and cell.usable:
            groups[config_key(cell.identity)].append(cell)
    floors = {}
    for key, runs in groups.items():
        values = [r.throughput.qualified_tokens_per_s or 0.0 for r in runs]
        mean = sum(values) / len(values)
        spread = (max(values) - min(values)) / mean if len(values) >= 2 and mean > 0 else None
        floors[key] = NoiseFloor(
            prompt_class=key[0], load_mode=key[1], load_value=key[2], sampling=key[3],
            runs=[r.identity.label for r in runs], qualified_tokens_per_s=values, relative_spread=spread,
        )
    return floors


def sweep_noise_floor(floors: dict[ConfigKey, NoiseFloor]) -> float | None:
    """The largest per-configuration spread: the fallback where a configuration ran once."""
    spreads = [f.relative_spread for f in floors.values() if f.relative_spread is not None]
    return max(spreads) if spreads else None


def noise_for(key: ConfigKey, floors: dict[ConfigKey, NoiseFloor]) -> tuple[float | None, str]:
    """The noise floor a decision at ``key`` uses, and where it came from."""
    own = floors.get(key)
    if own is not None and own.relative_spread is not None:
        return own.relative_spread, f"baseline spread over {len(own.runs)} runs of this configuration"
    sweep = sweep_noise_floor(floors)
    if sweep is not None:
        return sweep, "largest baseline spread in the sweep (this configuration ran once)"
    return None, "no repeated baseline in the sweep"
