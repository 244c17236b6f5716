"""The three-verdict calibration (``benchmarks/decision_verdicts.py``): its noise estimate is the
product's, large true effects are decided, and a few sweeps run end to end; over nights
(``benchmarks/decision_nights.py``), a look pools its earlier nights and keeps their decisions."""

import math

import numpy as np
import pytest

from benchmarks.decision_nights import sequence
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
from specfleet.verdicts.sequential import LookPlan

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


def test_a_look_pools_its_earlier_nights_runs_on_server_lives_of_their_own() -> None:
    one, two = layout("demo", history=True), layout("demo", history=True, nights=2)
    assert two.night_runs == one.night_runs and len(two.runs) == len(one.runs) + one.night_runs
    assert two.history == one.history and two.runs[2 * two.night_runs:] == one.runs[one.night_runs:]
    assert not {r.server for r in two.runs[:two.night_runs]} & {r.server for r in two.runs[two.night_runs:]}
    # each claim reads both nights' runs, each night's half as much as one night's alone
    assert np.allclose(two.weights[:, :two.night_runs], one.weights[:, :one.night_runs] / 2)
    assert np.allclose(two.weights[:, two.night_runs:2 * two.night_runs], one.weights[:, :one.night_runs] / 2)


def test_a_sequence_keeps_what_an_earlier_look_decided() -> None:
    """Two looks of the demo shape at a true 3x gain: look 1 adopts every arm at the mix, and look
    2 keeps it; the sequence's verdicts only ever move from inconclusive to decided."""
    looks = [layout("demo", history=True, nights=k) for k in (1, 2)]
    found = sequence(LookPlan(2, 0.95, "bonferroni"), looks, Truth("t"), NOISE, math.log(3.0),
                     np.random.default_rng(2))
    mix = [key for key, kind, *_ in looks[0].claims if kind == "mix"]
    assert all(found[0][k] == "adopt" and found[1][k] == "adopt" for k in mix)
    assert all(found[1][k] == v for k, v in found[0].items() if v != "inconclusive")
