"""From the results store to the economics: the stored cells, probes and per-request records
read back and handed to the core (``specfleet.analysis.analyse_sweep``), then the sweep's
typed summary (``specfleet.summary.SweepSummary``)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from specfleet.analysis import SweepAnalysis, analyse_sweep
from specfleet.contract import SweepConfig, arm_plans
from specfleet.decision_table import decision_rows, negative_cells
from specfleet.engine_findings import EngineChecks
from specfleet.gates import EquivalenceProbe
from specfleet.not_measured import not_measured_cells
from specfleet.quality_gates import QualityProbe
from specfleet.results import CellResult, RequestRecord
from specfleet.summary import ArmSummary, SweepSummary
from tasks.cluster.stage import ArmReport
from tasks.plan.sweep_plan import ENGINE_CHECKS_FILE, SweepPlan
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


def _failure(plan: SweepPlan, key: str, cell: CellResult | None, errors: Mapping[str, str]) -> str:
    ident = plan.cells[key]
    if cell is not None:
        return f"{ident.label}: " + ("; ".join(cell.reasons) or "failed")
    return f"{ident.label}: not measured" + (f" ({errors[ident.arm]})" if ident.arm in errors else "")


def aggregate(plan: SweepPlan, reports: Sequence[ArmReport]) -> SweepSummary:
    """Read every stored cell of the sweep and run the economics core over them; the cells the
    budget did not start are listed apart, beside their predictions."""
    cells = [c for c in plan.store.cells() if c.key in plan.cells]
    by_key = {c.key: c for c in cells}
    complete = {c.key for c in cells if c.status != "failed"}
    order = {key: rank for rank, key in enumerate(plan.cells)}
    skipped = sorted((s for r in reports for s in r.not_measured if s.key not in complete), key=lambda s: order[s.key])
    accounted = complete | {s.key for s in skipped}
    errors = {r.arm: r.error.splitlines()[0] for r in reports if r.error}
    records = stored_records(plan.store.dir, cells)
    analysis = analyse_stored(plan.store.dir, plan.config, cells, records)
    return SweepSummary(
        sweep_id=plan.sweep_id, config_name=plan.config.name, fingerprint=plan.fingerprint.digest,
        resumed=plan.resumed, cells_planned=len(plan.cells), cells_complete=len(complete),
        cells_ok=sum(c.status == "ok" for c in cells), cells_invalid=sum(c.status == "invalid" for c in cells),
        failed_cells=[_failure(plan, key, by_key.get(key), errors) for key in plan.cells if key not in accounted],
        not_measured=not_measured_cells(plan.sweep_id, plan.config, cells, records, skipped),
        servers_started=sum(r.timing is None or r.timing.server_starts > 0 for r in reports),
        arms=[ArmSummary(arm=r.arm, phase=r.phase, cells_measured=len(r.cells), error=r.error,
                         timing=r.timing, measured_fraction=r.timing.measured_fraction if r.timing else None)
              for r in reports],
        mix=analysis.mix,
        gates=analysis.gates, quality=analysis.quality, notes=[*plan.warnings, *analysis.notes],
        cost_table=decision_rows(analysis.decisions, plan.config),
        negative_cells=negative_cells(analysis.decisions, plan.config),
        decisions=analysis.decisions, k_policy=analysis.policies, engine_checks=plan.engine_checks,
        results_dir=str(plan.store.dir),
    )
