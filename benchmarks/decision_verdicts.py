"""The three verdicts calibrated (``decision_calibration.py --verdicts``): how often a sweep adopts,
rejects or leaves a claim inconclusive at known true speed ratios, and how often it is wrong.

SIMULATED sweeps, decided by specfleet's own rule: the planned design of a config (``demo``:
configs/demo-cpu.yaml; ``nightly``: configs/llama70b-h200-nightly.yaml) is laid out as run values
on their server lives as ``specfleet.planning.power`` lays it out (with the baseline repeats of
``analysis.noise_history`` earlier sweeps, or none on a first night); each sweep draws every run
value from a truth, estimates the noise from its repeated runs as a sweep does
(``specfleet.stats.variance``), and decides every claim (each speculative arm at every cell, on
each class and at the traffic mix) in one ``Family`` (``specfleet.verdicts.rule``), whose verdicts
it counts: ``adopt`` where the corrected lower bound clears the break-even (1 here), ``reject``
where the corrected upper bound lies below it, ``inconclusive`` otherwise. A claim's estimate is the linear
combination of run values the rule's standard error is made for (the product's harmonic mix is
that to first order); the gates pass. Every speculative arm has the same true ratio at every cell.

Truths: the noise of stored sweeps (their pooled estimate, or the stated figure where none is on
this machine) and, outside the rule's own model, a server part of 25-75 % of it on a first night,
a server-age drift (each life slows through its cells at a slope of its own), t3 tails in place of normal ones, and
speculative arms twice as noisy as the baseline. Wrong adopt: an adopt at a true ratio at or below
the break-even; wrong reject: a reject at or above it.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from specfleet.contract import SweepConfig
from specfleet.planning.power import (
    METRIC,
    NoiseBasis,
    design_runs,
    history_runs,
    plan_power,
    planned_claims,
)
from specfleet.stats.runs import ConfigKey, RunValue
from specfleet.stats.variance import NoiseDesign, RunNoise
from specfleet.verdicts.rule import Claim, ClaimKind, Family, Verdict
from specfleet_tasks.plan.power import planned_servers
from specfleet_tasks.store.config import load_sweep_config

FloatArray = npt.NDArray[np.float64]
ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"demo": ROOT / "configs" / "demo-cpu.yaml", "nightly": ROOT / "configs" / "llama70b-h200-nightly.yaml"}
STATED_RUN_VAR = 0.0105
STATED_SOURCE = ("STATED (no stored sweep on this machine): the 12 stored sweeps docs/benchmarks.md's decision "
                 "calibration pooled (9 demos, 3 integration sweeps; 58 runs in 29 repeated groups on 24 server "
                 "lives): tokens/s run variance 0.0105, server variance estimated below 0 and taken as 0")
KINDS = ("cell", "class", "mix")
VERDICTS = ("adopt", "reject", "inconclusive")


@dataclass(frozen=True)
class Truth:
    """What the simulated sweeps are drawn from."""

    name: str
    server_share: float | None = None
    """The server part as this share of the total variance; None: the noise source's own split."""
    tails: str = "normal"
    drift_tau: float = 0.0
    """Server age: a life's rate falls from its first cell to its last by a slope of its own, drawn
    at this many tau (sd half as much): a shared slope would cancel, every life measuring its cells
    in the same order."""
    arm_noise: float = 1.0
    """Speculative arms' variances as a multiple of the baseline's."""
    history: bool = False


@dataclass(frozen=True)
class NoiseTruth:
    server_var: float
    run_var: float
    source: str

    @property
    def tau(self) -> float:
        return math.sqrt(self.server_var + self.run_var)


@dataclass
class Layout:
    """A shape's planned runs and claims, fixed across its sweeps."""

    config: SweepConfig
    runs: list[RunValue]
    claims: list[tuple[str, ClaimKind, str, dict[int, float]]]
    """(key, kind, arm, weights)."""
    weights: FloatArray
    servers: npt.NDArray[np.intp]
    candidate: npt.NDArray[np.bool_]
    age: FloatArray
    """Each run's place in its server life, 0 for the first cell to 1 for the last."""
    design: NoiseDesign
    cov_terms: tuple[FloatArray, FloatArray, FloatArray]
    """The noise estimate's sampling covariance = s^2 A + s e B + e^2 C (quadratic in the parts)."""
    history: int
    night_runs: int
    """The runs of one night (the first ``nights * night_runs`` runs are the sequence's)."""


