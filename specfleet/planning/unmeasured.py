"""Predictions for the cells a budgeted sweep did not measure (``NotMeasuredCell``), from the
model calibrated on the sweep's own measured cells. Labelled PREDICTED; no decision reads them."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specfleet.contract import CellIdentity, SweepConfig
from specfleet.errors import InputError
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.predict import QUICK_REQUESTS, PredictionQuery, predict
from specfleet.perfmodel.prediction import Prediction
from specfleet.planning.budget import NotMeasured
from specfleet.planning.not_measured import NotMeasuredCell
from specfleet.results import CellResult, RequestRecord


def _query(identity: CellIdentity, seed: int, cell_requests: int) -> PredictionQuery:
    """The cell as the sweep would have measured it: cells of its requests each (``simulate_cells``)."""
    return PredictionQuery(arm=identity.arm, prompt_class=identity.prompt_class, sampling=identity.sampling,
                           concurrency=identity.concurrency,
                           rate_per_s=identity.load_value if identity.load_mode == "rate" else None, seed=seed,
                           requests=QUICK_REQUESTS, cell_requests=cell_requests)


@dataclass(frozen=True)
class CalibrationSource:
    """A stored sweep to calibrate on: its id, config, usable cells and per-request records."""

    sweep_id: str
    config: SweepConfig
    cells: Sequence[CellResult]
    records: Mapping[str, Sequence[RequestRecord]]


def not_measured_cells(config: SweepConfig, sources: Sequence[CalibrationSource],
                       skipped: Sequence[NotMeasured]) -> list[NotMeasuredCell]:
    """``skipped`` with a prediction each from the first of ``sources`` (the sweep itself, then an
    earlier sweep of its config) whose calibrated model can predict it, or the reasons none can.
    A prediction names the sweep it was calibrated on."""
    if not skipped:
        return []
    seed = config.analysis.seed
    calibrations: dict[int, Calibration | str] = {}

    def calibration(index: int) -> Calibration | str:
        """Calibrated on first use: a later source costs nothing while an earlier one predicts."""
        if index not in calibrations:
            source = sources[index]
            try:
                calibrations[index] = calibrate(source.sweep_id, source.config, source.cells, source.records,
                                                seed=seed)
            except InputError as err:
                calibrations[index] = str(err)
        return calibrations[index]

    found: dict[PredictionQuery, tuple[Prediction | None, str | None]] = {}
    out = []
    for cell in skipped:
        query = _query(cell.identity, seed, config.load.requests_per_cell)
        if query not in found:
            found[query] = _first_prediction((calibration(i) for i in range(len(sources))), query)
        prediction, note = found[query]
        out.append(NotMeasuredCell(label=cell.label, identity=cell.identity, reason=cell.reason, detail=cell.detail,
                                   prediction=prediction, prediction_note=note))
    return out


def _first_prediction(calibrations: Iterable[Calibration | str],
                      query: PredictionQuery) -> tuple[Prediction | None, str | None]:
    reasons = []
    for calibration in calibrations:
        if isinstance(calibration, str):
            reasons.append(calibration)
            continue
        try:
            return predict(calibration, query), None
        except InputError as err:
            reasons.append(str(err))
    return None, "; ".join(reasons) or "no sweep to calibrate on"
