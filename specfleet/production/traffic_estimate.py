"""The ``traffic`` block a production vLLM server's Prometheus series imply (``specfleet traffic``).

A traffic block's load shares count output tokens, not time: a server that spends half its time
at concurrency 1 and half at 4 serves most of its tokens at 4. The running-requests gauge says
which level a step was at, the generation-tokens counter's increase over the step says how many
tokens it served there. Idle steps (nothing running) serve no load level and are left out.
Prompt classes leave no trace in a server's metrics, so the block leaves their shares to the user.
"""

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import median
from typing import Literal, TypeVar

from specfleet.contract.base import RecordModel
from specfleet.contract.durations import format_duration
from specfleet.errors import InputError

RUNNING = "vllm:num_requests_running"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS_HISTOGRAM = "vllm:request_prompt_tokens"
GENERATION_TOKENS_HISTOGRAM = "vllm:request_generation_tokens"
MAX_POINTS_PER_SERIES = 11_000
"""Prometheus refuses a range query with more points than this per series."""
MIN_STEP_S = 1
MERGE_BELOW_SHARE = 0.01
"""Without the config's levels, an observed level with less of the tokens joins its nearest neighbour."""
SHARE_DECIMALS = 3
QUANTILES = (0.5, 0.9, 0.99)
REPLICA_LABELS_IGNORED = frozenset({"__name__", "engine"})
"""A server's series differ only in these (one gauge and one counter per engine): the rest name the replica."""
Key = TypeVar("Key", int, str)
Replica = tuple[tuple[str, str], ...]
CLASSES_NOT_VISIBLE = "prompt classes are not visible in the server's metrics: fill in the share per class"


def query_step_s(window_s: int, scrape_interval_s: float | None) -> int:
    """Whole seconds, no finer than the scrape interval (finer steps repeat its samples) nor
    than ``MIN_STEP_S``, and coarse enough for the window to fit Prometheus' point limit."""
    fit_s = math.ceil(window_s / (MAX_POINTS_PER_SERIES - 1))
    return max(MIN_STEP_S, math.ceil(scrape_interval_s or 0), fit_s)


@dataclass(frozen=True, slots=True)
class Series:
    """One Prometheus series: its labels and its (unix time s, value) points in time order."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]

    @property
    def replica(self) -> Replica:
        return tuple(sorted((k, v) for k, v in self.labels.items() if k not in REPLICA_LABELS_IGNORED))


def scrape_interval_s(raw: Sequence[Series]) -> float | None:
    """The median gap between consecutive raw samples; None with fewer than two."""
    gaps = [after[0] - before[0] for series in raw for before, after in pairwise(series.points)]
    return median(gaps) if gaps else None


@dataclass(frozen=True, slots=True)
class Lengths:
    """A per-request token histogram over the window: its ``_sum`` and ``_count`` increases (None:
    the server exposes no such histogram) and ``histogram_quantile`` per quantile (None: no data)."""

    sum_increase: float | None
    count_increase: float | None
    quantiles: Mapping[float, float | None]


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """What Prometheus holds for one model over the window, read at ``step_s`` steps."""

    source: str
    """The Prometheus URL, without credentials."""
    model: str
    window_s: int
    step_s: int
    scrape_interval_s: float | None
    running: Sequence[Series]
    generated: Sequence[Series]
    prompt_tokens: Lengths
    generation_tokens: Lengths


@dataclass(frozen=True, slots=True)
class LevelStep:
    """One replica's step: the level its output tokens count at, and how many it served. The level
    is the gauge read at the step's end; a step that served tokens yet reads 0 at its end (its last
    request finished before the reading) counts at the level read at its start (``ended_idle``)."""

    level: float
    tokens: float
    ended_idle: bool = False


def counter_increases(series: Series) -> dict[float, float]:
    """The increase since the previous point, by the point's time. A drop is a reset (the server
    restarted): the counter counted up from 0 since, so its value is the increase."""
    return {t: after - before if after >= before else after
            for (_, before), (t, after) in pairwise(series.points)}


def level_steps(running: Sequence[Series], generated: Sequence[Series]) -> tuple[list[LevelStep], float]:
    """Each replica's counter increases beside its gauge at the same step (engines summed), and the
    tokens of steps without a gauge reading, which no level can claim."""
    levels: dict[tuple[Replica, float], float] = defaultdict(float)
    for series in running:
        for t, value in series.points:
            levels[(series.replica, t)] += value
    times: dict[Replica, list[float]] = defaultdict(list)
    for replica, t in levels:
        times[replica].append(t)
    started = {(replica, after): levels[(replica, before)]
               for replica, ts in times.items() for before, after in pairwise(sorted(ts))}
    tokens: dict[tuple[Replica, float], float] = defaultdict(float)
    for series in generated:
        for t, increase in counter_increases(series).items():
            tokens[(series.replica, t)] += increase
    steps = []
    for key, n in tokens.items():
        if key not in levels:
            continue
        ended_idle = levels[key] <= 0 < n and started.get(key, 0.0) > 0
        steps.append(LevelStep(started[key] if ended_idle else levels[key], n, ended_idle))
    return steps, sum(n for key, n in tokens.items() if key not in levels)


def nearest_level(value: float, levels: Sequence[int]) -> int:
    """The level nearest ``value`` on a log scale, ties to the lower (2 is as near 1 as 4)."""
    return min(levels, key=lambda level: (abs(math.log(value / level)), level))


def rounded_shares(shares: Mapping[Key, float], decimals: int = SHARE_DECIMALS) -> dict[Key, float]:
    """Shares rounded to ``decimals`` that still sum to exactly one (largest remainders), so the
    printed block passes TrafficSpec's sum check however many entries it lists."""
    unit = 10**decimals
    total = sum(shares.values())
    scaled = {key: share / total * unit for key, share in shares.items()}
    whole = {key: math.floor(value) for key, value in scaled.items()}
    for key in sorted(scaled, key=lambda k: whole[k] - scaled[k])[:unit - sum(whole.values())]:
        whole[key] += 1
    return {key: whole[key] / unit for key in shares}


