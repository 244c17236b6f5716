"""The one decision rule (``specfleet.verdicts.rule``): its critical values against closed forms,
max-T's gain from correlated claims, Benjamini-Hochberg by hand, and no adopt without a noise
estimate."""

import numpy as np
import pytest
from scipy import stats

from specfleet.stats.runs import Metric, RunValue
from specfleet.stats.variance import estimate_noise
from specfleet.verdicts import rule
from specfleet.verdicts.detection import detection
from specfleet.verdicts.rule import Claim, ClaimResult, Family
from tests.support.noise_runs import config, runs

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE


def family(control: str = "family_wise") -> Family:
    found = runs(np.random.default_rng(3))
    noise = estimate_noise(found, "qualified_tokens_per_s", CONFIDENCE)
    return Family(found, {"qualified_tokens_per_s": noise}, CONFIDENCE, control)  # type: ignore[arg-type]


def cell_claim(fam: Family, key: str, i: int, log_estimate: float, kind: str = "mix") -> Claim:
    """The draft arm over the baseline at configuration i, at a given estimate."""
    base = [j for j, r in enumerate(fam.runs) if r.arm == "baseline" and r.config == config(i)]
    cand = [j for j, r in enumerate(fam.runs) if r.arm == "draft" and r.config == config(i)]
    weights = {j: 1.0 / len(cand) for j in cand} | {j: -1.0 / len(base) for j in base}
    return Claim(key, kind, log_estimate, weights)  # type: ignore[arg-type]


def se_df(result: ClaimResult) -> tuple[float, float]:
    m = result.marginal
    assert m.low is not None and m.high is not None and m.df is not None
    return (np.log(m.high) - np.log(m.low)) / (2 * stats.t.isf(ALPHA / 2, m.df)), m.df


def lower_critical(result: ClaimResult) -> float:
    se, _ = se_df(result)
    assert result.corrected.low is not None
    return float((result.claim.log_estimate - np.log(result.corrected.low)) / se)


def test_one_claim_gets_the_one_sided_t_bound() -> None:
    fam = family()
    fam.add(cell_claim(fam, "only", 0, 0.1))
    result = fam.decide()["only"]
    _, df = se_df(result)
    assert 1.0 < df < 100.0
    assert lower_critical(result) == pytest.approx(stats.t.isf(ALPHA, df), abs=0.12)
    assert result.comparisons == 1 and result.corrected.sides == "each" and result.marginal.sides == "two"


def test_max_t_pays_nothing_for_a_claim_repeated_and_bonferroni_for_independent_ones() -> None:
    one = family()
    one.add(cell_claim(one, "only", 0, 0.1))
    alone = lower_critical(one.decide()["only"])
    copies = family()
    for n in range(5):
        copies.add(cell_claim(copies, f"copy{n}", 0, 0.1))
    for result in copies.decide().values():  # the same draws up to Monte Carlo error (6,000 draws)
        assert lower_critical(result) == pytest.approx(alone, abs=0.12)
    # five claims on five disjoint baselines (one shared candidate server): near Bonferroni's five-fold cost
    spread = family()
    for i in range(5):
        spread.add(cell_claim(spread, f"config{i}", 2 * i, 0.1))
    results = spread.decide()
    critical = lower_critical(results["config0"])
    _, df = se_df(results["config0"])
    assert alone + 0.3 < critical <= stats.t.isf(ALPHA / 5, df) + 0.1


def test_the_false_discovery_rate_is_benjamini_hochberg() -> None:
    fam = family("false_discovery_rate")
    estimates = [0.9, 0.75, 0.65, 0.55, 0.45, 0.1, -0.2, 0.0]
    for i, log in enumerate(estimates):
        fam.add(cell_claim(fam, f"c{i}", i, log))
    results = fam.decide()
    p = {}
    for key, r in results.items():
        se, df = se_df(r)
        p[key] = stats.t.sf(r.claim.log_estimate / se, df)
    ordered = sorted(p, key=p.__getitem__)
    m = len(ordered)
    passed = [rank for rank, key in enumerate(ordered, 1) if p[key] <= ALPHA * rank / m]
    expected = set(ordered[:max(passed)]) if passed else set()
    adopted = {key for key, r in results.items() if r.adopted}
    assert adopted == expected
    bonferroni = {key for key in p if p[key] <= ALPHA / m}
    assert bonferroni < adopted  # the case tells the two apart
    assert all(r.corrected.correction == "FCR-adjusted, Benjamini-Hochberg" for r in results.values())