def layout(shape: str, history: bool, nights: int = 1) -> Layout:
    """``nights`` > 1: a look of a sequence (``analysis.nights``), the runs of its ``nights - 1``
    earlier looks first (each night's server lives its own, as ``sequence_runs`` names them) and
    read by its claims, the noise history last."""
    config = load_sweep_config(SHAPES[shape])
    servers = planned_servers(config)
    runs: list[RunValue] = []
    index: dict[tuple[str, ConfigKey], list[int]] = {}
    own: list[RunValue] = []
    for night in range(nights):
        own, where = design_runs(servers)
        for key, members in where.items():
            index.setdefault(key, []).extend(len(runs) + i for i in members)
        runs += [r if night == nights - 1 else replace(r, label=f"night-{night}: {r.label}",
                                                       server=f"night-{night}/{r.server}") for r in own]
    baseline = next(arm.arm for arm, *_ in servers if arm.is_baseline)
    sweeps = config.analysis.noise_history if history else 0
    runs += history_runs(own, baseline, sweeps)
    claims = [(key, kind, arm, w) for key, kind, arm, _, _, _, w in planned_claims(config, servers, index, baseline)]
    weights = np.zeros((len(claims), len(runs)))
    for j, (*_, w) in enumerate(claims):
        for i, x in w.items():
            weights[j, i] = x
    names = {s: n for n, s in enumerate(dict.fromkeys(r.server for r in runs))}
    age = np.zeros(len(runs))
    for server in names:
        members = [i for i, r in enumerate(runs) if r.server == server]
        age[members] = np.linspace(0.0, 1.0, len(members)) if len(members) > 1 else 0.0
    design = NoiseDesign.of(runs)
    a, c = design.covariance(np.array([1.0, 0.0])), design.covariance(np.array([0.0, 1.0]))
    b = design.covariance(np.array([1.0, 1.0])) - a - c
    return Layout(config, runs, claims, weights, np.array([names[r.server] for r in runs]),
                  np.array([r.arm != baseline and not r.arm.startswith("earlier-") for r in runs]), age, design,
                  (a, b, c), sweeps, len(own))


def _draw(rng: np.random.Generator, tails: str, size: int) -> FloatArray:
    """Unit-variance draws: normal, or t with 3 degrees of freedom scaled to variance 1."""
    if tails == "t3":
        return np.asarray(rng.standard_t(3, size) / math.sqrt(3.0), dtype=np.float64)
    return rng.normal(0.0, 1.0, size)


def simulate(lay: Layout, truth: Truth, noise: NoiseTruth, theta: float, rng: np.random.Generator) -> FloatArray:
    """One sweep's run values (log scale) under ``truth``."""
    total = noise.server_var + noise.run_var
    share = noise.server_var / total if truth.server_share is None else truth.server_share
    scale = np.where(lay.candidate, math.sqrt(truth.arm_noise), 1.0)
    server_scale = np.zeros(int(lay.servers.max()) + 1)
    server_scale[lay.servers] = scale
    u = _draw(rng, truth.tails, len(server_scale)) * math.sqrt(share * total) * server_scale
    e = _draw(rng, truth.tails, len(lay.runs)) * math.sqrt((1 - share) * total) * scale
    slope = rng.normal(truth.drift_tau, truth.drift_tau / 2.0, len(server_scale)) * noise.tau
    y: FloatArray = theta * lay.candidate + u[lay.servers] + e - slope[lay.servers] * lay.age
    return y


