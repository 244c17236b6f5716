"""Predictions for the cells a budgeted sweep did not measure (``NotMeasuredCell``), from the
model calibrated on the sweep's own measured cells. Labelled PREDICTED; no decision reads them."""

from collections.abc import Mapping, Sequence

from specfleet.budget import NotMeasured
from specfleet.contract import CellIdentity, SweepConfig
from specfleet.errors import InputError
from specfleet.not_measured import NotMeasuredCell
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.predict import PredictionQuery, predict
from specfleet.prediction import Prediction
from specfleet.results import CellResult, RequestRecord


def _query(identity: CellIdentity, seed: int) -> PredictionQuery:
    return PredictionQuery(arm=identity.arm, prompt_class=identity.prompt_class, sampling=identity.sampling,
                           concurrency=identity.concurrency,
                           rate_per_s=identity.load_value if identity.load_mode == "rate" else None, seed=seed)


def not_measured_cells(sweep_id: str, config: SweepConfig, cells: Sequence[CellResult],
                       records: Mapping[str, Sequence[RequestRecord]],
                       skipped: Sequence[NotMeasured]) -> list[NotMeasuredCell]:
    """``skipped`` with a prediction each from the model calibrated on ``cells``, or the reason there is none."""
    if not skipped:
        return []
    seed = config.analysis.seed
    calibration: Calibration | str
    try:
        calibration = calibrate(sweep_id, config, cells, records, seed=seed)
    except InputError as err:
        calibration = str(err)
    found: dict[PredictionQuery, tuple[Prediction | None, str | None]] = {}
    out = []
    for cell in skipped:
        query = _query(cell.identity, seed)
        if query not in found:
            try:
                found[query] = (None, calibration) if isinstance(calibration, str) else (
                    predict(calibration, query), None)
            except InputError as err:
                found[query] = (None, str(err))
        prediction, note = found[query]
        out.append(NotMeasuredCell(label=cell.label, identity=cell.identity, reason=cell.reason, detail=cell.detail,
                                   prediction=prediction, prediction_note=note))
    return out
