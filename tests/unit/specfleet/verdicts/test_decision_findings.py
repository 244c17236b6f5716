"""Issue 28's nine findings, one test each, on synthetic sweeps analysed end to end
(``specfleet.verdicts.analysis.analyse_sweep``): each failed on ce4142f and passes with the one rule."""

import math

import pytest

from specfleet.contract import CellIdentity, StochasticTestSpec
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.verdicts.mix import MixVerdict
from tests.support.synthetic_sweep import Sweep, bracketed, config, history

CLASS_RATE = {"code": 100.0, "extraction": 140.0, "chat": 80.0, "rag": 120.0}


def rate(ident: CellIdentity) -> float:
    return CLASS_RATE[ident.prompt_class] * (1.0 + ident.load_value / 4.0)


def verdict(verdicts: list[MixVerdict], name: str) -> MixVerdict:
    return next(v for v in verdicts if v.name == name)


def test_1_an_interval_includes_the_run_to_run_noise() -> None:
    """Opening and closing baselines 6 % apart at every configuration: a 4 % gain measured with
    almost no request-level spread is within that noise, and the interval says so (ce4142f: a
    requests-basis interval around 1.04 that excluded 1)."""
    cfg = config()
    sweep = bracketed(cfg, rate, lambda i: rate(i) * (1.06 if i.load_value == 4 else 0.94),
                      {"draft-k2": lambda i: rate(i) * 1.04, "draft-k4": lambda i: rate(i) * 1.04}, spread=0.002)
    for d in sweep.analyse().decisions:
        interval = d.interval
        assert interval is not None and interval.low is not None and interval.high is not None
        assert interval.basis == "runs" and interval.confidence == 0.95
        assert interval.low < 1.0 < interval.high, d.slice


def test_2_one_rule_for_the_cell_and_its_class() -> None:
    """One load: a class's claim is its one cell's, so the cell and the class decide alike (ce4142f:
    chat's cell adopted, point saving beyond its 3.9 % spread and the requests-basis low end above 0,
    while the class, its low end under that spread, was not beyond noise). Code's cell, on one window
    (degrees of freedom at most its n_eff - 1), is adopted only far beyond its 10 % noise: 10x."""
    cfg = config(loads=(4,))
    ends = {"code": 1.10, "extraction": 0.90, "chat": 1.04}
    gains = {"code": 10.0, "extraction": 1.0, "chat": 1.065}
    sweep = bracketed(cfg, rate, lambda i: rate(i) * ends[i.prompt_class],
                      {"draft-k2": lambda i: rate(i) * gains[i.prompt_class] * (1 + (ends[i.prompt_class] - 1) / 2),
                       "draft-k4": lambda i: rate(i)}, spread=0.1)
    analysis = sweep.analyse(history=history(cfg, rate, lambda i: rate(i) * ends[i.prompt_class]))
    adopted = {(d.slice.arm, d.slice.prompt_class): d.verdict == "adopt" for d in analysis.decisions}
    beyond = {(v.name, pc): f.beyond_noise for v in analysis.mix if not v.name.endswith("policy")
              for pc, f in v.per_class.items()}
    assert adopted == beyond
    assert adopted[("draft-k2", "code")]


def test_3_an_adopt_is_corrected_for_every_comparison_of_the_sweep() -> None:
    """32 cells: one gains 2.6 of its own standard errors, beyond its interval alone but not beyond
    the sweep's 32 and more comparisons (ce4142f: adopted, uncorrected)."""
    cfg = config(classes=("code", "extraction", "chat", "rag"), loads=(1, 2, 4, 8))
    jitter = {("code", 1): 1.03, ("code", 2): 0.97, ("code", 4): 1.01, ("code", 8): 0.99, ("extraction", 1): 0.98,
              ("extraction", 2): 1.02, ("extraction", 4): 1.04, ("extraction", 8): 0.96, ("chat", 1): 1.0,
              ("chat", 2): 1.03, ("chat", 4): 0.98, ("chat", 8): 1.01, ("rag", 1): 0.97, ("rag", 2): 1.0,
              ("rag", 4): 1.02, ("rag", 8): 0.99}

    def end(i: CellIdentity) -> float:
        return rate(i) * jitter[(i.prompt_class, int(i.load_value))]

    def cand(gain: float) -> dict[str, object]:
        def one(i: CellIdentity) -> float:
            middle = (rate(i) + end(i)) / 2
            return middle * (gain if (i.prompt_class, i.load_value) == ("chat", 4.0) else 1.0)
        return {"draft-k2": one, "draft-k4": lambda i: (rate(i) + end(i)) / 2}

    null = bracketed(cfg, rate, end, cand(1.0), spread=0.005).analyse()  # type: ignore[arg-type]
    target = next(d for d in null.decisions if (d.slice.arm, d.slice.prompt_class, d.slice.load_value)
                  == ("draft-k2", "chat", 4.0))
    assert target.interval is not None and target.interval.high is not None
    se = math.log(target.interval.high / target.interval.estimate) / 1.96
    gained = bracketed(cfg, rate, end, cand(math.exp(2.6 * se)), spread=0.005).analyse()  # type: ignore[arg-type]
    d = next(d for d in gained.decisions if (d.slice.arm, d.slice.prompt_class, d.slice.load_value)
             == ("draft-k2", "chat", 4.0))
    assert d.interval is not None and d.interval.low is not None and d.interval.low > 1.0
    assert (d.verdict, d.reason_code) == ("inconclusive", "not_after_correction")
    assert d.comparisons is not None and d.comparisons > 32
    assert f"not after correcting for {d.comparisons} comparisons" in d.reason


