"""The decision calibration's figures become one results record, met only when every goal holds."""

from pathlib import Path

from benchmarks.calibration_record import calibration_figures, record_calibration
from benchmarks.results_record import read_results


def _out(cell: float = 0.948, false_adopt: float = 0.045, power: float = 0.971) -> dict[str, object]:
    shape = {"coverage": {"cell marginal": {"rate": cell, "n": 18000},
                          "corrected: every lower bound of the sweep at once": {"rate": 0.966, "n": 1000}},
             "adopt": {"adopt: anything in the sweep": {"-2": 0.0, "+0": false_adopt, "+3": 0.985},
                       "adopt: arm at the mix": {"-2": 0.0, "+0": 0.0, "+3": power}}}
    return {"error_control": "family_wise", "history": True, "server_share": None,
            "shapes": {"demo": shape, "nightly": shape},
            "canary": {"canary with --from: tokens/s marginal": {"rate": 0.949, "n": 1200},
                       "canary without --from: tokens/s marginal": {"rate": 0.5, "n": 1200},
                       "canary with --from: rollback": {"rate": 0.032, "n": 400}}}


def test_the_goal_is_met_only_when_coverage_false_adopts_and_power_hold() -> None:
    figures, met = calibration_figures(_out())
    assert met is True
    assert figures["demo_cell_marginal_pct"] == 94.8
    assert figures["nightly_adopt_arm_at_the_mix_at_3_tau_pct"] == 97.1
    assert figures["demo_adopt_anything_in_the_sweep_at_minus_2_tau_pct"] == 0.0
    assert calibration_figures(_out(cell=0.90))[1] is False
    assert calibration_figures(_out(false_adopt=0.06))[1] is False
    assert calibration_figures(_out(power=0.79))[1] is False
    assert calibration_figures({})[1] is None


def test_the_record_is_written(benchmark_results: Path) -> None:
    record_calibration(_out() | {"history": False})
    [(_, result)] = read_results(benchmark_results)
    assert result.benchmark == "decision_calibration" and result.met is True and "--no-history" in result.note
