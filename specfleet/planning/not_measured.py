"""The cells a budgeted sweep did not measure, each beside the performance model's prediction
calibrated on the sweep's own measured cells (made by ``specfleet.planning.unmeasured``; this
module holds the type only, so the summary carries predictions without reaching the model).

A prediction is labelled PREDICTED and nothing here reaches a decision: decisions read stored
cells only, so a cell that was not measured counts exactly as a missing one (a verdict at the
traffic mix that covers less of it says PARTIAL).
"""

from typing import Literal

from pydantic import Field

from specfleet.contract import CellIdentity
from specfleet.contract.base import RecordModel
from specfleet.perfmodel.prediction import Prediction


class NotMeasuredCell(RecordModel):
    label: str
    identity: CellIdentity
    reason: Literal["budget"]
    detail: str = Field(description="Why it did not start, e.g. 'predicted 420 s, 300 s left'.")
    prediction: Prediction | None = Field(description="The performance model's figures, PREDICTED, never measured.")
    prediction_note: str | None = Field(description="Why there is no prediction (None when there is one).")
