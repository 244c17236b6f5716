"""The decision calibration's result record, from the figures ``benchmarks/decision_calibration.py`` gathers.

Its ``main`` calls ``record_calibration(out)`` once at its end, ``out`` being the dict it writes with
``--json``: per shape a ``coverage`` table and ``adopt`` rates per true gain, and the ``canary`` table.
"""

import re
from collections.abc import Mapping
from pathlib import Path

from benchmarks.results_record import write_result

STATED = 0.95
COVERAGE_SLACK = 0.025
FALSE_ADOPT_LIMIT = 0.05
NIGHTLY_POWER_AT_3_TAU = 0.80
GOAL = ("every interval covers within 2.5 points of its stated 95 %; at a true saving of 0 at most 5 % of sweeps "
        "adopt anything; the nightly shape adopts the arm at the mix in >= 80 % of sweeps at a true gain of 3 tau")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _rate(row: object) -> float | None:
    rate = row.get("rate") if isinstance(row, Mapping) else None
    return float(rate) if isinstance(rate, int | float) else None


def _is_coverage(name: str, all_at_once_promised: bool) -> bool:
    """A figure that states a 95 % coverage: marginal intervals, and every corrected bound at once where the
    error control promises that (family-wise)."""
    return "marginal" in name or (("every corrected" in name or "at once" in name) and all_at_once_promised)


def calibration_figures(out: Mapping[str, object]) -> tuple[dict[str, float | None], bool | None]:
    """Every rate in ``out`` as a figure in per cent, and whether the goal is met (None: nothing to judge)."""
    all_at_once = out.get("error_control", "family_wise") == "family_wise"
    figures: dict[str, float | None] = {}
    misses: list[bool] = []
    shapes = out.get("shapes")
    for shape, result in (shapes.items() if isinstance(shapes, Mapping) else []):
        if not isinstance(result, Mapping):
            continue
        coverage, adopt = result.get("coverage", {}), result.get("adopt", {})
        for name, row in (coverage.items() if isinstance(coverage, Mapping) else []):
            rate = _rate(row)
            figures[f"{shape}_{_slug(name)}_pct"] = None if rate is None else 100 * rate
            if rate is not None and _is_coverage(name, all_at_once):
                misses.append(abs(rate - STATED) > COVERAGE_SLACK)
        for name, by_gain in (adopt.items() if isinstance(adopt, Mapping) else []):
            for gain, rate in (by_gain.items() if isinstance(by_gain, Mapping) else []):
                value = float(rate) if isinstance(rate, int | float) else None
                figures[f"{shape}_{_slug(name)}_at_{_slug(str(gain).replace('-', 'minus '))}_tau_pct"] = (
                    None if value is None else 100 * value)
                if value is not None and name == "adopt: anything in the sweep" and float(gain) == 0:
                    misses.append(value > FALSE_ADOPT_LIMIT)
                if value is not None and shape == "nightly" and name == "adopt: arm at the mix" and float(gain) == 3:
                    misses.append(value < NIGHTLY_POWER_AT_3_TAU)
    canary = out.get("canary")
    for name, row in (canary.items() if isinstance(canary, Mapping) else []):
        rate = _rate(row)
        figures[f"{_slug(name)}_pct"] = None if rate is None else 100 * rate
        if rate is not None and "with --from" in name and _is_coverage(name, all_at_once):
            misses.append(abs(rate - STATED) > COVERAGE_SLACK)
    return figures, (not any(misses) if misses else None)


def record_calibration(out: Mapping[str, object]) -> Path:
    figures, met = calibration_figures(out)
    setup = [f"error control {out.get('error_control', 'family_wise')}"]
    if out.get("history") is False:
        setup.append("no noise history (--no-history)")
    if out.get("server_share") is not None:
        setup.append(f"server share {out['server_share']} (--server-share)")
    return write_result("decision_calibration", GOAL, met, figures,
                        note="SIMULATED sweeps on the real noise of stored sweeps, decided by specfleet's own code; "
                             + ", ".join(setup))
