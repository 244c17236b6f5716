"""The three-verdict calibration (``benchmarks/decision_verdicts.py``): its noise estimate is the
product's, its verdicts read the corrected bounds, and a few sweeps run end to end."""

import math

import numpy as np
import pytest

from benchmarks.decision_verdicts import (
    NoiseTruth,
    Truth,
    decide,
    layout,
    run_setting,
    simulate,
    sweep_noise,
    verdict,
)
from specfleet.stats.bootstrap import Interval
from specfleet.stats.runs import RunValue
from specfleet.stats.variance import estimate_noise
from specfleet.verdicts.rule import Claim, ClaimResult

NOISE = NoiseTruth(0.002, 0.008, "test")


def test_the_precomputed_noise_estimate_is_estimate_noise() -> None:
    lay = layout("demo", history=True)
    y = simulate(lay, Truth("t", server_share=0.5), NOISE, 0.1, np.random.default_rng(4))
    runs = [RunValue(r.metric, r.label, r.arm, r.config, r.server, float(v)) for r, v in zip(lay.runs, y, strict=True)]
    direct = estimate_noise(runs, "qualified_tokens_per_s", 0.95)
    fast = sweep_noise(lay, y, 0.95)
    assert fast.parts() == pytest.approx(direct.parts(), rel=1e-9, abs=1e-12)
    assert np.allclose(fast.cov(), direct.cov(), rtol=1e-8, atol=1e-14)
    assert fast.identified == direct.identified


def _result(low: float | None, high: float | None) -> ClaimResult:
    corrected = Interval(estimate=1.0, low=low, high=high, confidence=0.95, basis="runs", resamples=None)
    return ClaimResult(Claim("c", "mix", 0.0, {}), corrected, corrected, False, 1, None)


def test_verdicts_from_the_corrected_bounds() -> None:
    assert verdict(_result(0.7, 0.95)) == "reject"  # wholly below the break-even
    assert verdict(_result(0.9, 1.3)) == "inconclusive"  # holds it
    assert verdict(_result(1.05, 1.3)) == "adopt"
    assert verdict(_result(None, None)) == "inconclusive"  # no noise estimate
    assert verdict(_result(1.05, 1.3), break_even=1.1) == "inconclusive"


def test_large_true_effects_are_decided_and_shares_add_up() -> None:
    lay = layout("demo", history=True)
    rng = np.random.default_rng(0)
    gain = decide(lay, simulate(lay, Truth("t"), NOISE, math.log(3.0), rng))
    loss = decide(lay, simulate(lay, Truth("t"), NOISE, math.log(1 / 3.0), rng))
    mix = [key for key, kind, *_ in lay.claims if kind == "mix"]
    assert all(gain[k] == "adopt" for k in mix) and all(loss[k] == "reject" for k in mix)
    found = run_setting("demo", Truth("model", history=True), NOISE, 2, 0, lambda _: None)
    for row in found["ratios"].values():  # type: ignore[attr-defined]
        assert all(sum(s.values()) == pytest.approx(1.0) for s in row["shares"].values())
