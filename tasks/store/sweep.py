"""The one reader of a stored sweep: ``sweep.json`` (``SweepRecord``: what the sweep measured,
its resolved config included), its cells, per-request records, probes and its report
(``summary.json``, ``specfleet.report.sweep_report.SweepReport``), each read once and only when asked for.

Every command that reads an earlier sweep (report, plan ``--from``, predict, monitor, canary
``--from``, sync, the budget's timing, the aggregate step's noise history) goes through
``StoredSweep``. When the sweep wrote its report, what it holds (gates, decisions, k policies,
verdicts at the mix and per class) is taken from it and never derived again; only a sweep that
stopped before aggregating is analysed here (``StoredSweep.report``).
"""

from collections.abc import Collection, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator

from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.base import RecordModel, known_format
from specfleet.contract.fingerprint import Fingerprint
from specfleet.errors import InputError
from specfleet.gates.engine_findings import EngineChecks
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import QualityProbe
from specfleet.measure.acceptance import class_acceptance
from specfleet.report.sweep_report import REPORT_FILE, SweepReport, decided, read_report
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.runs import RunValue
from specfleet.stats.samples import CellSample
from specfleet.verdicts.analysis import SweepAnalysis, analyse_sweep
from specfleet.verdicts.evidence import earlier_runs, sequence_runs
from specfleet.verdicts.mix import MixVerdict
from specfleet.verdicts.nights import Nights, SliceKey, settled
from specfleet.verdicts.policy_arm import DerivedPolicies, with_policy_arms
from specfleet.verdicts.sequential import Look, next_look
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.parquet import read_records_parquet
from specfleet_tasks.store.results import ProbeKind, probe_file

Probe = TypeVar("Probe", EquivalenceProbe, QualityProbe)
SWEEP_FILE = "sweep.json"
SUMMARY_MARKDOWN = "summary.md"
ENGINE_CHECKS_FILE = "engine_checks.json"
UNAGGREGATED_NOTE = ("the sweep stopped before aggregating: its counts are of the cells it stored, not of its plan "
                     "(specfleet sweep --resume SWEEP_ID measures the rest)")
POLICY_FILE = "policy.json"
"""The k policies the sweep derived to measure as arms (``policy.measure``, ``--policy-from``)."""
SWEEP_FORMAT = 2
"""``sweep.json``'s format: 1 held the config file's path (specfleet up to the first half of
December 2026, ce4142f among them), 2 holds the resolved config itself."""


class SweepRecord(RecordModel):
    """``sweep.json``: what a sweep recorded when it started, enough to read it anywhere."""

    format: int = Field(SWEEP_FORMAT, description="1: written before the config was stored in it.")
    name: str
    config_source: str = Field(description="The config file the sweep was started with: a label only; "
                               "nothing is read from it unless the sweep is of format 1.")
    config: SweepConfig | None = Field(
        None, description="The config as the sweep ran it (its --budget applied); None in format 1.")
    fingerprint: Fingerprint

    @model_validator(mode="before")
    @classmethod
    def _format_1(cls, data: Any) -> Any:
        """Format 1 (``{"name", "config": "<absolute path>", "fingerprint"}``) read as such."""
        if isinstance(data, dict) and isinstance(data.get("config"), str):
            return {**data, "format": 1, "config_source": data["config"], "config": None}
        return data

    @field_validator("config", mode="before")
    @classmethod
    def _stored_config(cls, value: Any) -> Any:
        """The config as ``model_dump(mode="json")`` wrote it: JSON keeps mapping keys as strings (the
        traffic block's concurrency levels), so it is read back without the contract's strict types;
        what was stored passed them when the sweep started."""
        return SweepConfig.model_validate(value, strict=False) if isinstance(value, dict) else value

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: int) -> int:
        return known_format(value, SWEEP_FORMAT)

    @model_validator(mode="after")
    def _config_held(self) -> "SweepRecord":
        if self.format >= 2 and self.config is None:
            raise ValueError(f"format {self.format} holds the config, and this one has none")
        return self


def read_sweep_record(path: Path) -> SweepRecord:
    """``sweep.json`` at ``path``; a file it cannot read is one line naming it (exit 2)."""
    try:
        return SweepRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({type(err).__name__})") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f"{part}: " for part in first["loc"])
        raise InputError(f"{path}: {where}{first['msg'].removeprefix('Value error, ')}") from None


