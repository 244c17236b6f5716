"""The minimum detectable saving (``specfleet.verdicts.power``) against its closed form, the exact
noncentral t, a simulation of the rule's own decision, and read back from a decided claim."""

import math

import numpy as np
import pytest
from scipy import stats

from specfleet.stats.variance import estimate_noise
from specfleet.verdicts.power import detectable, detectable_log_ratio, detectable_of, saving, speedup_of
from specfleet.verdicts.rule import Claim, Family
from tests.support.noise_runs import config, runs


def test_the_closed_form_by_hand() -> None:
    se, c, be = 0.1, 1.6448536, 1.2
    adopt = detectable_log_ratio(se, 1e9, c, be, 0.8, "adopt")
    assert adopt == pytest.approx(math.log(1.2) + (1.6448536 + 0.8416212) * 0.1, abs=1e-6)
    reject = detectable_log_ratio(se, 1e9, c, be, 0.8, "reject")
    assert reject == pytest.approx(math.log(1.2) - (1.6448536 + 0.8416212) * 0.1, abs=1e-6)
    d = detectable(0.1, 4.0, 2.0, 2.5, 1.0, 0.9)
    t90 = 1.5332063  # t_{0.9, 4}
    assert math.log(d.adopt_speedup) == pytest.approx((2.0 + t90) * 0.1, abs=1e-6)
    assert math.log(d.reject_speedup) == pytest.approx(-(2.5 + t90) * 0.1, abs=1e-6)
    assert d.adopt_saving == pytest.approx(1 - math.exp(-(2.0 + t90) * 0.1))
    assert speedup_of(saving(1.5)) == pytest.approx(1.5)


@pytest.mark.parametrize("df", [3.0, 8.0, 40.0, 1e6])
def test_the_exact_power_at_the_detectable_ratio_is_close_to_the_stated_power(df: float) -> None:
    """Adopted when (log_hat - log b) / se_hat > c: noncentral t with noncentrality theta / se."""
    c, se = 2.3, 0.07
    theta = detectable_log_ratio(se, df, c, 1.0, 0.8)
    exact = float(stats.nct.sf(c, df, theta / se))
    assert exact == pytest.approx(0.8, abs=0.03)


@pytest.mark.parametrize("power", [0.5, 0.8, 0.95])
def test_simulated_decisions_at_the_detectable_ratios(power: float) -> None:
    """The rule's decision drawn directly: an estimate around the truth, a noise estimate from a
    chi-square over df. At the adopt end it adopts, at the reject end it rejects, at ``power``."""
    rng = np.random.default_rng(11)
    se, df, low_c, high_c, be, n = 0.05, 12.0, 2.2, 2.4, 1.15, 200_000
    d = detectable(se, df, low_c, high_c, be, power)
    se_hat = se * np.sqrt(rng.chisquare(df, n) / df)
    at_adopt = math.log(d.adopt_speedup) + rng.normal(0, se, n)
    at_reject = math.log(d.reject_speedup) + rng.normal(0, se, n)
    assert np.mean(at_adopt - low_c * se_hat > math.log(be)) == pytest.approx(power, abs=0.025)
    assert np.mean(at_reject + high_c * se_hat < math.log(be)) == pytest.approx(power, abs=0.025)
    # and well short of that power halfway to the break-even
    halfway = (math.log(d.adopt_speedup) + math.log(be)) / 2 + rng.normal(0, se, n)
    assert np.mean(halfway - low_c * se_hat > math.log(be)) < power - 0.15


def test_read_back_from_a_decided_claim() -> None:
    found = runs(np.random.default_rng(3))
    noise = estimate_noise(found, "qualified_tokens_per_s", 0.95)
    fam = Family(found, {"qualified_tokens_per_s": noise}, 0.95)
    base = [j for j, r in enumerate(found) if r.arm == "baseline" and r.config == config(0)]
    cand = [j for j, r in enumerate(found) if r.arm == "draft" and r.config == config(0)]
    weights = {j: 1.0 / len(cand) for j in cand} | {j: -1.0 / len(base) for j in base}
    fam.add(Claim("only", "mix", 0.1, weights, break_even=1.05))
    result = fam.decide()["only"]
    d = detectable_of(result)
    assert d is not None and result.marginal.df is not None
    server_var, run_var = noise.parts()
    assert server_var > 0 and run_var > 0
    per_server: dict[str, float] = {}
    for j, w in weights.items():
        per_server[found[j].server] = per_server.get(found[j].server, 0.0) + w
    se = math.sqrt(server_var * sum(v**2 for v in per_server.values()) + run_var * sum(w**2 for w in weights.values()))
    df = result.marginal.df
    c = stats.t.isf(0.05, df)  # one claim: the one-sided t bound
    assert math.log(d.adopt_speedup) == pytest.approx(math.log(1.05) + (c + stats.t.ppf(0.8, df)) * se, abs=0.12 * se)
    assert math.log(d.reject_speedup) == pytest.approx(math.log(1.05) - (c + stats.t.ppf(0.8, df)) * se, abs=0.12 * se)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="power"):
        detectable_log_ratio(0.1, 5.0, 2.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="se"):
        detectable_log_ratio(-0.1, 5.0, 2.0, 1.0)
    with pytest.raises(ValueError, match="infinite"):
        speedup_of(1.0)
