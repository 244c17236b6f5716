"""The baseline's spread per configuration: (max - min) / mean of its usable runs' SLO-qualified
tokens/s (opening and closing cells, repeats, replica checks).

A descriptive figure for the performance model's margin and the accuracy benchmark only. No
decision reads it: from one pair it is a poor estimate of the noise (at a true 3 % run CV it falls
below 1 % about one night in five). The noise every interval and verdict carries is pooled over
the sweep with its own uncertainty (``specfleet.stats.variance``).
"""

from collections import defaultdict
from collections.abc import Sequence

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.results.cell import CellResult
from specfleet.stats.runs import ConfigKey, config_key


class NoiseFloor(RecordModel):
    prompt_class: str
    load_mode: str
    load_value: float
    sampling: str
    runs: list[str] = Field(description="Labels of the usable baseline cells whose rates are used.")
    qualified_tokens_per_s: list[float]
    left_out: list[str] = Field(
        default_factory=list, description="Labels of usable baseline cells without a qualified tokens per s "
        "figure (a 0 s window): left out of the spread, never counted as 0."
    )
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
        rated = [(r.identity.label, tps) for r in runs if (tps := r.throughput.qualified_tokens_per_s) is not None]
        values = [tps for _, tps in rated]
        floors[key] = NoiseFloor(
            prompt_class=key[0], load_mode=key[1], load_value=key[2], sampling=key[3],
            runs=[label for label, _ in rated], qualified_tokens_per_s=values,
            left_out=[r.identity.label for r in runs if r.throughput.qualified_tokens_per_s is None],
            relative_spread=_spread(values),
        )
    return floors


def _spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean; None with fewer than two values or a mean that is not positive."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else None


def sweep_noise_floor(floors: dict[ConfigKey, NoiseFloor]) -> float | None:
    """The largest per-configuration spread: the fallback where a configuration ran once."""
    spreads = [f.relative_spread for f in floors.values() if f.relative_spread is not None]
    return max(spreads) if spreads else None


def noise_for(key: ConfigKey, floors: dict[ConfigKey, NoiseFloor]) -> tuple[float | None, str]:
    """The noise floor a decision at ``key`` uses, and where it came from."""
    own = floors.get(key)
    left_out = f"; left out, no rate: {', '.join(own.left_out)}" if own is not None and own.left_out else ""
    if own is not None and own.relative_spread is not None:
        return own.relative_spread, f"baseline spread over {len(own.runs)} runs of this configuration{left_out}"
    sweep = sweep_noise_floor(floors)
    if sweep is not None:
        return sweep, f"largest baseline spread in the sweep (this configuration ran once){left_out}"
    return None, f"no repeated baseline in the sweep{left_out}"
