"""What the decision sections show, derived from ``ReportData`` (no drawing here): the verdict
per prompt class, a speedup matrix per arm, and the modelled grid beside the measurement."""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.contract import SweepConfig, arm_plans
from specfleet.decisions import Decision
from specfleet.kpolicy import KPolicy
from specfleet.stats.bootstrap import Interval
from specfleet.theory import ModelledAlpha, implied_alpha, net_speedup, speedup_grid
from tasks.report.load import ReportData

GRID_ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def load_label(mode: str, value: float) -> str:
    """``c4`` for closed-loop concurrency 4, ``r2.5/s`` for an open-loop rate (as cell labels)."""
    return f"c{int(value)}" if mode == "concurrency" else f"r{value:g}/s"


def row_label(config: SweepConfig, prompt_class: str, sampling: str) -> str:
    """The prompt class, with the sampling mode when the sweep has more than one."""
    return prompt_class if len(config.sampling) == 1 else f"{prompt_class} / {sampling}"


def loads(decisions: Sequence[Decision]) -> list[str]:
    keys = sorted({(d.slice.load_mode, d.slice.load_value) for d in decisions})
    return [load_label(mode, value) for mode, value in keys]


@dataclass(frozen=True)
class ClassVerdict:
    """Adopt when any (arm, k) was adopted at any load of the class; ``pick`` is the adopted
    decision with the largest pessimistic saving, else the rejected one that came closest."""

    label: str
    prompt_class: str
    sampling: str
    verdict: str
    pick: Decision | None
    saving_low: float | None
    saving_high: float | None
    adopted_at: list[str]
    policy: KPolicy | None
    speculative_config: dict[str, object] | None
    config_note: str
    """Why there is no config, or that it is a fixed k rather than a per-batch-size schedule."""


def saving_bounds(d: Decision) -> tuple[float | None, float | None]:
    """Whole-replica cost saving at the low and high ends of the speedup interval (the core's figures)."""
    return (d.cost.pessimistic_saving_fraction, d.cost.optimistic_saving_fraction) if d.cost else (None, None)


def _closeness(d: Decision) -> tuple[float, float]:
    cost = d.cost
    if cost is None:
        return (float("-inf"), float("-inf"))
    return (cost.pessimistic_saving_fraction if cost.pessimistic_saving_fraction is not None else float("-inf"),
            cost.saving_fraction if cost.saving_fraction is not None else float("-inf"))


def _deployable(policy: KPolicy | None, pick: Decision | None, adopted: bool,
                config: SweepConfig) -> tuple[dict[str, object] | None, str]:
    if policy is not None:
        schedule = policy.speculative_config()
        return schedule, policy.refused or ("" if schedule else "speculation adopted at no measured level: keep it off")
    if adopted and pick is not None:
        fixed = next(p.speculative_config for p in arm_plans(config) if p.arm == pick.slice.arm)
        return fixed, "fixed k: no concurrency levels were measured, so no per-batch-size schedule"
    return None, "speculation adopted nowhere in this class: keep it off"


def class_verdicts(data: ReportData) -> list[ClassVerdict]:
    spec_of = {p.arm: p.spec_name for p in arm_plans(data.config)}
    groups: dict[tuple[str, str], list[Decision]] = defaultdict(list)
    for d in data.decisions:
        groups[(d.slice.prompt_class, d.slice.sampling)].append(d)
    out = []
    for pc in data.config.prompt_classes:
        for s in data.config.sampling:
            ds = groups.get((pc.name, s.name), [])
            adopted = [d for d in ds if d.verdict == "adopt"]
            pick = max(adopted or ds, key=_closeness) if ds else None
            policy = None if pick is None else next(
                (p.specfleet for p in data.policies if p.specfleet.prompt_class == pc.name
                 and p.specfleet.sampling == s.name and p.specfleet.spec_name == spec_of[pick.slice.arm]), None)
            low, high = saving_bounds(pick) if pick else (None, None)
            deploy, note = _deployable(policy, pick, bool(adopted), data.config)
            out.append(ClassVerdict(
                label=row_label(data.config, pc.name, s.name), prompt_class=pc.name, sampling=s.name,
                verdict="adopt" if adopted else "reject", pick=pick, saving_low=low, saving_high=high,
                adopted_at=[f"{d.slice.arm} @ {load_label(d.slice.load_mode, d.slice.load_value)}" for d in adopted],
                policy=policy, speculative_config=deploy, config_note=note,
            ))
    return out


@dataclass(frozen=True)
class HeatCell:
    speedup: Interval | None
    verdict: str
    reason_code: str
    noise_floor: float | None

    @property
    def outside_noise(self) -> bool:
        """|speedup - 1| beyond the baseline's relative spread in qualified tokens/s."""
        s, noise = self.speedup, self.noise_floor
        return s is not None and noise is not None and abs(s.estimate - 1.0) > noise

    @property
    def negative(self) -> bool:
        return self.speedup is not None and self.speedup.estimate < 1.0


@dataclass(frozen=True)
class HeatMap:
    """Qualified-tokens/s speedup of one speculative arm over the baseline: rows x loads."""

    arm: str
    rows: list[str]
    cols: list[str]
    cells: dict[tuple[str, str], HeatCell]


def heat_maps(data: ReportData) -> list[HeatMap]:
    rows = [row_label(data.config, pc.name, s.name) for pc in data.config.prompt_classes for s in data.config.sampling]
    cols = loads(data.decisions)
    maps = []
    for plan in arm_plans(data.config)[1:]:
        cells = {}
        for d in (d for d in data.decisions if d.slice.arm == plan.arm):
            s = d.slice
            cells[(row_label(data.config, s.prompt_class, s.sampling), load_label(s.load_mode, s.load_value))] = \
                HeatCell(d.interval, d.verdict, d.reason_code, d.cost.noise_floor if d.cost else None)
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


def theory_rows(data: ReportData, draft_cost_ratio: float) -> list[TheoryRow]:
    """Per decision: implied alpha (model) from the measured tokens per step over all steps (what
    speedup follows; the counters' length is conditional on drafting), the model's S there, the
    measured speedup."""
    out = []
    for d in data.decisions:
        s, c = d.slice, d.comparison
        tokens = c.tokens_per_step if c else None
        alpha = implied_alpha(tokens, s.k) if tokens is not None else None
        note = (f"no comparison ({d.reason_code})" if c is None else
                "no tokens per step: no request streamed enough chunks (or cells stored before it was recorded)"
                if tokens is None else
                f"{tokens:.3f} tokens per step exceed k + 1: streams inconsistent with the model" if alpha is None else
                "" if d.interval else f"no measured speedup ({d.reason_code})")
        out.append(TheoryRow(
            arm=s.arm, k=s.k, row=row_label(data.config, s.prompt_class, s.sampling),
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