class TrafficEstimate(RecordModel):
    """What ``specfleet traffic --json`` prints. Shares cover busy steps only; a figure that cannot
    be computed is None and a note says why."""

    share_basis: Literal["tokens"] = "tokens"
    concurrency: dict[int, float]
    time_shares: dict[int, float]
    mean_prompt_tokens: float | None
    mean_generation_tokens: float | None
    window_s: int
    step_s: int
    model: str
    notes: list[str]


def estimate_traffic(metrics: ServerMetrics, levels: Sequence[int] | None = None) -> TrafficEstimate:
    """Token and time shares per concurrency level, snapped to ``levels`` (the config's) when
    given, else the observed levels with those under ``MERGE_BELOW_SHARE`` of the tokens merged."""
    steps, unmatched = level_steps(metrics.running, metrics.generated)
    busy = [step for step in steps if step.level > 0]
    if sum(step.tokens for step in busy) <= 0:
        raise InputError(f"{metrics.source}: model {metrics.model!r} generated no output tokens while requests "
                         f"ran in the last {format_duration(metrics.window_s)}")
    level_of, moved = _level_of(busy, levels)
    tokens, counts = _by_level(busy, level_of)
    total = sum(tokens.values())
    notes = _step_notes(metrics, len(steps), busy, sum(step.tokens for step in steps if step.level <= 0), unmatched)
    notes += [note for note in (moved, _length_note("prompt", metrics.prompt_tokens),
                                _length_note("generation", metrics.generation_tokens)) if note]
    notes.append(CLASSES_NOT_VISIBLE)
    return TrafficEstimate(
        concurrency={level: tokens[level] / total for level in sorted(tokens)},
        time_shares={level: counts[level] / len(busy) for level in sorted(counts)},
        mean_prompt_tokens=mean_tokens(metrics.prompt_tokens),
        mean_generation_tokens=mean_tokens(metrics.generation_tokens),
        window_s=metrics.window_s, step_s=metrics.step_s, model=metrics.model, notes=notes,
    )


def _level_of(busy: Sequence[LevelStep], levels: Sequence[int] | None) -> tuple[dict[float, int], str | None]:
    """The level each reading counts at, and a note naming the readings that moved."""
    observed = sorted({step.level for step in busy})
    if levels:
        snap = {value: nearest_level(value, levels) for value in observed}
        moved = [f"{value:g} -> {level}" for value, level in snap.items() if value != level]
        return snap, (f"observed levels snapped to the nearest of the config's load.concurrency "
                      f"({', '.join(map(str, sorted(levels)))}) on a log scale: {', '.join(moved)}" if moved else None)
    rounded = {value: max(1, round(value)) for value in observed}
    merge = _merge_small(_by_level(busy, rounded)[0])
    moved = [f"{level} -> {kept}" for level, kept in merge.items() if level != kept]
    return {value: merge[level] for value, level in rounded.items()}, (
        f"levels with under {MERGE_BELOW_SHARE:.0%} of the tokens merged into the nearest kept level "
        f"(log scale): {', '.join(moved)}" if moved else None)


def _by_level(busy: Sequence[LevelStep], level_of: Mapping[float, int]) -> tuple[dict[int, float], dict[int, int]]:
    tokens: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for step in busy:
        tokens[level_of[step.level]] += step.tokens
        counts[level_of[step.level]] += 1
    return dict(tokens), dict(counts)


