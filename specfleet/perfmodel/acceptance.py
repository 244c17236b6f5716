"""Acceptance per position, pooled from the cells' spec-decode counters (docs/performance-model.md).

vLLM counts position i of a draft as accepted only when every earlier position was, so
``accepted_per_position[i] / num_drafts`` is already the probability that the accepted prefix
reaches i: a measured cumulative product, with no independence assumption. The cells of one
arm, prompt class and sampling mode are pooled by summing counts (never averaging ratios):

- the conditional ratio q_i = P(reach i | reach i-1) = sum accepted_i / sum accepted_(i-1),
  over the cells whose k is at least i (accepted_0 is the number of drafts), so cells measured
  at different k share the positions they have in common;
- a_i = q_1 x ... x q_i, the share of drafts whose accepted prefix reaches i;
- beyond the largest measured k the last measured q is held constant: an extrapolation,
  and ``extrapolates(k)`` says so.

Two lengths, named apart (issue 19): vLLM counts a draft only in steps that proposed one, so
``mean_acceptance_length(k) = 1 + sum a_i`` is the length *conditional on drafting* (vLLM's
``1 + accepted / drafts``), while ``tokens_per_step(k) = 1 + draft_rate x sum a_i`` is the
mean over all decode steps, which is what throughput follows. ``draft_rate`` is drafts over
the decode steps the streams show (each content chunk after the first is one engine step of
that request): about 1 for a draft model, well below 1 for ngram, which proposes nothing when
no n-gram matches. It is taken at each k the arm measured (issue 32: ngram's drafting rate per
k), pooled over every k elsewhere.

A figure the counters do not give stays missing (issue 32): a cell whose engine exported the
totals but not ``vllm:spec_decode_num_accepted_tokens_per_pos`` says nothing about positions, so
it never counts as zero acceptance; a cell whose streams show no decode step has no drafting
rate. Without either, ``pool_acceptance`` gives ``NoAcceptance`` with the reason.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specfleet.results.cell import SpecDecodeStats

Bound = Literal["point", "low", "high"]
WILSON_Z = 1.959963984540054
"""Two-sided 95 % normal quantile for the Wilson interval of each pooled ratio."""


@dataclass(frozen=True, slots=True)
class AcceptanceSample:
    """One cell's counters with the decode steps its streams show."""

    k: int
    stats: SpecDecodeStats
    decode_steps: int


@dataclass(frozen=True, slots=True)
class Ratio:
    """A pooled count ratio, with its Wilson interval."""

    hits: int
    trials: int

    @property
    def value(self) -> float:
        return self.hits / self.trials if self.trials > 0 else 0.0

    def bound(self, which: Bound) -> float:
        if which == "point" or self.trials <= 0:
            return self.value
        p, n, z = min(max(self.value, 0.0), 1.0), self.trials, WILSON_Z
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        # Wilson's interval always holds p; min/max only absorb rounding at p = 0 or 1.
        if which == "low":
            return max(0.0, min(p, centre - half))
        return min(1.0, max(p, centre + half))