def sweep_noise(lay: Layout, y: FloatArray, confidence: float) -> RunNoise:
    """The noise a sweep estimates from its repeated runs: ``estimate_noise`` with the design's
    quadratic forms computed once per layout."""
    parts = lay.design.estimate(y[lay.design.rows])
    s, e = np.maximum(np.nan_to_num(parts), 0.0)
    a, b, c = lay.cov_terms
    cov = s * s * a + s * e * b + e * e * c
    total = max(float(parts.sum()), 0.0)
    return RunNoise(metric=METRIC, identified=lay.design.identified, server_var=float(parts[0]),
                    run_var=float(parts[1]), covariance=cov.tolist(), runs=len(lay.design.rows),
                    groups=lay.design.groups, servers=lay.design.servers.shape[1], relative_sd=math.sqrt(total),
                    relative_sd_low=None, relative_sd_high=None, confidence=confidence, source="simulated")


def decide(lay: Layout, y: FloatArray, confidence: float | None = None) -> dict[str, Verdict]:
    """Every claim's verdict, at ``confidence`` (None: the config's)."""
    analysis = lay.config.analysis
    level = analysis.confidence if confidence is None else confidence
    runs = [RunValue(r.metric, r.label, r.arm, r.config, r.server, float(v)) for r, v in zip(lay.runs, y, strict=True)]
    family = Family(runs, {METRIC: sweep_noise(lay, y, level)}, level, analysis.error_control, analysis.seed)
    estimates = lay.weights @ y
    for (key, kind, _, w), estimate in zip(lay.claims, estimates, strict=True):
        family.add(Claim(key, kind, float(estimate), w))
    return {key: result.verdict for key, result in family.decide().items()}


@dataclass
class Counts:
    """Per claim kind, verdict counts; per sweep, wrong adopts and wrong rejects."""

    sweeps: int = 0
    verdicts: dict[str, dict[str, int]] = field(default_factory=lambda: {k: dict.fromkeys(VERDICTS, 0) for k in KINDS})
    wrong_adopt: int = 0
    wrong_reject: int = 0

    def add(self, lay: Layout, found: dict[str, Verdict], theta: float) -> None:
        self.sweeps += 1
        for key, kind, *_ in lay.claims:
            self.verdicts[kind][found[key]] += 1
        self.wrong_adopt += theta <= 0 and any(v == "adopt" for v in found.values())
        self.wrong_reject += theta >= 0 and any(v == "reject" for v in found.values())

    def shares(self) -> dict[str, dict[str, float]]:
        return {k: {v: n / max(1, sum(c.values())) for v, n in c.items()} for k, c in self.verdicts.items()}

    def figures(self, theta: float) -> dict[str, object]:
        return {"sweeps": self.sweeps, "shares": self.shares(),
                "wrong_adopt": self.wrong_adopt / self.sweeps if theta <= 0 else None,
                "wrong_reject": self.wrong_reject / self.sweeps if theta >= 0 else None}


def ratios(tau: float, planned: tuple[float, float]) -> dict[str, float]:
    """The true speed ratios tried: 0.5x, 3 tau below the break-even, at it, 1-3 tau above, 2x, and
    the plan's minimum detectable ratios at 80 % power (adopt and reject)."""
    return {"0.5x": 0.5, "-3 tau": math.exp(-3 * tau), "at break-even": 1.0, "+1 tau": math.exp(tau),
            "+2 tau": math.exp(2 * tau), "+3 tau": math.exp(3 * tau), "2x": 2.0,
            "planned adopt MDS": planned[0], "planned reject MDS": planned[1]}


