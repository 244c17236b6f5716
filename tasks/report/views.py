"""What the decision sections show, derived from the stored sweep and its report (no drawing here): a speedup
matrix per arm, and the modelled grid beside the measurement. The verdict per prompt class is the
core's (``specfleet.verdicts.prompt_class``)."""

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.matrix import load_label
from specfleet.economics.theory import ModelledAlpha, implied_alpha, net_speedup, speedup_grid
from specfleet.stats.bootstrap import Interval
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.prompt_class import row_label
from specfleet_tasks.store.sweep import StoredSweep

GRID_ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def loads(decisions: Sequence[Decision]) -> list[str]:
    keys = sorted({(d.slice.load_mode, d.slice.load_value) for d in decisions})
    return [load_label(mode, value) for mode, value in keys]


@dataclass(frozen=True)
class HeatCell:
    speedup: Interval | None
    """The cell's speedup, this comparison alone."""
    verdict: str
    reason_code: str
    beyond_noise: bool
    """The one rule's answer on the cell's corrected interval (``Decision.beyond_noise``), gates aside."""
    break_even: float | None = None
    """The speedup that saves a whole replica at the baseline's throughput there (None: none can)."""


@dataclass(frozen=True)
class HeatMap:
    """Qualified-tokens/s speedup of one speculative arm over the baseline: rows x loads."""

    arm: str
    rows: list[str]
    cols: list[str]
    cells: dict[tuple[str, str], HeatCell]


def heat_maps(sweep: StoredSweep) -> list[HeatMap]:
    config = sweep.config
    rows = [row_label(config, pc.name, s.name) for pc in config.prompt_classes for s in config.sampling]
    cols = loads(sweep.report.decisions)
    maps = []
    for plan in arm_plans(sweep.config)[1:]:
        cells = {}
        for d in (d for d in sweep.report.decisions if d.slice.arm == plan.arm):
            s = d.slice
            cells[(row_label(sweep.config, s.prompt_class, s.sampling), load_label(s.load_mode, s.load_value))] = \
                HeatCell(d.interval, d.verdict, d.reason_code, d.beyond_noise,
                         d.cost.break_even_speedup if d.cost else None)
        maps.append(HeatMap(plan.arm, rows, cols, cells))
    return maps


@dataclass(frozen=True)
class TheoryRow:
    arm: str
    k: int
    row: str
    load: str
    mean_acceptance_length: float | None
    """1 + accepted / drafts (counters): conditional on drafting, shown for comparison only."""
    tokens_per_step: float | None
    """Tokens per engine step over all steps: what the implied alpha and the modelled S are read from."""
    implied_alpha: float | None
    modelled_speedup: float | None
    measured: Interval | None
    note: str


def theory_rows(sweep: StoredSweep, draft_cost_ratio: float) -> list[TheoryRow]:
    """Per decision: implied alpha (model) from the measured tokens per step over all steps (what
    speedup follows; the counters' length is conditional on drafting), the model's S there, the
    measured speedup."""
    out = []
    for d in sweep.report.decisions:
        s, c = d.slice, d.comparison
        tokens = c.tokens_per_step if c else None
        alpha = implied_alpha(tokens, s.k) if tokens is not None else None
        note = (f"no comparison ({d.reason_code})" if c is None else
                "no tokens per step: no request streamed enough chunks (or cells stored before it was recorded)"
                if tokens is None else
                f"{tokens:.3f} tokens per step exceed k + 1: streams inconsistent with the model" if alpha is None else
                "" if d.interval else f"no measured speedup ({d.reason_code})")
        out.append(TheoryRow(
            arm=s.arm, k=s.k, row=row_label(sweep.config, s.prompt_class, s.sampling),
            load=load_label(s.load_mode, s.load_value), mean_acceptance_length=c.mean_acceptance_length if c else None,
            tokens_per_step=tokens, implied_alpha=alpha,
            modelled_speedup=None if alpha is None else net_speedup(ModelledAlpha(alpha), s.k, draft_cost_ratio),
            measured=d.interval, note=note,
        ))
    return out


def sweep_ks(config: SweepConfig) -> list[int]:
    return sorted({p.k for p in arm_plans(config) if p.k is not None})


def modelled_grid(config: SweepConfig, draft_cost_ratio: float) -> tuple[list[int], list[tuple[float, list[float]]]]:
    """Seed Table 3 layout over the sweep's k values: (ks, [(alpha, [S per k])])."""
    ks = sweep_ks(config)
    points = speedup_grid(GRID_ALPHAS, ks, draft_cost_ratio)
    return ks, [(a, [p.speedup for p in points if p.alpha == a]) for a in GRID_ALPHAS]
