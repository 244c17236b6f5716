"""From the results store to the economics: the stored cells, probes and per-request records
read back and handed to the core (``specfleet.analysis.analyse_sweep``). The sweep's typed
summary is assembled in ``tasks.analysis.summary``; nothing here reaches the performance model."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from specfleet.analysis import SweepAnalysis, analyse_sweep
from specfleet.contract import SweepConfig, arm_plans
from specfleet.engine_findings import EngineChecks
from specfleet.evidence import earlier_runs
from specfleet.gates import EquivalenceProbe
from specfleet.quality_gates import QualityProbe
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.runs import RunValue
from specfleet.stats.samples import CellSample
from tasks.plan.sweep_plan import ENGINE_CHECKS_FILE, SWEEP_FILE, stored_sweeps
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
                         stored_quality(sweep_dir, config), stored_engine_checks(sweep_dir).findings,
                         noise_history(sweep_dir, config))


def noise_history(sweep_dir: Path, config: SweepConfig) -> list[RunValue]:
    """The repeated runs of up to ``analysis.noise_history`` earlier finished sweeps beside this one
    with the same config and fingerprint (models, engine, hardware), newest first: what they say
    about the run-to-run noise of the same deployment."""
    wanted = config.analysis.noise_history
    if wanted == 0:
        return []
    fingerprint = json.loads((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8")).get("fingerprint")
    out: list[RunValue] = []
    used = 0
    for sweep_id, stored in stored_sweeps(sweep_dir.parent, config.name):
        earlier = sweep_dir.parent / sweep_id
        if used == wanted:
            break
        if sweep_id >= sweep_dir.name or stored.get("fingerprint") != fingerprint or not (
                earlier / "summary.json").is_file():
            continue
        cells = [CellResult.model_validate_json(p.read_text(encoding="utf-8"))
                 for p in sorted((earlier / "cells").glob("*.json"))]
        records = stored_records(earlier, cells)
        samples = {c.key: CellSample.from_records(c, records[c.key], config.slo) for c in cells if c.key in records}
        out += earlier_runs(sweep_id, cells, samples, config.slo, config.analysis)
        used += 1
    return out
