"""k per concurrency bucket as vLLM's ``num_speculative_tokens_per_batch_size``, specfleet's rule
beside the peer rule of vLLM's proposed offline tuner (vllm-project/vllm#49163, closed unmerged).

specfleet: a k is eligible in a bucket only where every decision at its measured levels
adopted it (cost beyond noise, SLO, gates, corrected for every comparison of the sweep); the
best eligible k by the smallest speedup wins, else k = 0. The choice is made on the same data
as the policy's verdict at the mix: every assignment of k to loads it could have made is a claim
of the sweep's family (``specfleet.verdicts.mix``), so the verdict on the one it made is corrected.
A bucket ends at a measured level: between two levels it uses the higher level's choice, since
gains shrink with load. Above the largest level it sets k = 0, because vLLM applies the last
range's k to every larger batch.

Peer (#49163): per (batch, k), median throughput minus penalty x 1.4826 x MAD over
repeated runs; it refuses unstable or unhealthy records, ties within 1% go to the smaller
k, ranges start at measured levels and stop at the largest one.
"""

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from specfleet.contract.arms import k_at_batch
from specfleet.contract.base import RecordModel
from specfleet.contract.matrix import ArmPlan, arm_plans
from specfleet.contract.sweep import SweepConfig
from specfleet.errors import InputError
from specfleet.results.cell import CellResult
from specfleet.stats.bootstrap import speedup_text
from specfleet.verdicts.cell import Decision

MAD_TO_SD = 1.4826  # scales MAD to a standard deviation under normality
Recommendation = Literal["measured", "composed, not measured"]


class LevelChoice(RecordModel):
    level: int
    k: int
    reason: str
    inconclusive: list[int] = Field(
        default_factory=list, description="The k values not adopted here whose cells were inconclusive, none "
        "rejected: more runs could still adopt them.")


class KPolicy(RecordModel):
    rule: str
    spec_name: str
    prompt_class: str | None = Field(description="None: all prompt classes together.")
    sampling: str | None
    levels: list[LevelChoice] = Field(description="The k chosen at each measured concurrency level.")
    schedule: list[tuple[int, int, int]] = Field(description="Inclusive (start, end, k) batch-size ranges.")
    refused: str | None = Field(None, description="Why the rule produced no schedule.")
    base_config: dict[str, object] | None

    def speculative_config(self) -> dict[str, object] | None:
        """Ready-to-paste vLLM ``speculative_config``; None when speculation never pays."""
        if self.base_config is None or not self.schedule or max(k for *_, k in self.schedule) == 0:
            return None
        config = dict(self.base_config)
        config["num_speculative_tokens"] = max(k for *_, k in self.schedule)
        config["num_speculative_tokens_per_batch_size"] = [list(r) for r in self.schedule]
        return config


