"""A sweep decided as one look of a sequence over nights (``analysis.nights``,
``specfleet.verdicts.sequential``): the runs of the sequence's earlier sweeps, and the verdicts the
previous look decided, which this look keeps."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from specfleet.contract import CellIdentity
from specfleet.stats.runs import RunValue
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.mix import MixVerdict
from specfleet.verdicts.sequential import Carried, Look, carried

T = TypeVar("T", Decision, MixVerdict)
SliceKey = tuple[str, str, str, float, str]
"""A cell's claim across sweeps: arm, prompt class, load mode, load value, sampling."""


@dataclass(frozen=True)
class Nights:
    """What a look brings from its sequence: ``runs``, the earlier sweeps' run values (each sweep's
    server lives its own, ``evidence.sequence_runs``), and the previous look's decisions and verdicts
    at the mix (empty at look 1)."""

    look: Look
    runs: Sequence[RunValue] = ()
    decisions: Sequence[Decision] = ()
    mix: Sequence[MixVerdict] = ()

    def carry_decisions(self, decisions: Sequence[Decision]) -> list[Decision]:
        """Each cell the previous look decided keeps its verdict, whatever this look's interval says."""
        earlier = {slice_key(d): d for d in self.decisions}
        return [_kept(d, earlier.get(slice_key(d)), self.look) for d in decisions]

    def carry_mix(self, mix: Sequence[MixVerdict]) -> list[MixVerdict]:
        """Each verdict at the mix the previous look decided keeps it."""
        earlier = {(m.name, m.sampling): m for m in self.mix}
        return [_kept(m, earlier.get((m.name, m.sampling)), self.look) for m in mix]


def slice_key(decision: Decision) -> SliceKey:
    where = decision.slice
    return where.arm, where.prompt_class, where.load_mode, where.load_value, where.sampling


def identity_key(cell: CellIdentity) -> SliceKey:
    """The claim a planned cell measures for."""
    return cell.arm, cell.prompt_class, cell.load_mode, cell.load_value, cell.sampling


def settled(decisions: Sequence[Decision]) -> set[SliceKey]:
    """The cells whose claims ``decisions`` (a look's) decided: the next look keeps their verdicts, so
    measuring them again changes no verdict."""
    return {slice_key(d) for d in decisions if d.verdict != "inconclusive"}


def _kept(now: T, before: T | None, look: Look) -> T:
    """``now``, or, where ``before`` (the previous look's) is decided, ``now`` with that verdict and the
    look that first decided it."""
    verdict = before.verdict if before is not None else "inconclusive"
    if before is None or verdict == "inconclusive":
        return now
    origin = before.carried or Carried(verdict=verdict, sweep=look.earlier_sweeps[-1], look=look.look - 1)
    return now.model_copy(update={"verdict": carried(origin.verdict, now.verdict), "carried": origin})