def test_without_a_noise_estimate_nothing_has_an_interval_or_is_adopted() -> None:
    lone = [RunValue("qualified_tokens_per_s", "b", "baseline", config(0), "s0", 4.0),
            RunValue("qualified_tokens_per_s", "d", "draft", config(0), "s1", 5.0)]
    fam = Family(lone, {"qualified_tokens_per_s": estimate_noise(lone, "qualified_tokens_per_s", CONFIDENCE)},
                 CONFIDENCE)
    fam.add(Claim("huge", "cell", 1.0, {0: -1.0, 1: 1.0}))
    result = fam.decide()["huge"]
    assert not result.adopted and result.marginal.low is None and result.marginal.confidence is None
    assert result.marginal.basis == "none" and result.why_not is not None
    assert result.why_not.startswith("no run-to-run noise estimate")


def test_a_family_refuses_a_claim_twice_or_on_another_metric() -> None:
    fam = family()
    fam.add(cell_claim(fam, "x", 0, 0.1))
    with pytest.raises(ValueError, match="twice"):
        fam.add(cell_claim(fam, "x", 1, 0.1))
    with pytest.raises(ValueError, match="another metric"):
        fam.add(Claim("itl", "cell", 0.1, {0: 1.0}, metric="itl"))


def test_three_verdicts_adopt_above_reject_below_inconclusive_across_the_break_even() -> None:
    fam = family()
    fam.add(cell_claim(fam, "above", 0, 2.0))
    fam.add(cell_claim(fam, "below", 1, -2.0))
    fam.add(cell_claim(fam, "across", 2, 0.0))
    results = fam.decide()
    above, below, across = results["above"], results["below"], results["across"]
    assert above.corrected.low is not None and above.corrected.low > 1.0 and above.verdict == "adopt"
    assert below.corrected.high is not None and below.corrected.high < 1.0 and below.verdict == "reject"
    assert below.why_not is not None and below.why_not.startswith("shown not to pay")
    assert across.corrected.low is not None and across.corrected.high is not None
    assert across.corrected.low < 1.0 < across.corrected.high and across.verdict == "inconclusive"
    assert (above.adopted, below.adopted, across.adopted) == (True, False, False)


def test_the_false_discovery_rate_rejects_by_benjamini_hochberg_below_the_break_even() -> None:
    fam = family("false_discovery_rate")
    for i, log in enumerate([-0.9, -0.75, 0.0, 0.9]):
        fam.add(cell_claim(fam, f"c{i}", i, log))
    results = fam.decide()
    for r in results.values():
        assert r.corrected.high is not None and r.corrected.low is not None
        shown = r.corrected.high < 1.0
        assert (r.verdict == "reject") == shown and (r.verdict == "adopt") == (r.corrected.low > 1.0)
    assert results["c0"].verdict == "reject" and results["c2"].verdict == "inconclusive"


def test_without_a_noise_estimate_a_claim_is_inconclusive_however_far_it_reads() -> None:
    lone = [RunValue("qualified_tokens_per_s", "b", "baseline", config(0), "s0", 4.0),
            RunValue("qualified_tokens_per_s", "d", "draft", config(0), "s1", 1.0)]
    fam = Family(lone, {"qualified_tokens_per_s": estimate_noise(lone, "qualified_tokens_per_s", CONFIDENCE)},
                 CONFIDENCE)
    fam.add(Claim("far below", "cell", -3.0, {0: -1.0, 1: 1.0}))
    assert fam.decide()["far below"].verdict == "inconclusive"


def test_the_minimum_detectable_saving_is_the_closed_form() -> None:
    fam = family()
    fam.add(cell_claim(fam, "only", 0, 0.05))
    result = fam.decide()["only"]
    se, df = se_df(result)
    expected = np.exp(np.log(result.claim.break_even) + (lower_critical(result) + stats.t.ppf(0.8, df)) * se)
    found = detection(result, lambda speedup: 1.0 - 1.0 / speedup)
    assert found is not None and found.speedup == pytest.approx(expected, rel=1e-9)
    assert found.saving_fraction == pytest.approx(1.0 - 1.0 / expected)
    assert result.verdict == "inconclusive" and found.runs_factor is not None and found.to_decide is not None
    # the factor brings the reach within the observed effect: se / sqrt(factor) just adopts at power
    reach = (lower_critical(result) + stats.t.ppf(0.8, df)) * se / np.sqrt(found.runs_factor)
    assert reach == pytest.approx(result.claim.log_estimate - np.log(result.claim.break_even))


