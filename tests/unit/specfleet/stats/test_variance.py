"""The pooled run-to-run noise (``specfleet.stats.variance``): unbiased parts, their sampling
covariance, what a design can tell apart, and the noise floor's interval, checked by simulation
against known truths."""

import numpy as np
import pytest

from specfleet.stats.runs import RunValue
from specfleet.stats.variance import NoiseDesign, estimate_noise
from tests.support.noise_runs import RUN_VAR, SERVER_VAR, config, runs


def test_the_parts_are_unbiased_and_their_covariance_is_the_sampling_one() -> None:
    rng = np.random.default_rng(7)
    estimates, covariances = [], []
    for _ in range(3000):
        noise = estimate_noise(runs(rng), "qualified_tokens_per_s", 0.95)
        assert noise.identified == "both" and noise.runs == 25 and noise.groups == 10 and noise.servers == 5
        estimates.append(noise.parts())
        covariances.append(noise.cov())
    found = np.array(estimates)
    se = found.std(axis=0) / np.sqrt(len(found))
    assert abs(found[:, 0].mean() - SERVER_VAR) < 4 * se[0]
    assert abs(found[:, 1].mean() - RUN_VAR) < 4 * se[1]
    assert (found[:, 0] < 0).any()  # unbiased, not truncated: it can read below 0
    # the analytic covariance at the truth is the estimates' own spread
    truth = NoiseDesign.of(runs(rng)).covariance(np.array([SERVER_VAR, RUN_VAR]))
    assert np.sqrt(np.diag(truth)) == pytest.approx(found.std(axis=0), rel=0.1)
    assert np.corrcoef(found.T)[0, 1] == pytest.approx(truth[0, 1] / np.sqrt(truth[0, 0] * truth[1, 1]), abs=0.08)


def test_the_noise_floor_interval_covers_with_its_confidence() -> None:
    rng = np.random.default_rng(11)
    truth = np.sqrt(SERVER_VAR + RUN_VAR)
    covered = []
    for _ in range(2000):
        noise = estimate_noise(runs(rng), "qualified_tokens_per_s", 0.9)
        assert noise.relative_sd_low is not None and noise.relative_sd_high is not None
        covered.append(noise.relative_sd_low <= truth <= noise.relative_sd_high)
    assert 0.86 <= np.mean(covered) <= 0.94  # 92.9 % here; Monte Carlo error 0.6 points


def test_what_a_design_can_tell_apart() -> None:
    def run(label: str, arm: str, i: int, server: str, value: float) -> RunValue:
        return RunValue("itl", label, arm, config(i), server, value)

    none = estimate_noise([run("a", "baseline", 0, "s0", 1.0), run("b", "baseline", 1, "s1", 1.1)], "itl", 0.95)
    assert none.identified == "none" and not none.estimated and none.relative_sd is None
    assert "measured twice" in none.source
    with pytest.raises(ValueError, match="no run-to-run estimate"):
        none.parts()
    one_server = estimate_noise([run("a", "baseline", 0, "s0", 1.0), run("b", "baseline", 0, "s0", 1.2)], "itl", 0.95)
    assert one_server.identified == "run_only" and not one_server.estimated
    assert one_server.run_var == pytest.approx(0.02) and one_server.relative_sd is None
    one_pair = estimate_noise([run("a", "baseline", 0, "s0", 1.0), run("b", "baseline", 0, "s1", 1.2)], "itl", 0.95)
    assert one_pair.identified == "total" and one_pair.estimated
    assert one_pair.parts() == pytest.approx((0.02, 0.0))  # the whole of it charged to the server part
    assert one_pair.relative_sd == pytest.approx(np.sqrt(0.02))
    assert "charged to the server" in one_pair.source
