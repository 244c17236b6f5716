"""Two sweeps side by side (``--against``): what changed in the contract and fingerprint, and
every matched decision with the cells whose verdict flipped listed first."""

from dataclasses import dataclass

from specfleet.contract.fingerprint import changed_parts
from specfleet.contract.matrix import load_label
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.prompt_class import row_label
from specfleet_tasks.store.sweep import StoredSweep
from specfleet_tasks.tracking.names import contract_params

ABSENT = "(absent)"
DecisionKey = tuple[str, str, str, str, float]


@dataclass(frozen=True)
class DiffRow:
    arm: str
    row: str
    load: str
    this: Decision | None
    other: Decision | None

    @property
    def flipped(self) -> bool:
        return self.this is not None and self.other is not None and self.this.verdict != self.other.verdict


@dataclass(frozen=True)
class SweepDiff:
    this_id: str
    other_id: str
    fingerprint_changes: list[str]
    contract_changes: list[tuple[str, str, str]]
    """(param, this sweep's value, the other sweep's value) for every contract field that differs."""
    rows: list[DiffRow]

    @property
    def flipped(self) -> list[DiffRow]:
        return [r for r in self.rows if r.flipped]


def _key(d: Decision) -> DecisionKey:
    s = d.slice
    return (s.arm, s.prompt_class, s.sampling, s.load_mode, s.load_value)


def diff_sweeps(this: StoredSweep, other: StoredSweep) -> SweepDiff:
    mine = {_key(d): d for d in this.report.decisions}
    theirs = {_key(d): d for d in other.report.decisions}
    rows = [DiffRow(arm=key[0], row=row_label(this.config, key[1], key[2]), load=load_label(key[3], key[4]),
                    this=mine.get(key), other=theirs.get(key))
            for key in sorted(mine.keys() | theirs.keys())]
    rows.sort(key=lambda r: not r.flipped)  # stable: flipped first, each group in key order
    a, b = contract_params(this.config), contract_params(other.config)
    changes = [(k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    return SweepDiff(this_id=this.id, other_id=other.id,
                     fingerprint_changes=changed_parts(other.record.fingerprint, this.record.fingerprint),
                     contract_changes=changes, rows=rows)
