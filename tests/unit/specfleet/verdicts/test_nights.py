"""Deciding over nights (``analysis.nights``): the looks of a sequence one after another, a verdict
decided at look 1 kept at look 2 whatever look 2's interval says, the earlier looks' runs pooled,
and a simulation of whole sequences of looks, decided by the product's rule at each look's
confidence, whose wrong adopts and wrong rejects stay within the stated rate where deciding every
look at the plain confidence does not."""

import numpy as np
import pytest

from specfleet.contract.checks import NightsSpec
from specfleet.stats.runs import RunValue
from specfleet.stats.variance import estimate_noise
from specfleet.verdicts.nights import Nights, settled
from specfleet.verdicts.rule import Claim, Family
from specfleet.verdicts.sequential import Look, LookPlan, Verdict, carried, next_look
from tests.support.synthetic_sweep import bracketed, config


def test_the_looks_of_a_sequence_follow_one_another_then_a_new_one_starts() -> None:
    nights = NightsSpec(looks=3)
    plan = LookPlan(3, 0.95, "obrien_fleming")
    first = next_look(nights, 0.95, None)
    second = next_look(nights, 0.95, ("night-1", first))
    third = next_look(nights, 0.95, ("night-2", second))
    assert [(x.look, x.of) for x in (first, second, third)] == [(1, 3), (2, 3), (3, 3)]
    assert [x.confidence for x in (first, second, third)] == [plan.confidence_at(k) for k in (1, 2, 3)]
    assert third.earlier_sweeps == ["night-1", "night-2"]
    assert next_look(nights, 0.95, ("night-3", third)) == first  # after the last look: look 1 again
    assert next_look(nights, 0.95, ("night-0", None)) == first  # after a sweep decided alone
    assert next_look(NightsSpec(looks=3, spending="bonferroni"), 0.95, ("night-1", first)).look == 1
    assert second.text == "look 2 of 3 (obrien_fleming spending), decided at confidence 0.9843"
    assert first.text.startswith("look 1 of 3 (obrien_fleming spending), decided at confidence 1 - 0.0")


def test_a_claim_decided_at_look_1_stays_decided_at_look_2() -> None:
    """Night 1: draft k2 triples the baseline's rate and is adopted at the mix. Night 2 measures it
    below the baseline: look 2 alone (its runs pooled with night 1's) cannot adopt it, and yet it
    keeps look 1's adopt, saying from which sweep."""
    nights = NightsSpec(looks=2, spending="bonferroni")
    cfg = config()
    cfg = cfg.model_copy(update={"analysis": cfg.analysis.model_copy(update={"nights": nights})})
    one = bracketed(cfg, lambda i: 100.0, lambda i: 103.0, {"draft-k2": lambda i: 300.0, "draft-k4": lambda i: 95.0},
                    seed=1)
    look1 = next_look(nights, 0.95, None)
    first = one.analyse(nights=Nights(look1))
    assert first.look == look1 and {m.name: m.verdict for m in first.mix}["draft-k2"] == "adopt"
    two = bracketed(cfg, lambda i: 100.0, lambda i: 98.0, {"draft-k2": lambda i: 90.0, "draft-k4": lambda i: 300.0},
                    seed=2)
    look2 = next_look(nights, 0.95, ("night-1", look1))
    alone = two.analyse(nights=Nights(look2, one.look_runs("night-1")))
    kept = two.analyse(nights=Nights(look2, one.look_runs("night-1"), first.decisions, first.mix))
    assert {m.name: m.verdict for m in alone.mix}["draft-k2"] != "adopt"
    k2 = next(m for m in kept.mix if m.name == "draft-k2")
    assert k2.verdict == "adopt" and k2.adoptable and k2.carried is not None
    assert (k2.carried.sweep, k2.carried.look) == ("night-1", 1)
    assert "ADOPT (adopt carried from look 1 (sweep night-1))" in k2.headline
    assert type(k2).model_validate_json(k2.model_dump_json()).verdict == "adopt"  # summary.json keeps it
    assert all(m.carried is None for m in kept.mix if m.name != "draft-k2")  # inconclusive at look 1: decided now
    # the earlier look's runs are more runs of the same configurations: each cell compares twice as many
    assert {d.comparison.baseline_runs for d in kept.decisions if d.comparison} == {4}
    assert {d.comparison.baseline_runs for d in first.decisions if d.comparison} == {2}