def stored_sweeps(results_dir: Path, name: str) -> list["StoredSweep"]:
    """Every sweep of config ``name`` under ``results_dir`` on this machine, newest first (ids sort
    by their UTC start time)."""
    found = []
    for path in results_dir.glob(f"*/{SWEEP_FILE}"):
        try:
            found.append(StoredSweep(path.parent, read_sweep_record(path)))
        except InputError:  # written by a newer specfleet, or damaged: not one this version resumes or learns from
            continue
    return sorted((s for s in found if s.record.name == name), key=lambda s: s.id, reverse=True)


class StoredSweep:
    """One sweep's results folder, read lazily: each part on first use, once."""

    def __init__(self, sweep_dir: Path, record: SweepRecord | None = None, config: SweepConfig | None = None) -> None:
        """``config``: the one to analyse under, when the caller holds it (the aggregate step, its plan's)."""
        self.dir = sweep_dir
        self.record = record if record is not None else read_sweep_record(sweep_dir / SWEEP_FILE)
        self._config = config

    @classmethod
    def find(cls, sweep: str, results_root: Path) -> "StoredSweep":
        """``sweep`` is a sweep's results folder or a sweep id under ``results_root``."""
        for candidate in (Path(sweep), results_root / sweep):
            if (candidate / SWEEP_FILE).is_file():
                return cls(candidate)
        if Path(sweep).is_dir():
            raise InputError(f"{sweep}: not a sweep results folder (no {SWEEP_FILE})")
        raise InputError(f"{sweep}: no sweep with this id under {results_root}")

    @property
    def id(self) -> str:
        return self.dir.name

    @property
    def baseline_arm(self) -> str:
        return arm_plans(self.config)[0].arm

    @property
    def config(self) -> SweepConfig:
        """The config the sweep ran, with the arms of the k policies it measured; a format-1 sweep's
        is read from its file, which must still be there."""
        if self._config is None:
            config = self.record.config if self.record.config is not None else self._config_file()
            self._config = with_policy_arms(config, self.derived_policies)
        return self._config

    @cached_property
    def derived_policies(self) -> DerivedPolicies | None:
        """The k policies its policy stage derived; None when it measured none (or has not reached it)."""
        return read_derived_policies(self.dir)

    def _config_file(self) -> SweepConfig:
        source = Path(self.record.config_source)
        if not source.is_file():
            raise InputError(f"{self.id}: written before sweep.json held its config (format 1), and its config "
                             f"{source} is not readable here")
        config = load_sweep_config(source)
        if config.name != self.record.name:
            raise InputError(f"{self.id}: {source} now names config {config.name!r}, the sweep ran "
                             f"{self.record.name!r}")
        return config

    @cached_property
    def cells(self) -> list[CellResult]:
        cells = [CellResult.model_validate_json(p.read_text(encoding="utf-8"))
                 for p in sorted((self.dir / "cells").glob("*.json"))]
        arms = {plan.arm for plan in arm_plans(self.config)}
        unknown = sorted({c.identity.arm for c in cells} - arms)
        if unknown:
            raise InputError(f"{self.id}: stored arm {unknown[0]!r} is not in the config as it is now")
        return cells

    def contents_stamp(self) -> tuple[tuple[str, int], ...]:
        """Each stored cell and the summary with its modification time: equal stamps, equal contents."""
        paths = [*sorted((self.dir / "cells").glob("*.json")), self.dir / REPORT_FILE]
        return tuple((p.name, p.stat().st_mtime_ns) for p in paths if p.is_file())

    @cached_property
    def records(self) -> dict[str, list[RequestRecord]]:
        """Per-request records by cell key, for every cell whose Parquet file is there."""
        return stored_records(self.dir, self.cells, usable_only=False)

    @property
    def usable_records(self) -> dict[str, list[RequestRecord]]:
        usable = {c.key for c in self.cells if c.usable}
        return {key: records for key, records in self.records.items() if key in usable}

    @property
    def aggregated(self) -> bool:
        """Whether the sweep stored its report: a finished sweep (nothing read, the config included)."""
        return (self.dir / REPORT_FILE).is_file()

    @cached_property
    def summary(self) -> SweepReport | None:
        """The report the sweep stored (``summary.json``, of any format: ``read_report``); None while
        the sweep runs, or when it stopped before aggregating."""
        path = self.dir / REPORT_FILE
        if not path.is_file():
            return None
        return read_report(path.read_text(encoding="utf-8"), self.config, f"{self.id}/{REPORT_FILE}")

    @cached_property
    def engine_checks(self) -> EngineChecks:
        """The preflight's engine self-checks; none for a sweep planned before they existed."""
        path = self.dir / ENGINE_CHECKS_FILE
        return EngineChecks.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else \
            EngineChecks(checks=[])

    def probes(self) -> dict[str, EquivalenceProbe]:
        """The equivalence probes the sweep's arms stored, by arm."""
        return self._probes("equivalence", EquivalenceProbe)

    def quality_answers(self) -> dict[str, QualityProbe]:
        """The scored-set answers the sweep's arms stored, by arm."""
        return self._probes("quality", QualityProbe)

    def _probes(self, kind: ProbeKind, model: type[Probe]) -> dict[str, Probe]:
        paths = {p.arm: self.dir / probe_file(kind, p.arm) for p in arm_plans(self.config)}
        return {arm: model.model_validate_json(path.read_text(encoding="utf-8")) for arm, path in paths.items()
                if path.is_file()}

    def _earlier(self) -> list["StoredSweep"]:
        """The earlier finished sweeps of the config, newest first."""
        return [s for s in stored_sweeps(self.dir.parent, self.config.name) if s.id < self.id and s.aggregated]

    @cached_property
    def look(self) -> Look | None:
        """Which look of its sequence the sweep is (``analysis.nights``; None without): the one its summary
        stored, else the one after the newest earlier finished sweep of the same config and fingerprint."""
        nights = self.config.analysis.nights
        if nights is None:
            return None
        if self.summary is not None:
            return self.summary.look
        earlier = self._earlier()
        previous = earlier[0] if earlier and earlier[0].record.fingerprint == self.record.fingerprint else None
        return next_look(nights, self.config.analysis.confidence,
                         None if previous is None else (previous.id, previous.look))

    def nights(self) -> Nights | None:
        """The sweep as a look of its sequence: the earlier looks' runs of its declared arms (a k policy
        measured as an arm is derived again each night), and the previous look's verdicts to keep."""
        look = self.look
        if look is None:
            return None
        config = self.config
        arms = {p.arm for p in arm_plans(config) if p.policy_of is None}
        runs: list[RunValue] = []
        earlier = [StoredSweep(self.dir.parent / sweep_id) for sweep_id in look.earlier_sweeps]
        for sweep in earlier:
            records = sweep.usable_records
            samples = {c.key: CellSample.from_records(c, records[c.key], config.slo)
                       for c in sweep.cells if c.key in records}
            runs += sequence_runs(sweep.id, sweep.cells, samples, config.slo, config.analysis, arms)
        previous = earlier[-1].summary if earlier else None
        if previous is None:
            return Nights(look, runs)
        return Nights(look, runs, previous.decisions, previous.mix)

    def decided_before(self) -> set[SliceKey]:
        """The cells whose claims the previous look of its sequence decided (``analysis.nights``): what a
        budget measures last. Empty at a sequence's first look and without ``analysis.nights``."""
        look = self.look
        if look is None or not look.earlier_sweeps:
            return set()
        previous = StoredSweep(self.dir.parent / look.earlier_sweeps[-1]).summary
        return settled(previous.decisions) if previous is not None else set()

    def noise_history(self, without: Collection[str] = ()) -> list[RunValue]:
        """The repeated runs of up to ``analysis.noise_history`` earlier finished sweeps beside this one
        with the same config and fingerprint (models, engine, hardware), newest first: what they say
        about the run-to-run noise of the same deployment. ``without``: sweeps left out (the earlier
        looks of its sequence, ``analysis.nights``, whose runs are in the sweep's own)."""
        config = self.config
        if config.analysis.noise_history == 0:
            return []
        out: list[RunValue] = []
        earlier = [s for s in self._earlier() if s.record.fingerprint == self.record.fingerprint
                   and s.id not in without]
        for sweep in earlier[:config.analysis.noise_history]:
            records = sweep.usable_records
            samples = {c.key: CellSample.from_records(c, records[c.key], config.slo)
                       for c in sweep.cells if c.key in records}
            out += earlier_runs(sweep.id, sweep.cells, samples, config.slo, config.analysis)
        return out

    def analyse(self, cells: Sequence[CellResult] | None = None,
                records: Mapping[str, Sequence[RequestRecord]] | None = None) -> SweepAnalysis:
        """The economics core over the stored cells (or ``cells`` and their ``records``): what the
        aggregate step does once, and the report only for a sweep that wrote no summary."""
        return analyse_sweep(self.config, self.cells if cells is None else cells,
                             self.usable_records if records is None else records, self.probes(),
                             self.quality_answers(), self.engine_checks.findings,
                             self.noise_history(self.look.earlier_sweeps if self.look is not None else ()),
                             self.derived_policies, self._composed_elsewhere(), self.nights())

    def _composed_elsewhere(self) -> list[MixVerdict] | None:
        """A follow-up's (``--policy-from``) composed policy verdicts, from the sweep that chose them:
        its summary's for specfleet's rule; another rule's is composed from that sweep's cells now."""
        derived = self.derived_policies
        if derived is None or derived.derived_from == self.id:
            return None
        if not (self.dir.parent / derived.derived_from / SWEEP_FILE).is_file():
            return []
        earlier = StoredSweep(self.dir.parent / derived.derived_from)
        if earlier.summary is not None and all(p.policy.rule == "specfleet" for p in derived.policies):
            return earlier.summary.mix
        unmeasured = derived.model_copy(update={"policies": [p.model_copy(update={"arm": None})
                                                             for p in derived.policies]})
        return analyse_sweep(earlier.config, earlier.cells, earlier.usable_records, earlier.probes(),
                             earlier.quality_answers(), earlier.engine_checks.findings, earlier.noise_history(),
                             unmeasured).mix

    @cached_property
    def report(self) -> SweepReport:
        """The sweep's report as every reader shows it: the one it stored (never recomputed), else
        one made here from the stored cells, saying so. A stored report written before the
        run-to-run noise was pooled has its decisions made again under today's rule."""
        stored = self.summary
        if stored is not None and stored.noise:
            return stored
        analysis = self.analyse()
        if stored is not None:
            return stored.model_copy(update={**decided(self.config, analysis), "notes": analysis.notes,
                                             "recomputed": f"recomputed from the stored cells (its {REPORT_FILE} "
                                             "was written before the run-to-run noise was pooled: its decisions "
                                             "followed an older rule)"})
        return self._unaggregated(analysis)

    def _unaggregated(self, analysis: SweepAnalysis) -> SweepReport:
        """The report of a sweep that stopped before aggregating, over the cells it stored: what it
        planned and did not store is not known here (its plan is; ``--resume`` measures them)."""
        cells = self.cells
        return SweepReport(
            **decided(self.config, analysis), sweep_id=self.id, config_name=self.config.name,
            fingerprint=self.record.fingerprint.digest, resumed=False, cells_planned=len(cells),
            cells_complete=sum(c.status != "failed" for c in cells), cells_ok=sum(c.status == "ok" for c in cells),
            cells_invalid=sum(c.status == "invalid" for c in cells),
            failed_cells=[f"{c.identity.label}: " + ("; ".join(c.reasons) or "failed")
                          for c in cells if c.status == "failed"],
            servers_started=0, arms=[], notes=[*analysis.notes, UNAGGREGATED_NOTE],
            acceptance=class_acceptance([c for c in cells if not c.identity.synthetic], self.usable_records),
            engine_checks=self.engine_checks.checks, results_dir=str(self.dir),
            recomputed=f"recomputed from the stored cells (the sweep wrote no {REPORT_FILE}: it stopped before "
                       "aggregating)")


def read_derived_policies(sweep_dir: Path) -> DerivedPolicies | None:
    path = sweep_dir / POLICY_FILE
    return DerivedPolicies.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None


def stored_records(sweep_dir: Path, cells: Sequence[CellResult],
                   usable_only: bool = True) -> dict[str, list[RequestRecord]]:
    """Per-request records by cell key, for every (usable) cell whose Parquet file is there."""
    return {c.key: read_records_parquet(sweep_dir / c.records_file) for c in cells
            if c.records_file and (c.usable or not usable_only) and (sweep_dir / c.records_file).is_file()}

