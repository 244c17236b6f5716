"""From the results store to the economics: the stored cells, probes and per-request records
read back and handed to the core (``specfleet.analysis.analyse_sweep``). The sweep's typed
summary is assembled in ``tasks.analysis.summary``; nothing here reaches the performance model."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from specfleet.analysis import SweepAnalysis, analyse_sweep
from specfleet.contract import SweepConfig, arm_plans
from specfleet.engine_findings import EngineChecks
from specfleet.gates import EquivalenceProbe
from specfleet.quality_gates import QualityProbe
from specfleet.results import CellResult, RequestRecord
from tasks.plan.sweep_plan import ENGINE_CHECKS_FILE
from tasks.store.parquet import read_records_parquet
from tasks.store.results import ProbeKind, probe_file

Probe = TypeVar("Probe", bound=BaseModel)


def _stored(sweep_dir: Path, config: SweepConfig, kind: ProbeKind, model: type[Probe]) -> dict[str, Probe]:
    paths = {p.arm: sweep_dir / probe_file(kind, p.arm) for p in arm_plans(config)}
    return {arm: model.model_validate_json(path.read_text(encoding="utf-8")) for arm, path in paths.items()
            if path.is_file()}


def stored_probes(sweep_dir: Path, config: SweepConfig) -> dict[str, EquivalenceProbe]:
    """The equivalence probes the sweep's arms stored, by arm."""
    return _stored(sweep_dir, config, "equivalence", EquivalenceProbe)


def stored_quality(sweep_dir: Path, config: SweepConfig) -> dict[str, QualityProbe]:
    """The scored-set answers the sweep's arms stored, by arm."""
    return _stored(sweep_dir, config, "quality", QualityProbe)


def stored_records(sweep_dir: Path, cells: Sequence[CellResult],
                   usable_only: bool = True) -> dict[str, list[RequestRecord]]:
    """Per-request records by cell key, for every (usable) cell whose Parquet file is there."""
    return {c.key: read_records_parquet(sweep_dir / c.records_file) for c in cells
            if c.records_file and (c.usable or not usable_only) and (sweep_dir / c.records_file).is_file()}


def stored_engine_checks(sweep_dir: Path) -> EngineChecks:
    """The preflight's engine self-checks; none for a sweep planned before they existed."""
    path = sweep_dir / ENGINE_CHECKS_FILE
    return EngineChecks.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else EngineChecks(
        checks=[])


def analyse_stored(sweep_dir: Path, config: SweepConfig, cells: Sequence[CellResult],
                   records: Mapping[str, Sequence[RequestRecord]]) -> SweepAnalysis:
    return analyse_sweep(config, cells, records, stored_probes(sweep_dir, config),
                         stored_quality(sweep_dir, config), stored_engine_checks(sweep_dir).findings)