def _merge(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    merged: list[tuple[int, int, int]] = []
    for start, end, k in ranges:
        if merged and merged[-1][2] == k and merged[-1][1] + 1 == start:
            merged[-1] = (merged[-1][0], end, k)
        else:
            merged.append((start, end, k))
    return merged


def _base_config(plans: Sequence[ArmPlan], spec_name: str) -> tuple[set[str], dict[str, object] | None]:
    arms = [p for p in plans if p.spec_name == spec_name and not p.is_baseline]
    if not arms:
        raise InputError(f"no speculative arm named {spec_name!r}")
    config = arms[0].speculative_config or {}
    base = {key: v for key, v in config.items() if key != "num_speculative_tokens"}
    return {p.arm for p in arms}, base


def _in_slice(prompt_class: str, sampling: str, want_class: str | None, want_sampling: str | None) -> bool:
    return want_class in (None, prompt_class) and want_sampling in (None, sampling)


def specfleet_k_policy(
    decisions: Sequence[Decision], plans: Sequence[ArmPlan], spec_name: str, *,
    prompt_class: str | None = None, sampling: str | None = None,
    bucket_starts: Sequence[int] = (), max_batch_size: int | None = None,
) -> KPolicy:
    """Best adopted k per bucket. ``bucket_starts`` (AnalysisSpec.concurrency_buckets) overrides
    the default buckets, which end at the measured levels; ``max_batch_size`` adds a k = 0 tail."""
    arms, base = _base_config(plans, spec_name)
    by_level: dict[int, list[Decision]] = defaultdict(list)
    for d in decisions:
        s = d.slice
        if s.arm in arms and s.load_mode == "concurrency" and _in_slice(s.prompt_class, s.sampling,
                                                                         prompt_class, sampling):
            by_level[int(s.load_value)].append(d)
    if not by_level:
        return KPolicy(rule="specfleet", spec_name=spec_name, prompt_class=prompt_class, sampling=sampling,
                       levels=[], schedule=[], refused="no concurrency-mode decisions", base_config=base)
    levels = sorted(by_level)
    starts = sorted({1, *bucket_starts}) if bucket_starts else [1] + [c + 1 for c in levels[:-1]]
    ranges = []
    for i, start in enumerate(starts):
        end = starts[i + 1] - 1 if i + 1 < len(starts) else max(levels[-1], start)
        inside = [lv for lv in levels if start <= lv <= end] or [lv for lv in levels if lv > end][:1]
        pooled = [d for lv in inside for d in by_level[lv]]
        ranges.append((start, end, _choose(end, pooled).k if pooled else 0))
    if max_batch_size is not None and max_batch_size > ranges[-1][1]:
        ranges.append((ranges[-1][1] + 1, max_batch_size, 0))
    return KPolicy(rule="specfleet", spec_name=spec_name, prompt_class=prompt_class, sampling=sampling,
                   levels=[_choose(lv, by_level[lv]) for lv in levels], schedule=_merge(ranges),
                   base_config=base)


def _choose(level: int, decisions: Sequence[Decision]) -> LevelChoice:
    by_k: dict[int, list[Decision]] = defaultdict(list)
    for d in decisions:
        by_k[d.slice.k].append(d)
    scores = {}
    for k, ds in by_k.items():
        if all(d.verdict == "adopt" and d.interval is not None for d in ds):
            scores[k] = min(d.interval.estimate for d in ds if d.interval is not None)
    undecided = sorted(k for k, ds in by_k.items() if k not in scores and all(d.verdict != "reject" for d in ds))
    if not scores:
        codes = sorted({d.reason_code for d in decisions})
        open_ks = f"; k={', '.join(map(str, undecided))} inconclusive, not rejected" if undecided else ""
        return LevelChoice(level=level, k=0, reason=f"no k adopted ({', '.join(codes)}){open_ks}",
                           inconclusive=undecided)
    best = max(scores, key=lambda k: (scores[k], -k))
    return LevelChoice(level=level, k=best, reason=f"adopted; smallest speedup {speedup_text(scores[best], digits=3)}",
                       inconclusive=undecided)


def peer_k_policy(
    cells: Sequence[CellResult], plans: Sequence[ArmPlan], spec_name: str, *,
    prompt_class: str | None = None, sampling: str | None = None, min_runs: int = 3,
    uncertainty_penalty: float = 1.0, max_relative_mad: float = 0.1, relative_tolerance: float = 0.01,
) -> KPolicy:
    """The #49163 rule on SLO-qualified tokens/s; the baseline's cells are its k = 0 candidate."""
    arms, base = _base_config(plans, spec_name)

    def refuse(why: str) -> KPolicy:
        return KPolicy(rule="vllm#49163", spec_name=spec_name, prompt_class=prompt_class, sampling=sampling,
                       levels=[], schedule=[], refused=why, base_config=base)

    runs: dict[tuple[int, int], list[float]] = defaultdict(list)
    for cell in cells:
        ident = cell.identity
        if (ident.load_mode != "concurrency" or not (ident.method == "baseline" or ident.arm in arms)
                or not _in_slice(ident.prompt_class, ident.sampling, prompt_class, sampling)):
            continue
        if cell.failed or cell.completed != cell.requests_planned:
            done = f"{cell.completed}/{cell.requests_planned}"
            return refuse(f"{ident.label}: {cell.failed} failed, {done} completed")
        tps = cell.throughput.qualified_tokens_per_s
        if tps is None:
            return refuse(f"{ident.label}: no qualified tokens per s")
        runs[(int(ident.load_value), ident.num_speculative_tokens)].append(tps)
    if not runs:
        return refuse("no measurements")
    score: dict[tuple[int, int], float] = {}
    for (level, k), values in sorted(runs.items()):
        if len(values) < min_runs:
            return refuse(f"batch {level}, k={k}: {len(values)} runs, at least {min_runs} required")
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        relative = mad / abs(median) if median else (0.0 if mad == 0 else float("inf"))
        if relative > max_relative_mad:
            return refuse(f"batch {level}, k={k}: relative MAD {relative:.3f} exceeds {max_relative_mad:.3f}")
        score[(level, k)] = max(median - uncertainty_penalty * MAD_TO_SD * mad, 0.0)
    levels = sorted({level for level, _ in score})
    candidates = {level: sorted(k for lv, k in score if lv == level) for level in levels}
    if levels[0] != 1:
        return refuse("the smallest measured batch size must be 1")
    if any(candidates[lv] != candidates[1] for lv in levels):
        return refuse("every batch size must have the same k candidates")
    choices = []
    for level in levels:
        best = max(score[(level, k)] for k in candidates[level])
        if best <= 0:
            return refuse(f"no positive conservative objective at batch {level}")
        ratio = {k: score[(level, k)] / best for k in candidates[level]}
        utility = {k: 1.0 if r >= 1.0 - relative_tolerance else r for k, r in ratio.items()}
        k = min(candidates[level], key=lambda k: (-utility[k], k))
        choices.append(LevelChoice(level=level, k=k, reason=f"conservative {score[(level, k)]:.1f} tok/s "
                                   f"(best {best:.1f}, ties within {relative_tolerance:.0%} to smaller k)"))
    ranges = [(lv, (levels[i + 1] - 1) if i + 1 < len(levels) else lv, c.k)
              for i, (lv, c) in enumerate(zip(levels, choices, strict=True))]
    return KPolicy(rule="vllm#49163", spec_name=spec_name, prompt_class=prompt_class, sampling=sampling,
                   levels=choices, schedule=_merge(ranges), base_config=base)


def compare_policies(ours: KPolicy, peer: KPolicy) -> list[str]:
    """Short lines saying where the two schedules differ and why."""
    if ours.refused or peer.refused:
        return [f"specfleet: {ours.refused or ours.schedule}; peer rule: {peer.refused or peer.schedule}"]
    lines = []
    peer_at = {c.level: c for c in peer.levels}
    for mine in ours.levels:
        theirs = peer_at.get(mine.level)
        if theirs is not None and theirs.k != mine.k:
            lines.append(f"batch {mine.level}: specfleet k={mine.k} ({mine.reason}); peer k={theirs.k} "
                         f"({theirs.reason}): the peer ranks throughput only, specfleet gates on cost, SLO and noise")
    measured, peer_end = set(peer_at), peer.schedule[-1][1]
    spans: list[tuple[int, int, tuple[int, int]]] = []
    for batch in range(1, max(ours.schedule[-1][1], peer_end) + 1):
        pair = (k_at_batch(ours.schedule, batch), k_at_batch(peer.schedule, batch))
        if batch in measured or pair[0] == pair[1]:
            continue
        if spans and spans[-1][1] == batch - 1 and spans[-1][2] == pair and (spans[-1][0] > peer_end) == (
                batch > peer_end):
            spans[-1] = (spans[-1][0], batch, pair)
        else:
            spans.append((batch, batch, pair))
    for first, last, (mine_k, peer_k) in spans:
        where = f"batch {first}-{last}: specfleet k={mine_k}, peer k={peer_k}"
        lines.append(f"{where}: beyond the peer's largest measured batch {peer_end} vLLM extends its last k; "
                     "specfleet does not extrapolate" if first > peer_end else
                     f"{where}: not measured; specfleet fills from the level above (gains shrink with load), "
                     "the peer from the level below")
    return lines or ["both rules choose the same k at every batch size"]


def composed_policy_name(spec_name: str, rule: str) -> str:
    """A composed policy verdict's name: ``draft-k-policy`` for specfleet's rule, ``draft-k-policy-vllm49163``
    for the peer's (composed only when the sweep measures it, ``policy.rule``)."""
    return f"{spec_name}-k-policy" + ("" if rule == "specfleet" else "-" + "".join(ch for ch in rule if ch.isalnum()))


PEER_MIN_RUNS = 3
"""vllm#49163 refuses fewer repeated runs per (batch, k); kept as the peer wrote it."""


class KPolicyReport(RecordModel):
    specfleet: KPolicy
    peer: KPolicy | None = Field(description="None for the all-classes policy: the peer is run per class.")
    differences: list[str]
    speculative_config: dict[str, object] | None = Field(
        description="The specfleet rule's ready-to-paste vLLM speculative_config (KPolicy.speculative_config).")
    recommended: Recommendation = Field(
        "composed, not measured", description="measured: a policy arm ran this schedule (policy.measure), or the "
        "policy turns speculation off (the baseline is measured); else composed from fixed-k cells, not measured.")


def _report(mine: KPolicy, peer: KPolicy | None, differences: list[str]) -> KPolicyReport:
    return KPolicyReport(specfleet=mine, peer=peer, differences=differences,
                         speculative_config=mine.speculative_config())


def k_policy_reports(
    decisions: Sequence[Decision], cells: Sequence[CellResult], config: SweepConfig, peer_min_runs: int = PEER_MIN_RUNS,
) -> list[KPolicyReport]:
    """Per speculative arm and sampling: the deployable all-classes specfleet policy, then each
    prompt class with both rules on the same cells and their differences."""
    plans = arm_plans(config)

    def ours(spec_name: str, prompt_class: str | None, sampling: str) -> KPolicy:
        return specfleet_k_policy(decisions, plans, spec_name, prompt_class=prompt_class, sampling=sampling,
                                  bucket_starts=config.analysis.concurrency_buckets,
                                  max_batch_size=config.engine.max_num_seqs)

    reports = []
    speculative = [a.name for a in config.arms if a.method != "baseline" and not a.adaptive and not a.synthetic] \
        if config.load.concurrency else []  # an adaptive arm (a measured policy too) is no fixed-k candidate
    for name in speculative:
        for sampling in (s.name for s in config.sampling):
            reports.append(_report(ours(name, None, sampling), None, []))
            for pc in (p.name for p in config.prompt_classes):
                mine = ours(name, pc, sampling)
                peer = peer_k_policy(cells, plans, name, prompt_class=pc, sampling=sampling, min_runs=peer_min_runs)
                reports.append(_report(mine, peer, compare_policies(mine, peer)))
    return reports