@pytest.mark.slow  # a calibration simulation: make test-unit leaves it out
def test_a_first_night_with_a_real_server_part_adopts_nothing_wrongly_beyond_its_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Six configurations, three arms on their own servers, one run per cell, the baseline opening
    and closing on two server lives, half the noise between servers, every true speedup 1: a sweep
    adopts anything in at most 5 % of sweeps (dropping a server part that reads below 0 together
    with its uncertainty adopted 7 to 10 % here) and rejects anything in at most 5 %."""
    monkeypatch.setattr(rule, "MAX_T_DRAWS", 2_000)
    rng = np.random.default_rng(49)
    sweeps, wrong_adopt, wrong_reject = 240, 0, 0
    for n in range(sweeps):
        results = first_night(rng, server_share=0.5, seed=n)
        wrong_adopt += any(r.verdict == "adopt" for r in results.values())
        wrong_reject += any(r.verdict == "reject" for r in results.values())
    assert wrong_adopt / sweeps <= 0.05 and wrong_reject / sweeps <= 0.05, (wrong_adopt, wrong_reject)


@pytest.mark.slow  # a calibration simulation: make test-unit leaves it out
def test_heavy_tailed_windows_wrongly_decide_nothing_beyond_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve configurations, three arms, one run per cell, t3 run noise (heavier tails than normal,
    the same variance), every true speedup 1: a sweep adopts or rejects anything in at most 5 % of
    sweeps. Each cell rests on one candidate window; with the pooled noise's Satterthwaite degrees of
    freedom alone (not capped at the cell's n_eff - 1) 29 of these 120 sweeps decided something."""
    monkeypatch.setattr(rule, "MAX_T_DRAWS", 1_500)
    rng = np.random.default_rng(7)
    sweeps, wrong = 120, 0
    for n in range(sweeps):
        results = first_night(rng, server_share=0.0, seed=n, configs=12, tails="t3")
        wrong += any(r.verdict != "inconclusive" for r in results.values())
    assert wrong / sweeps <= 0.05, wrong


def first_night(rng: np.random.Generator, server_share: float, seed: int, tau: float = 0.2, configs: int = 6,
                tails: str = "normal") -> dict[str, ClaimResult]:
    """One simulated first night at true speedup 1: per-cell and per-arm mix claims; every draw normal,
    or t with 3 degrees of freedom scaled to the same variance."""
    metric: Metric = "qualified_tokens_per_s"
    server_sd, run_sd = np.sqrt(server_share) * tau, np.sqrt(1.0 - server_share) * tau
    offsets: dict[str, float] = {}
    found: list[RunValue] = []

    def draw(sd: float) -> float:
        return sd * float(rng.standard_t(3) / np.sqrt(3.0) if tails == "t3" else rng.normal())

    def run(arm: str, i: int, server: str) -> None:
        offset = offsets.setdefault(server, draw(server_sd))
        found.append(RunValue(metric, f"{arm}{i}{server}", arm, config(i), server, 3.0 + offset + draw(run_sd)))

    for i in range(configs):
        for life in ("opening", "closing"):
            run("baseline", i, f"baseline/{life}")
    for a in range(3):
        for i in range(configs):
            run(f"arm{a}", i, f"arm{a}")
    fam = Family(found, {metric: estimate_noise(found, metric, CONFIDENCE)}, CONFIDENCE, seed=seed)
    for a in range(3):
        mix: dict[int, float] = {}
        for i in range(configs):
            cand = [j for j, r in enumerate(found) if r.arm == f"arm{a}" and r.config == config(i)]
            base = [j for j, r in enumerate(found) if r.arm == "baseline" and r.config == config(i)]
            weights = {j: 1.0 / len(cand) for j in cand} | {j: -1.0 / len(base) for j in base}
            fam.add(Claim(f"cell{a}/{i}", "cell", sum(found[j].log_value * w for j, w in weights.items()), weights))
            for j, w in weights.items():
                mix[j] = mix.get(j, 0.0) + w / configs
        fam.add(Claim(f"mix{a}", "mix", sum(found[j].log_value * w for j, w in mix.items()), mix))
    return fam.decide()
