"""The sweep's report (``specfleet.report.sweep_report.SweepReport``), made once here: the analysis of
its stored cells (``specfleet_tasks.store.sweep.StoredSweep.analyse``) with the class verdicts, its arms' time
accounts, and the cells a budget did not start beside their predictions (``specfleet.planning.unmeasured``,
PREDICTED, never in a decision)."""

from collections.abc import Mapping, Sequence

from specfleet.contract.server_args import deployment_args
from specfleet.errors import InputError
from specfleet.measure.acceptance import class_acceptance
from specfleet.perfmodel.calibrate import calibrate
from specfleet.planning.unmeasured import CalibrationSource, not_measured_cells
from specfleet.report.sweep_report import ArmSummary, SweepReport, decided
from specfleet.results import CellResult, RequestRecord
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.cluster.stage import ArmReport
from specfleet_tasks.plan.sweep_plan import SweepPlan
from specfleet_tasks.store.sweep import StoredSweep, stored_records, stored_sweeps

EARLIER_SWEEPS = 3
"""Earlier finished sweeps of the config tried for a left-out cell's prediction, newest first."""


def _failure(plan: SweepPlan, key: str, cell: CellResult | None, errors: Mapping[str, str]) -> str:
    ident = plan.cells[key]
    if cell is not None:
        return f"{ident.label}: " + ("; ".join(cell.reasons) or "failed")
    return f"{ident.label}: not measured" + (f" ({errors[ident.arm]})" if ident.arm in errors else "")


def aggregate(plan: SweepPlan, reports: Sequence[ArmReport]) -> SweepReport:
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
    analysis = StoredSweep(plan.store.dir, config=plan.config).analyse(cells, records)
    overhead_ms, overhead_notes = _model_overhead_ms(plan, cells, records)
    return SweepReport(
        **decided(plan.config, analysis), sweep_id=plan.sweep_id, config_name=plan.config.name,
        fingerprint=plan.fingerprint.digest, resumed=plan.resumed, cells_planned=len(plan.cells),
        cells_complete=len(complete), cells_ok=sum(c.status == "ok" for c in cells),
        cells_invalid=sum(c.status == "invalid" for c in cells),
        failed_cells=[_failure(plan, key, by_key.get(key), errors) for key in plan.cells if key not in accounted],
        not_measured=not_measured_cells(plan.config, _calibration_sources(plan, cells, records) if skipped else [],
                                        skipped),
        servers_started=sum(r.timing is None or r.timing.server_starts > 0 for r in reports),
        arms=[ArmSummary(arm=r.arm, phase=r.phase, cells_measured=len(r.cells), error=r.error,
                         timing=r.timing, measured_fraction=r.timing.measured_fraction if r.timing else None)
              for r in reports],
        notes=[*plan.warnings, *analysis.notes, *overhead_notes],
        acceptance=class_acceptance([c for c in cells if not c.identity.synthetic], records),
        engine_checks=plan.engine_checks,
        results_dir=str(plan.store.dir),
        server_args=deployment_args(plan.config, plan.resolved, SERVED_MODEL_NAME),
        model_overhead_ms=overhead_ms,
    )


def _model_overhead_ms(plan: SweepPlan, cells: Sequence[CellResult],
                       records: Mapping[str, Sequence[RequestRecord]]) -> tuple[float | None, list[str]]:
    """The server overhead the performance model fits to the sweep's cells, kept so that a plan
    calibrated on this sweep later (each budgeted stage of the next one) does not search for it again;
    with a note when the fit failed. A failed fit never costs the sweep its summary."""
    try:
        return calibrate(plan.sweep_id, plan.config, cells, records, seed=plan.config.analysis.seed).overhead_ms, []
    except InputError:  # no usable cell with records: nothing to calibrate on
        return None, []
    except (ValueError, ArithmeticError) as err:  # numpy's LinAlgError is a ValueError
        return None, [f"performance model: no fit to keep for later plans ({type(err).__name__}: {err}); "
                      "a plan calibrated on this sweep fits it again"]


def _calibration_sources(plan: SweepPlan, cells: Sequence[CellResult],
                         records: Mapping[str, Sequence[RequestRecord]]) -> list[CalibrationSource]:
    """The sweep itself, then the newest earlier finished sweeps of its config (an arm the budget
    left out entirely has no cells of its own to predict it from); each is calibrated only when
    the ones before it cannot predict a cell."""
    sources = [CalibrationSource(plan.sweep_id, plan.config, cells, records)]
    for sweep in stored_sweeps(plan.store.root, plan.config.name):
        if sweep.id == plan.sweep_id or not sweep.aggregated:
            continue
        try:
            sources.append(CalibrationSource(sweep.id, sweep.config, sweep.cells, sweep.records))
        except (InputError, OSError, ValueError):
            continue
        if len(sources) > EARLIER_SWEEPS:
            break
    return sources