def test_4_the_noise_floor_is_pooled_over_the_sweep_with_its_own_interval() -> None:
    """Three pairs 1 %, 5 % and 3 % apart: every decision reads one pooled floor, which has an
    interval (ce4142f: each configuration's own pair, (max - min) / mean)."""
    cfg = config(loads=(4,))
    ends = {"code": 1.01, "extraction": 1.05, "chat": 0.97}
    sweep = bracketed(cfg, rate, lambda i: rate(i) * ends[i.prompt_class],
                      {"draft-k2": lambda i: rate(i) * 1.5, "draft-k4": lambda i: rate(i) * 1.5})
    analysis = sweep.analyse()
    floors = {d.cost.noise_floor for d in analysis.decisions if d.cost is not None}
    assert len(floors) == 1
    [noise] = [n for n in analysis.noise if n.metric == "qualified_tokens_per_s"]  # type: ignore[attr-defined]
    assert noise.relative_sd == pytest.approx(floors.pop())
    assert noise.relative_sd_low is not None and noise.relative_sd_high is not None
    assert noise.relative_sd_low <= noise.relative_sd <= noise.relative_sd_high
    assert noise.groups == 3 and noise.servers == 2


def test_5_a_partial_verdict_is_never_adoptable_and_an_unusable_candidate_counts_against_it() -> None:
    """draft-k2 doubles throughput everywhere but its chat c4 cell is not usable: the verdict is
    PARTIAL and not adoptable (ce4142f: that cell dropped like an unmeasured one, adoptable)."""
    cfg = config()
    sweep = bracketed(cfg, rate, lambda i: rate(i) * 1.01,
                      {"draft-k2": lambda i: rate(i) * 2.0, "draft-k4": lambda i: rate(i) * 2.0},
                      status={"draft-k2": lambda i: "invalid" if (i.prompt_class, i.load_value) == ("chat", 4.0)
                              else "ok"})
    analysis = sweep.analyse()
    k2, k4 = verdict(analysis.mix, "draft-k2"), verdict(analysis.mix, "draft-k4")
    assert k2.coverage < 1.0 and k2.headline.startswith("PARTIAL")
    assert not k2.adoptable
    assert not k2.other_gates.passed and "candidate_not_usable" in k2.other_gates.detail
    assert k4.adoptable, k4.headline  # the same gain, every cell usable


def test_6_a_k_policy_serves_k0_loads_with_the_measured_baseline() -> None:
    """draft's cells at c4 are all unusable, so the policy turns it off there: those cells are the
    baseline's, measured (ce4142f: not measured, since the speculative cells failed)."""
    cfg = config()
    unusable = lambda i: "invalid" if i.load_value == 4.0 else "ok"  # noqa: E731
    sweep = bracketed(cfg, rate, lambda i: rate(i) * 1.01,
                      {"draft-k2": lambda i: rate(i) * 2.0, "draft-k4": lambda i: rate(i) * 1.5},
                      status={"draft-k2": unusable, "draft-k4": unusable})
    policy = verdict(sweep.analyse().mix, "draft-k-policy")
    at_c4 = [c for c in policy.cells if c.load_value == 4.0]
    assert at_c4 and all(c.k == 0 and c.measured for c in at_c4)