@dataclass(frozen=True, slots=True)
class AcceptanceProfile:
    """Acceptance of one arm on one prompt class at one sampling mode."""

    measured_k: tuple[int, ...]
    conditional: tuple[Ratio, ...]
    """q_1 .. q_kmax, pooled over the cells whose k reaches each position."""
    drafting: Ratio
    """Drafts over decode steps (capped at 1), pooled over every measured k: the share of a
    request's steps that proposed a draft."""
    drafting_at_k: tuple[tuple[int, Ratio], ...]
    """The same ratio at each measured k (k, ratio), from that k's cells alone."""
    proposed_share: float
    """Proposed draft tokens over drafts x k: 1 when every draft is k tokens long."""

    @property
    def measured_positions(self) -> int:
        """Positions with a measured conditional ratio (cells without a position's counter left out)."""
        return len(self.conditional)

    def extrapolates(self, k: int) -> bool:
        return k > self.measured_positions

    def per_position(self, k: int, bound: Bound = "point") -> tuple[float, ...]:
        """a_1 .. a_k; past the largest measured k the last measured q is held constant."""
        if k < 1:
            raise ValueError(f"k must be a positive integer (got {k})")
        out: list[float] = []
        reach = 1.0
        for i in range(k):
            ratio = self.conditional[min(i, len(self.conditional) - 1)]
            reach *= ratio.bound(bound)
            out.append(reach)
        return tuple(out)

    def mean_acceptance_length(self, k: int, bound: Bound = "point") -> float:
        """1 + sum a_i: tokens per *drafting* step, bonus token included (vLLM's 1 + accepted / drafts)."""
        return 1.0 + sum(self.per_position(k, bound))

    def rate(self, bound: Bound = "point", k: int | None = None) -> float:
        """The drafting rate at ``k`` where the arm measured that k, else pooled over every k."""
        ratio = dict(self.drafting_at_k).get(k, self.drafting) if k is not None else self.drafting
        return min(1.0, ratio.bound(bound))

    def tokens_per_step(self, k: int, bound: Bound = "point") -> float:
        """1 + draft_rate x sum a_i: tokens per decode step over all steps (what throughput follows)."""
        return 1.0 + self.rate(bound, k) * sum(self.per_position(k, bound))


@dataclass(frozen=True, slots=True)
class NoAcceptance:
    """Why one arm, class and sampling has no acceptance profile."""

    reason: str


def _positions(sample: AcceptanceSample) -> int:
    """Positions this cell's per-position counters cover (0 when the engine exported none)."""
    return min(sample.k, len(sample.stats.accepted_per_position))


def pool_acceptance(samples: Sequence[AcceptanceSample]) -> AcceptanceProfile | NoAcceptance:
    """The pooled profile of ``samples`` (one arm, class and sampling), or why there is none: no
    drafts, no per-position counters, or no decode step to take a drafting rate from."""
    drafting = [s for s in samples if s.stats.num_drafts > 0]
    if not drafting:
        return NoAcceptance("no drafts in the counters")
    usable = [s for s in drafting if _positions(s) > 0]
    if not usable:
        return NoAcceptance("the engine exported spec-decode totals but no per-position counts "
                            "(vllm:spec_decode_num_accepted_tokens_per_pos): acceptance per position not measured")
    conditional: list[Ratio] = []
    for i in range(max(_positions(s) for s in usable)):
        counts = [[s.stats.num_drafts, *s.stats.accepted_per_position] for s in usable if _positions(s) > i]
        trials, hits = sum(c[i] for c in counts), sum(c[i + 1] for c in counts)
        conditional.append(Ratio(min(hits, trials), trials))
    stepped = [s for s in usable if s.decode_steps > 0]
    if not stepped:
        return NoAcceptance("no decode step in the streams (no request streamed a second chunk): no drafting rate")
    at_k = {k: [s for s in stepped if s.k == k] for k in sorted({s.k for s in stepped})}
    proposed = sum(s.stats.num_draft_tokens for s in usable)
    capacity = sum(s.stats.num_drafts * s.k for s in usable)
    return AcceptanceProfile(
        measured_k=tuple(sorted({s.k for s in usable})),
        conditional=tuple(conditional),
        drafting=_drafting(stepped),
        drafting_at_k=tuple((k, _drafting(group)) for k, group in at_k.items()),
        proposed_share=min(1.0, proposed / capacity) if capacity > 0 else 1.0,
    )


def _drafting(stepped: Sequence[AcceptanceSample]) -> Ratio:
    """Drafts over decode steps of cells that streamed at least one decode step."""
    steps = sum(s.decode_steps for s in stepped)
    return Ratio(min(sum(s.stats.num_drafts for s in stepped), steps), steps)
