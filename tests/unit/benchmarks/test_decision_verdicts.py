"""The three-verdict calibration (``benchmarks/decision_verdicts.py``): its noise estimate is the
product's, large true effects are decided, and a few sweeps run end to end."""

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
)
from specfleet.stats.runs import RunValue
from specfleet.stats.variance import estimate_noise

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