def run_setting(shape: str, truth: Truth, noise: NoiseTruth, sweeps: int, seed: int,
                log: Callable[[str], None]) -> dict[str, object]:
    """Every ratio of one shape and truth: verdict shares, wrong rates and the planned power."""
    lay = layout(shape, truth.history)
    total = noise.server_var + noise.run_var
    share = noise.server_var / total if truth.server_share is None else truth.server_share
    basis = NoiseBasis(share * total, (1 - share) * total, noise.source, False)
    plan = plan_power(lay.config, planned_servers(lay.config), basis, lay.history)
    mix = [c for c in plan.claims if c.kind == "mix"]
    adopt_mds = max(1 / (1 - c.adopt_saving) for c in mix if c.adopt_saving is not None)
    reject_mds = min(1 / (1 - c.reject_saving) for c in mix if c.reject_saving is not None)
    rng = np.random.default_rng([seed, len(lay.runs)])
    started = time.monotonic()
    out: dict[str, object] = {}
    for label, ratio in ratios(noise.tau, (adopt_mds, reject_mds)).items():
        counts = Counts()
        theta = math.log(ratio)
        for _ in range(sweeps):
            counts.add(lay, decide(lay, simulate(lay, truth, noise, theta, rng)), theta)
        out[label] = {"ratio": ratio, **counts.figures(theta)}
    log(f"{shape} / {truth.name}: {sweeps} sweeps x {len(out)} ratios in {time.monotonic() - started:.0f} s")
    pooled = {key: [r[key] for r in out.values() if r[key] is not None]  # type: ignore[index]
              for key in ("wrong_adopt", "wrong_reject")}
    return {"shape": shape, "truth": truth.__dict__, "history_sweeps": lay.history, "claims": len(lay.claims),
            "planned": {"adopt_speedup": adopt_mds, "reject_speedup": reject_mds,
                        "adopt_saving": 1 - 1 / adopt_mds, "reject_saving": 1 - 1 / reject_mds},
            "ratios": out,
            "pooled": {key: {"rate": float(np.mean(v)), "sweeps": sweeps * len(v)} for key, v in pooled.items()}}


TRUTHS = (Truth("model, first night"), Truth("model, with history", history=True),
          Truth("server 25 %, first night", server_share=0.25), Truth("server 50 %, first night", server_share=0.5),
          Truth("server 75 %, first night", server_share=0.75),
          Truth("server 50 %, with history", server_share=0.5, history=True),
          Truth("server-age drift 1 tau, first night", drift_tau=1.0),
          Truth("t3 tails, first night", tails="t3"), Truth("arms twice as noisy, first night", arm_noise=2.0))
NIGHTLY_TRUTHS = ("model, first night", "model, with history", "server 50 %, first night",
                  "server 50 %, with history", "t3 tails, first night")


def goals(settings: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """The goals, each with the figure it reads and whether it is met."""
    out: list[dict[str, object]] = []
    worst_adopt = max((r["wrong_adopt"], s["shape"], s["truth"]["name"], label)  # type: ignore[index]
                      for s in settings for label, r in s["ratios"].items()  # type: ignore[attr-defined]
                      if r["wrong_adopt"] is not None)
    worst_reject = max((r["wrong_reject"], s["shape"], s["truth"]["name"], label)  # type: ignore[index]
                       for s in settings for label, r in s["ratios"].items()  # type: ignore[attr-defined]
                       if r["wrong_reject"] is not None)
    out.append({"goal": "every setting and ratio: sweeps wrongly adopting anything <= 5 %", "figure": worst_adopt[0],
                "where": worst_adopt[1:], "met": worst_adopt[0] <= 0.05})
    out.append({"goal": "every setting and ratio: sweeps wrongly rejecting anything <= 5 %", "figure": worst_reject[0],
                "where": worst_reject[1:], "met": worst_reject[0] <= 0.05})

    def mix(shape: str, truth: str, label: str, verdict_name: str) -> float | None:
        for s in settings:
            if s["shape"] == shape and s["truth"]["name"] == truth:  # type: ignore[index]
                return float(s["ratios"][label]["shares"]["mix"][verdict_name])  # type: ignore[index]
        return None

    shapes = {s["shape"] for s in settings}
    for label, v in (("2x", "adopt"), ("0.5x", "reject")) if "demo" in shapes else ():
        found = mix("demo", "model, first night", label, v)
        out.append({"goal": f"demo, first night: a true {label} arm at the mix {v}ed >= 80 %", "figure": found,
                    "met": found is not None and found >= 0.8})
    for truth in ("model, first night", "model, with history") if "nightly" in shapes else ():
        for label in ("+3 tau", "-3 tau"):
            adopt, reject = mix("nightly", truth, label, "adopt"), mix("nightly", truth, label, "reject")
            found = None if adopt is None or reject is None else adopt + reject
            out.append({"goal": f"nightly, {truth}: arms at the mix decided at {label} >= 80 %", "figure": found,
                        "met": found is not None and found >= 0.8})
    return out
