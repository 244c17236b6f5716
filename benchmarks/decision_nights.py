"""Deciding over nights calibrated (``decision_calibration.py --verdicts --nights``): SIMULATED
sequences of consecutive nightly sweeps, each decided as the product decides a continued sweep
(``analysis.nights``, ``specfleet.verdicts.sequential``).

A sequence has the nightly config's K looks (``DEFAULT_LOOKS`` where it sets none). Night k is a
fresh sweep of the planned design (new server lives) drawn from the truth; look k pools it with the
runs of the sequence's earlier nights, which its claims read as more runs of the same configurations
(``decision_verdicts.layout`` with ``nights=k``), decides every claim in one ``Family`` at
``LookPlan.confidence_at(k)``, and keeps each verdict an earlier look decided (``carried``). Per
look: the share of arms at the mix decided so far; over the sequence: the rate of any wrong adopt
and of any wrong reject of any claim.
"""

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from benchmarks.decision_verdicts import (
    TRUTHS,
    VERDICTS,
    Layout,
    NoiseTruth,
    Truth,
    decide,
    layout,
    simulate,
)
from specfleet.contract.checks import NightsSpec
from specfleet.verdicts.rule import Verdict
from specfleet.verdicts.sequential import LookPlan, carried

SHAPE = "nightly"
NIGHTS_TRUTHS = ("model, first night", "model, with history", "t3 tails, first night")
"""A sequence's noise history is fixed (other sweeps than its looks'); "first night": none."""
LOG_TAUS = {"-3 tau": -3.0, "at break-even": 0.0, "+1 tau": 1.0, "+2 tau": 2.0, "+3 tau": 3.0}
GOAL = 0.05
DEFAULT_LOOKS = NightsSpec(looks=5, spending="obrien_fleming")
"""The sequence tried where the nightly config decides each night alone."""


def looks_of(truth: Truth) -> tuple[LookPlan, list[Layout]]:
    """The plan of looks (the nightly config's ``analysis.nights``, else ``DEFAULT_LOOKS``) and the
    layout of each look (look k: k nights' runs)."""
    config = layout(SHAPE, truth.history).config
    nights = config.analysis.nights or DEFAULT_LOOKS
    plan = LookPlan(nights.looks, config.analysis.confidence, nights.spending)
    return plan, [layout(SHAPE, truth.history, k) for k in range(1, plan.max_looks + 1)]


def sequence(plan: LookPlan, looks: Sequence[Layout], truth: Truth, noise: NoiseTruth, theta: float,
             rng: np.random.Generator) -> list[dict[str, Verdict]]:
    """Every claim's verdict after each look of one sequence, earlier looks' decisions carried."""
    full = looks[-1]
    y = simulate(full, truth, noise, theta, rng)
    sequence_runs = plan.max_looks * full.night_runs
    verdicts: dict[str, Verdict] = {}
    out: list[dict[str, Verdict]] = []
    for k, lay in enumerate(looks, start=1):
        if verdicts and all(v != "inconclusive" for v in verdicts.values()):
            out.append(dict(verdicts))  # every claim decided: a further look changes nothing
            continue
        own = np.concatenate([y[:k * full.night_runs], y[sequence_runs:]])
        found = decide(lay, own, plan.confidence_at(k))
        verdicts = {key: carried(verdicts.get(key), now) for key, now in found.items()}
        out.append(dict(verdicts))
    return out


def run_nights(truth: Truth, noise: NoiseTruth, sequences: int, seed: int,
               log: Callable[[str], None]) -> dict[str, object]:
    """Every ratio of one truth: per look the mix's verdict shares so far, over the sequence the
    rates of any wrong adopt and any wrong reject."""
    plan, looks = looks_of(truth)
    mix = [key for key, kind, *_ in looks[0].claims if kind == "mix"]
    rng = np.random.default_rng([seed, plan.max_looks, len(looks[0].runs)])
    started = time.monotonic()
    ratios: dict[str, object] = {}
    for label, taus in LOG_TAUS.items():
        theta = taus * noise.tau
        shares = np.zeros((plan.max_looks, len(VERDICTS)))
        wrong_adopt = wrong_reject = 0
        for _ in range(sequences):
            found = sequence(plan, looks, truth, noise, theta, rng)
            for k, verdicts in enumerate(found):
                for key in mix:
                    shares[k, VERDICTS.index(verdicts[key])] += 1
            wrong_adopt += theta <= 0 and "adopt" in found[-1].values()
            wrong_reject += theta >= 0 and "reject" in found[-1].values()
        shares /= sequences * len(mix)
        ratios[label] = {
            "ratio": math.exp(theta),
            "looks": [{"look": k + 1, "confidence": plan.confidence_at(k + 1),
                       **{v: float(shares[k, j]) for j, v in enumerate(VERDICTS)}} for k in range(plan.max_looks)],
            "wrong_adopt": wrong_adopt / sequences if theta <= 0 else None,
            "wrong_reject": wrong_reject / sequences if theta >= 0 else None}
    log(f"{SHAPE} nights / {truth.name}: {sequences} sequences of {plan.max_looks} looks x {len(ratios)} ratios "
        f"in {time.monotonic() - started:.0f} s")
    return {"shape": SHAPE, "truth": truth.__dict__, "looks": plan.max_looks, "spending": plan.spending,
            "sequences": sequences, "claims": len(looks[0].claims), "ratios": ratios}


def nights_truths(names: str | None) -> list[Truth]:
    """The truths simulated over nights, or those of ``names`` (';'-separated) among them."""
    chosen = [t for t in TRUTHS if t.name in NIGHTS_TRUTHS]
    return [t for t in chosen if names is None or t.name in names.split(";")]


def nights_goals(settings: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """Over every truth and ratio, the worst rate of any wrong adopt and of any wrong reject."""
    out: list[dict[str, object]] = []
    for key, words in (("wrong_adopt", "adopting"), ("wrong_reject", "rejecting")):
        worst = max((r[key], s["truth"]["name"], label)  # type: ignore[index]
                    for s in settings for label, r in s["ratios"].items()  # type: ignore[attr-defined]
                    if r[key] is not None)
        out.append({"goal": f"over nights, every truth and ratio: sequences wrongly {words} anything <= 5 %",
                    "figure": worst[0], "where": worst[1:], "met": worst[0] <= GOAL})
    return out
