"""One label on every predicted figure: specfleet.perfmodel.prediction.PREDICTED_LABEL."""

from specfleet.perfmodel.prediction import PREDICTED_LABEL, Prediction
from specfleet.planning.estimate import SweepEstimate


def test_the_predicted_label_says_predicted_and_not_measured() -> None:
    assert PREDICTED_LABEL == "PREDICTED, not measured"


def test_predictions_and_plans_carry_the_one_label() -> None:
    assert Prediction.model_fields["label"].default == PREDICTED_LABEL
    assert SweepEstimate.model_fields["label"].default == PREDICTED_LABEL