def _merge_small(tokens: Mapping[int, float]) -> dict[int, int]:
    """Each level to itself if it holds ``MERGE_BELOW_SHARE`` of the tokens, else to the nearest such level."""
    total = sum(tokens.values())
    kept = [level for level, n in tokens.items() if n >= MERGE_BELOW_SHARE * total]
    kept = kept or [max(tokens, key=lambda level: tokens[level])]
    return {level: level if level in kept else nearest_level(level, kept) for level in tokens}


def _step_notes(metrics: ServerMetrics, steps: int, busy: Sequence[LevelStep], idle_tokens: float,
                unmatched: float) -> list[str]:
    notes = []
    ended_idle = sum(1 for step in busy if step.ended_idle)
    if ended_idle:
        notes.append(f"{ended_idle} of {steps} steps served tokens but read 0 at their end (their last request "
                     "finished before the reading): they count at the level read at their start")
    if steps > len(busy):
        tail = f", with the {idle_tokens:g} output tokens counted in them" if idle_tokens else ""
        notes.append(f"{steps - len(busy)} of {steps} steps were idle (no request running) and are left out{tail}")
    if unmatched:
        notes.append(f"{unmatched:g} output tokens fell in steps without a {RUNNING} reading and are left out")
    interval = metrics.scrape_interval_s
    if interval is None:
        notes.append(f"scrape interval not inferred (too few recent raw samples): {metrics.step_s} s steps")
    elif metrics.step_s >= 2 * interval:
        notes.append(f"{metrics.step_s} s steps, coarser than the {interval:g} s scrape interval: each step's "
                     "tokens go to the level read at its end")
    return notes


def mean_tokens(lengths: Lengths) -> float | None:
    """Mean tokens per request finished in the window; None without the histogram or requests."""
    if lengths.sum_increase is None or not lengths.count_increase:
        return None
    return lengths.sum_increase / lengths.count_increase


def _length_note(kind: str, lengths: Lengths) -> str | None:
    name = PROMPT_TOKENS_HISTOGRAM if kind == "prompt" else GENERATION_TOKENS_HISTOGRAM
    if lengths.sum_increase is None or lengths.count_increase is None:
        return f"mean {kind} tokens: the server exposes no {name} histogram"
    if not lengths.count_increase:
        return f"mean {kind} tokens: no request finished in the window ({name}_count did not increase)"
    return None


def traffic_block(estimate: TrafficEstimate, metrics: ServerMetrics, classes: Sequence[str] | None = None) -> str:
    """The YAML ``traffic`` block to paste into a sweep config, the figures behind it as comments.
    ``classes`` (the config's prompt classes) get equal placeholder shares; without them the
    block's ``prompt_classes`` is empty for the user to fill."""
    lines = [
        f"# specfleet traffic: model {metrics.model!r} from {metrics.source}, the last "
        f"{format_duration(metrics.window_s)} at {metrics.step_s} s steps",
        f"# load shares count output tokens: each step's increase of {GENERATION_TOKENS}",
        f"# goes to the {RUNNING} level at the step's end (time share: the fraction of busy steps)",
        "#   level  token share  time share",
        *(f"#   {level:>5}  {share:>11.3f}  {estimate.time_shares[level]:>10.3f}"
          for level, share in estimate.concurrency.items()),
        _length_line("prompt", estimate.mean_prompt_tokens, metrics.prompt_tokens),
        _length_line("output", estimate.mean_generation_tokens, metrics.generation_tokens),
        *(f"# {note}" for note in estimate.notes if note != CLASSES_NOT_VISIBLE),
        "traffic:",
        "  share_basis: tokens",
    ]
    if classes:
        lines += ["  # placeholders to replace: prompt classes are not visible in the server's metrics,",
                  "  # so these are equal shares of the config's classes; fill in the share per class",
                  "  prompt_classes:",
                  *(f"    {name}: {share:.{SHARE_DECIMALS}f}" for name, share in rounded_shares(
                      dict.fromkeys(classes, 1.0)).items())]
    else:
        lines += [f"  # {CLASSES_NOT_VISIBLE}", "  prompt_classes: {}"]
    lines += ["  concurrency:", *(f"    {level}: {share:.{SHARE_DECIMALS}f}"
                                  for level, share in rounded_shares(estimate.concurrency).items())]
    return "\n".join(lines)


def _length_line(kind: str, mean: float | None, lengths: Lengths) -> str:
    if mean is None:
        return f"# {kind} tokens per request: not available (see the notes below)"
    quantiles = ", ".join(f"p{q * 100:g} {'n/a' if v is None else f'{v:.0f}'}" for q, v in lengths.quantiles.items())
    return f"# {kind} tokens per request: mean {mean:.1f}" + (f", {quantiles}" if quantiles else "")