def test_decided_cells_are_the_ones_a_budget_measures_last() -> None:
    cfg = config(classes=("code",), loads=(1,))
    sweep = bracketed(cfg, lambda i: 100.0, lambda i: 101.0, {"draft-k2": lambda i: 100.0, "draft-k4": lambda i: 100.0},
                      status={"draft-k4": lambda i: "invalid"})
    decisions = sweep.analyse().decisions
    assert {d.slice.arm: d.verdict for d in decisions} == {"draft-k2": "inconclusive", "draft-k4": "reject"}
    assert settled(decisions) == {("draft-k4", "code", "concurrency", 1.0, "greedy")}


CONFIGS = [("code", "concurrency", 1.0, "greedy"), ("chat", "concurrency", 1.0, "greedy")]
BREAK_EVEN = 1.25
"""A claim's break-even speedup (saving a whole replica), so that a truth at 1.0 is one the rule
must not adopt and may reject."""


def _night(rng: np.random.Generator, night: int, log_ratio: float) -> list[RunValue]:
    """One night's runs: the baseline opening and closing on two server lives, the candidate at the
    true ``log_ratio`` on a third, at two configurations; each server life named after its night, as
    ``sequence_runs`` names an earlier look's."""
    out = []
    for arm, lives, shift in (("baseline", ("open", "close"), 0.0), ("draft", ("arm",), log_ratio)):
        for life in lives:
            server = f"night-{night}/{arm}/{life}"
            offset = rng.normal(0.0, 0.05)
            out += [RunValue("qualified_tokens_per_s", f"{server}/{c[0]}", arm, c, server,
                             shift + offset + rng.normal(0.0, 0.08)) for c in CONFIGS]
    return out


def _sequence(rng: np.random.Generator, log_ratio: float, looks: list[Look] | None,
              count: int) -> tuple[bool, bool]:
    """``count`` looks of one sequence at the true ``log_ratio`` (``looks``: their confidences, None: the
    plain 0.95 at every look): whether the claim was ever adopted, ever rejected."""
    runs: list[RunValue] = []
    verdict: Verdict | None = None
    for night in range(count):
        runs += _night(rng, night, log_ratio)
        confidence = looks[night].confidence if looks is not None else 0.95
        family = Family(runs, {"qualified_tokens_per_s": estimate_noise(runs, "qualified_tokens_per_s", confidence)},
                        confidence)
        weights: dict[int, float] = {}
        for arm, sign in (("draft", 1.0), ("baseline", -1.0)):
            members = [i for i, r in enumerate(runs) if r.arm == arm]
            weights |= {i: sign / len(members) for i in members}
        log = sum(runs[i].log_value * w for i, w in weights.items())
        family.add(Claim("mix", "mix", log, weights, break_even=BREAK_EVEN))
        verdict = carried(verdict, family.decide()["mix"].verdict)
    return verdict == "adopt", verdict == "reject"


@pytest.mark.slow  # a calibration simulation: make test runs it, make test-unit leaves it out
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # a first look's bound at 1 - 1e-5 on few df
def test_a_sequence_of_looks_keeps_its_error_rates_at_and_below_the_break_even() -> None:
    """120 sequences of 5 looks per truth (each look a whole family decision at the confidence
    ``next_look`` gives it): the rate of any wrong adopt and of any wrong reject at the stated 0.05
    passes with 2.5 binomial standard errors to spare (0.0998); a plan that tripled its error rate
    fails it 19 times in 20. At the break-even both verdicts are wrong; at a true 1.0 an adopt is.
    Deciding every look at the plain 0.95 at the break-even errs past the limit: the test can fail.
    Seen with this seed: 0.025 wrong adopts and 0.033 wrong rejects at the break-even, 0 wrong adopts
    at 1.0; at the plain confidence 0.133 and 0.117."""
    count, sims = 5, 120
    nights = NightsSpec(looks=count)
    looks = [next_look(nights, 0.95, None)]
    for night in range(1, count):
        looks.append(next_look(nights, 0.95, (f"night-{night}", looks[-1])))
    rng = np.random.default_rng(11)
    limit = 0.05 + 2.5 * np.sqrt(0.05 * 0.95 / sims)
    at_break_even = np.array([_sequence(rng, np.log(BREAK_EVEN), looks, count) for _ in range(sims)])
    at_one = np.array([_sequence(rng, 0.0, looks, count) for _ in range(sims)])
    assert at_break_even[:, 0].mean() <= limit and at_break_even[:, 1].mean() <= limit, at_break_even.mean(axis=0)
    assert at_one[:, 0].mean() <= limit, at_one.mean(axis=0)
    naive = np.array([_sequence(rng, np.log(BREAK_EVEN), None, count) for _ in range(sims)])
    assert naive.mean(axis=0).max() > limit, naive.mean(axis=0)
    assert naive.any(axis=1).mean() > at_break_even.any(axis=1).mean() + 0.04, (naive.mean(axis=0),
                                                                               at_break_even.mean(axis=0))
