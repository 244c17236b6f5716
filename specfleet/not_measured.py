"""The cells a budgeted sweep did not measure, each beside the performance model's prediction
calibrated on the sweep's own measured cells (``specfleet.perfmodel``). Pure, no I/O.

A prediction is labelled PREDICTED and nothing here reaches a decision: decisions read stored
cells only, so a cell that was not measured counts exactly as a missing one (a verdict at the
traffic mix that covers less of it says PARTIAL).
"""

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from specfleet.budget import NotMeasured
from specfleet.contract import CellIdentity, SweepConfig
from specfleet.contract.base import RecordModel
from specfleet.errors import InputError
from specfleet.perfmodel import Calibration, Prediction, PredictionQuery, calibrate, predict
from specfleet.results import CellResult, RequestRecord


class NotMeasuredCell(RecordModel):
    label: str
    identity: CellIdentity
    reason: Literal["budget"]
    detail: str = Field(description="Why it did not start, e.g. 'predicted 420 s, 300 s left'.")
    prediction: Prediction | None = Field(description="The performance model's figures, PREDICTED, never measured.")
    prediction_note: str | None = Field(description="Why there is no prediction (None when there is one).")


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