def test_7_the_canary_pairs_needs_a_noise_estimate_and_a_scored_set_and_limits_errors() -> None:
    from specfleet.contract import SLOSpec
    from specfleet_tasks.canary.context import CanaryLoad, standalone_context
    from specfleet_tasks.canary.run import _plan

    slo = SLOSpec(ttft_ms=1e9, itl_ms=1e9)
    plan = _plan("code", [], CanaryLoad(4, None, 8, 0, 16, 0.0), standalone_context(slo), "baseline", "c")
    assert plan.max_error_fraction < 1.0  # ce4142f: 1.0, a baseline replica failing most requests counted

    from specfleet.production.canary import (
        AcceptanceFigure,
        PairedClass,
        canary_family,
        canary_verdict,
        class_claims,
        compare_class,
    )
    from specfleet.stats.samples import CellSample
    from specfleet_tasks.canary.context import NO_SWEEP, no_noise

    cfg = config(classes=("code",), loads=(4,))
    sweep = Sweep(cfg)
    ident = CellIdentity(arm="canary", method="unknown", k=None, load_mode="concurrency", load_value=4.0,
                         prompt_class="code", sampling="canary", repeat=0)
    base = sweep.add(ident, 100.0, "canary:baseline", spread=0.05)
    cand = sweep.add(ident.model_copy(update={"repeat": 1}), 200.0, "canary:candidate", spread=0.05)
    paired = PairedClass("code", *(CellSample.from_records(c, sweep.records[c.key], slo) for c in (base, cand)))
    noise = no_noise(0.95, NO_SWEEP)
    family, claims = canary_family([paired], [], noise, slo, cfg.analysis)
    # paired: the same prompts in the same order at the same time, so the replicas differ by their
    # replica-to-replica noise alone; no request-level spread of either (ce4142f: requests resampled apart)
    faster = claims["code"]["faster"]
    assert sorted(faster.weights.values()) == [-1.0, 1.0]
    assert {family.runs[i].server for i in faster.weights} == {"canary:baseline", "canary:candidate"}
    results = family.decide()
    comparison, decided = class_claims(paired, results, claims["code"], slo, noise)
    assert comparison.qualified_tps_speedup is not None and comparison.qualified_tps_speedup.confidence is None
    assert comparison.qualified_tps_speedup.low is None  # no noise estimate: no interval at all
    none = AcceptanceFigure(value=None, source="none", requests=0)
    doubled = compare_class("code", comparison, decided, none, none, None, None, None, True)
    answer, reason = canary_verdict([doubled], noise_estimated=False)
    assert answer == "hold" and "no noise estimate" in reason  # ce4142f: promote on a zero floor
    unscored = compare_class("code", comparison, decided, none, none, None, None, None, False)
    assert canary_verdict([unscored], noise_estimated=True)[0] == "hold"


def test_8_a_missing_sample_rejects_seeds_are_independent_and_the_power_is_stated() -> None:
    stochastic = StochasticTestSpec(temperature=1.0, min_detectable_tv=0.3)
    cfg = config(loads=(4,))
    cfg = cfg.model_copy(update={"equivalence": cfg.equivalence.model_copy(update={"stochastic": stochastic})})
    sweep = bracketed(cfg, rate, lambda i: rate(i) * 1.01,
                      {"draft-k2": lambda i: rate(i) * 2.0, "draft-k4": lambda i: rate(i) * 2.0})
    greedy = {"p0": [1, 2, 3], "p1": [4, 5, 6]}
    probes = {arm: EquivalenceProbe(arm=arm, greedy=greedy, greedy_repeat=greedy if arm == "baseline" else None)
              for arm in ("baseline", "draft-k2", "draft-k4")}  # greedy only: the configured samples are missing
    decisions = sweep.analyse(probes).decisions
    assert {d.reason_code for d in decisions} == {"gate_not_run"}  # ce4142f: adopted without the test

    from specfleet.stats.equivalence import sample_seeds, stochastic_equivalence

    assert set(sample_seeds(0, "baseline", 64)).isdisjoint(sample_seeds(0, "draft-k2", 64))  # ce4142f: seed + i
    samples = {"p": [[i % 3, (i + 1) % 3] for i in range(40)]}
    result = stochastic_equivalence(samples, samples, min_detectable_tv=0.3)
    assert "at every prompt and position" in result.gate().detail
    assert result.power_one_shift is not None and result.power_one_shift < result.achieved_power


def test_9_no_baseline_tokens_is_no_adopt_and_fewer_than_three_classes_cannot_pass() -> None:
    cfg = config(classes=("code", "chat"), loads=(4,))
    sweep = bracketed(cfg, rate, lambda i: rate(i) * 1.01,
                      {"draft-k2": lambda i: rate(i) * 2.0, "draft-k4": lambda i: rate(i) * 2.0})
    analysis = sweep.analyse()
    assert all(d.verdict == "adopt" for d in analysis.decisions)
    check = next(c for c in verdict(analysis.mix, "draft-k2").checks if c.name == "prompt_classes")
    assert not check.passed and "fewer than the seed's 3" in check.detail  # ce4142f: "every class when fewer"

    tight = config(classes=("code",), loads=(4,))
    tight = tight.model_copy(update={"slo": tight.slo.model_copy(update={"ttft_ms": 20.0})})
    unqualified = Sweep(tight)
    unqualified.arm("baseline", rate, ttft_ms=50.0)  # every baseline request misses the TTFT SLO
    unqualified.arm("draft-k2", rate)
    unqualified.arm("draft-k4", rate)
    unqualified.arm("baseline", rate, phase="baseline_end", ttft_ms=50.0)
    decisions = unqualified.analyse().decisions
    assert {d.reason_code for d in decisions} == {"baseline_unqualified"}
    assert all(d.verdict == "reject" for d in decisions)  # ce4142f: baseline_unqualified was an adopt
