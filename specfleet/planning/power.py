"""Power before paying: the minimum detectable saving of every claim a planned sweep will decide.

The planned design is laid out as run values on their server lives (one per planned cell, every
value 0: a claim's standard error depends on its weights and on the noise, never on the run
values), with the baseline's repeated runs of ``analysis.noise_history`` earlier sweeps beside it
where that many are recorded. The claims a sweep decides (each speculative arm at every cell, on
each prompt class alone and at the traffic mix) go into one ``Family``, the same rule the sweep
runs, and each claim's standard error, degrees of freedom and corrected critical values give its
minimum detectable saving (``specfleet.verdicts.power``).

What the plan cannot know yet, and assumes (said in its notes):

- the noise: this machine's recorded noise for the same models and engine (pooled over the
  sweeps that recorded it), else a stated prior;
- the rates: a claim over several cells weights them by their token shares of the traffic mix
  (the harmonic mean's gradient when every cell's baseline runs at the same rate);
- the break-even: 1 (whole-replica rounding, which raises it, is the sweep's to apply);
- the k policies' claims are left out of the family: the cells' critical values (the detail
  tier) read a little low, the verdicts' (the mix and the classes) are the sweep's own.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig
from specfleet.contract.base import RecordModel
from specfleet.errors import InputError
from specfleet.stats.runs import ConfigKey, Metric, RunValue, config_key
from specfleet.stats.variance import NoiseDesign, RunNoise
from specfleet.verdicts.power import POWER, Detectable, detectable_of
from specfleet.verdicts.rule import Claim, ClaimKind, Family
from specfleet.verdicts.traffic_mix import cell_token_shares, effective_mix

METRIC: Metric = "qualified_tokens_per_s"
PRIOR_TAU = 0.10
PRIOR_SERVER_SHARE = 0.25
PRIOR_SOURCE = (f"PRIOR, nothing recorded on this machine for these models and engine: noise floor "
                f"{PRIOR_TAU:.0%} (the order of the stored demo sweeps'), a quarter of its variance server to server")
PlannedServer = tuple[ArmPlan, str, int, Sequence[CellIdentity]]
PlannedClaim = tuple[str, ClaimKind, str, str, str | None, float | None, dict[int, float]]
"""(key, kind, arm, sampling, prompt class, load, weights over the runs)."""
"""One planned server life: its arm, phase, replica and the cells it measures in order."""


class RecordedNoise(RecordModel):
    """One finished sweep's run-to-run noise of SLO-qualified tokens/s, as this machine recorded it."""

    sweep: str
    config_name: str
    server_var: float
    run_var: float
    runs: int = Field(description="Runs in repeated groups the estimate rests on: its weight when pooled.")
    requests_per_cell: int


@dataclass(frozen=True)
class NoiseBasis:
    """The noise a plan assumes: its two variances (log scale) and where they come from."""

    server_var: float
    run_var: float
    source: str
    prior: bool
    requests_per_cell: int | None = None
    """The requests per cell the noise was measured at (None for the prior)."""

    @property
    def tau(self) -> float:
        return float(np.sqrt(self.server_var + self.run_var))

    def at_requests(self, requests_per_cell: int) -> "NoiseBasis":
        """The run part scaled to another number of requests per cell as 1 / requests (ASSUMED: as
        if the run part were all request-level spread, an upper bound on what more requests buy)."""
        if self.requests_per_cell is None or requests_per_cell == self.requests_per_cell:
            return self
        scale = self.requests_per_cell / requests_per_cell
        return NoiseBasis(self.server_var, self.run_var * scale, self.source, self.prior, requests_per_cell)


def noise_basis(recorded: Sequence[RecordedNoise], requests_per_cell: int) -> NoiseBasis:
    """Recorded noise pooled (each sweep's unbiased parts weighted by its repeated runs; a negative
    pooled part taken as 0), or the stated prior where nothing is recorded (taken as measured at
    ``requests_per_cell``)."""
    if not recorded:
        total = PRIOR_TAU**2
        return NoiseBasis(PRIOR_SERVER_SHARE * total, (1 - PRIOR_SERVER_SHARE) * total, PRIOR_SOURCE, True,
                          requests_per_cell)
    weights = np.array([r.runs for r in recorded], dtype=np.float64)
    server = max(float(np.average([r.server_var for r in recorded], weights=weights)), 0.0)
    run = max(float(np.average([r.run_var for r in recorded], weights=weights)), 0.0)
    per_cell = {r.requests_per_cell for r in recorded}
    measured_at = per_cell.pop() if len(per_cell) == 1 else None
    source = (f"recorded on this machine for these models and engine: {len(recorded)} finished sweeps "
              f"({int(weights.sum())} repeated runs; newest {recorded[-1].sweep})")
    basis = NoiseBasis(server, run, source, False, measured_at)
    return basis.at_requests(requests_per_cell) if measured_at is not None else basis


class ClaimPower(RecordModel):
    """One planned claim's power: the true savings it adopts and rejects at ``power``."""

    kind: ClaimKind
    arm: str
    sampling: str
    prompt_class: str | None = Field(description="None for a claim at the traffic mix.")
    load: float | None = Field(description="Set for a cell's claim only.")
    adopt_saving: float | None = Field(
        description="Minimum detectable saving: the smallest true saving (share of cost, 1 - 1/speedup) adopted "
        "with probability ``power``; None where the design gives the claim no interval.")
    reject_saving: float | None = Field(
        description="The largest true saving (negative: a loss) rejected with probability ``power``.")
    se: float | None = Field(description="Standard error of the log speedup (the design's, at the noise).")
    df: float | None
    why_none: str | None = None


class PowerPlan(RecordModel):
    """Every planned claim's minimum detectable saving: PREDICTED from the design and the noise."""

    predicted: bool = True
    power: float
    confidence: float
    noise_source: str
    noise_prior: bool = Field(description="True: the noise is the stated prior, nothing recorded here.")
    tau: float = Field(description="The noise floor assumed (relative spread of one window on another server).")
    history_sweeps: int = Field(description="Earlier sweeps' baselines pooled into the noise (noise_history), "
                                "as many as are recorded, at most the config's.")
    repeats: int
    requests_per_cell: int
    baseline_server_lives: int = Field(description="Every baseline server life of the design, opening and closing.")
    notes: list[str]
    claims: list[ClaimPower]

    def worst(self, kind: ClaimKind) -> float | None:
        """The largest minimum detectable saving among claims of ``kind`` (None: one has no interval)."""
        found = [c.adopt_saving for c in self.claims if c.kind == kind]
        if not found or any(f is None for f in found):
            return None
        return max(f for f in found if f is not None)


NOTES = ("the rates are not known before the sweep: a claim over several cells weights them by their token shares",
         "break-even 1: whole-replica rounding raises it at the sweep's demand",
         "the k policies' claims are left out of the family: cells' critical values read a little low")


def plan_power(config: SweepConfig, servers: Sequence[PlannedServer], basis: NoiseBasis, history_sweeps: int,
               power: float = POWER) -> PowerPlan:
    """The minimum detectable saving of every claim the planned ``servers`` let the sweep decide."""
    runs, index = design_runs(servers)
    baseline = next(arm.arm for arm, *_ in servers if arm.is_baseline)
    runs += history_runs(runs, baseline, history_sweeps)
    noise = planned_noise(runs, basis, config.analysis.confidence)
    family = Family(runs, {METRIC: noise}, config.analysis.confidence, config.analysis.error_control,
                    config.analysis.seed)
    described: dict[str, tuple[ClaimKind, str, str, str | None, float | None]] = {}
    for key, kind, arm, sampling, cls, load, weights in planned_claims(config, servers, index, baseline):
        family.add(Claim(key, kind, 0.0, weights))
        described[key] = (kind, arm, sampling, cls, load)
    results = family.decide()
    claims = []
    for key, (kind, arm, sampling, cls, load) in described.items():
        found = detectable_of(results[key], power)
        claims.append(_claim_power(kind, arm, sampling, cls, load, found, results[key].marginal.df, noise))
    lives = sum(1 for arm, *_ in servers if arm.is_baseline)
    return PowerPlan(power=power, confidence=config.analysis.confidence, noise_source=basis.source,
                     noise_prior=basis.prior, tau=basis.tau, history_sweeps=history_sweeps,
                     repeats=config.load.repeats, requests_per_cell=config.load.requests_per_cell,
                     baseline_server_lives=lives, notes=list(NOTES), claims=claims)


def planned_noise(runs: Sequence[RunValue], basis: NoiseBasis, confidence: float) -> RunNoise:
    """The noise the sweep will estimate from the design's repeated runs, at its expected value: the
    assumed parts, with the sampling covariance the design gives them (its degrees of freedom)."""
    design = NoiseDesign.of(runs)
    if design.identified in ("none", "run_only"):
        why = ("no configuration is measured twice" if design.identified == "none" else
               "repeats on one server only, nothing says how much another server differs")
        return RunNoise(metric=METRIC, identified=design.identified, server_var=None, run_var=None, runs=0,
                        groups=0, servers=0, relative_sd=None, relative_sd_low=None, relative_sd_high=None,
                        confidence=confidence, source=f"the planned design: {why}")
    parts = np.array([basis.server_var, basis.run_var])
    if design.identified == "total":  # the sweep charges the sum to the server part
        parts = np.array([parts.sum(), 0.0])
    cov = design.covariance(parts)
    return RunNoise(metric=METRIC, identified=design.identified, server_var=float(parts[0]),
                    run_var=float(parts[1]), covariance=cov.tolist(), runs=len(design.rows), groups=design.groups,
                    servers=design.servers.shape[1], relative_sd=basis.tau, relative_sd_low=None,
                    relative_sd_high=None, confidence=confidence, source=f"planned ({basis.source})")


def _lives(servers: Sequence[PlannedServer]) -> list[str]:
    return [f"{arm.arm}/{phase}/{replica}" for arm, phase, replica, _ in servers]


def design_runs(servers: Sequence[PlannedServer]) -> tuple[list[RunValue], dict[tuple[str, ConfigKey], list[int]]]:
    """One placeholder run per planned cell on its server life, and where each (arm, configuration)
    has its runs."""
    runs: list[RunValue] = []
    index: dict[tuple[str, ConfigKey], list[int]] = {}
    for (arm, _, _, cells), life in zip(servers, _lives(servers), strict=True):
        for ident in cells:
            key = config_key(ident)
            index.setdefault((arm.arm, key), []).append(len(runs))
            runs.append(RunValue(METRIC, ident.label, arm.arm, key, life, 0.0))
    return runs, index


def history_runs(runs: Sequence[RunValue], baseline: str, sweeps: int) -> list[RunValue]:
    """The baseline's repeated runs of ``sweeps`` earlier sweeps of the same design, each sweep's
    arm and server lives its own (as ``earlier_runs`` names them)."""
    own = [r for r in runs if r.arm == baseline]
    repeated = [own[i] for i in NoiseDesign.of(own).rows]
    return [RunValue(r.metric, f"earlier-{n}: {r.label}", f"earlier-{n}/{r.arm}", r.config, f"earlier-{n}/{r.server}",
                     0.0) for n in range(sweeps) for r in repeated]


def planned_claims(config: SweepConfig, servers: Sequence[PlannedServer],
                   index: Mapping[tuple[str, ConfigKey], list[int]], baseline: str) -> Iterable[PlannedClaim]:
    """Every claim a sweep of this design decides: each speculative arm at each cell, on each class at
    the load shares and at the traffic mix, with its weights over the runs."""
    shares = _token_shares(config)
    arms = list(dict.fromkeys(arm.arm for arm, *_ in servers if not arm.is_baseline and not arm.synthetic
                              and arm.policy_of is None))
    for arm in arms:
        for sampling in (s.name for s in config.sampling):
            configs = [c for (a, c) in index if a == arm and c[3] == sampling and (baseline, c) in index]
            for c in configs:
                weights = _contrast(index, arm, baseline, {c: 1.0})
                yield f"cell/{arm}/{'/'.join(map(str, c))}", "cell", arm, sampling, c[0], c[2], weights
            for cls in dict.fromkeys(c[0] for c in configs):
                inside = {c: shares.get((c[0], c[2]), 0.0) for c in configs if c[0] == cls}
                if sum(inside.values()) > 0:
                    yield f"class/{arm}/{sampling}/{cls}", "class", arm, sampling, cls, None, _contrast(
                        index, arm, baseline, inside)
            mix = {c: shares.get((c[0], c[2]), 0.0) for c in configs}
            if sum(mix.values()) > 0:
                yield f"mix/{arm}/{sampling}", "mix", arm, sampling, None, None, _contrast(index, arm, baseline, mix)


def _token_shares(config: SweepConfig) -> dict[tuple[str, float], float]:
    """The mix's token shares per (class, load); request shares read each class's output cap as its
    mean output tokens (the plan has no measured lengths)."""
    caps = {p.name: float(p.max_output_tokens) for p in config.prompt_classes}
    try:
        return cell_token_shares(effective_mix(config), caps)
    except InputError:
        return {}


def _contrast(index: Mapping[tuple[str, ConfigKey], list[int]], arm: str, baseline: str,
              shares: Mapping[ConfigKey, float]) -> dict[int, float]:
    """The gradient of sum f_c (log candidate_c - log baseline_c), f normalised over ``shares``: each
    side's runs at a configuration averaged."""
    total = sum(shares.values())
    out: dict[int, float] = {}
    for c, f in shares.items():
        for who, sign in ((arm, 1.0), (baseline, -1.0)):
            members = index[(who, c)]
            for i in members:
                out[i] = out.get(i, 0.0) + sign * f / total / len(members)
    return out


def _claim_power(kind: ClaimKind, arm: str, sampling: str, cls: str | None, load: float | None,
                 found: Detectable | None, df: float | None, noise: RunNoise) -> ClaimPower:
    if found is None:
        return ClaimPower(kind=kind, arm=arm, sampling=sampling, prompt_class=cls, load=load, adopt_saving=None,
                          reject_saving=None, se=None, df=None, why_none=f"no interval: {noise.source}")
    return ClaimPower(kind=kind, arm=arm, sampling=sampling, prompt_class=cls, load=load,
                      adopt_saving=found.adopt_saving, reject_saving=found.reject_saving, se=found.se, df=df)


class DesignProposal(RecordModel):
    """The cheapest design searched whose every arm at the traffic mix adopts a true saving of
    ``target_saving`` with probability ``power`` (PREDICTED: its time and cost are the plan's)."""

    predicted: bool = True
    target_saving: float
    power: float
    found: bool = Field(description="False: no design searched reaches the target; the figures are the closest one's.")
    repeats: int
    requests_per_cell: int
    baseline_server_lives: int = Field(
        description="The opening baseline's server lives (analysis.baseline_server_lives).")
    arm_server_lives: int = Field(description="Each speculative arm's server lives (analysis.arm_server_lives).")
    mix_adopt_saving: float | None = Field(description="The worst arm's minimum detectable saving at the mix.")
    class_adopt_saving: float | None = Field(description="The worst minimum detectable saving on one class alone.")
    wall_s: float
    accelerator_hours: float
    cost_usd: float
    searched: int = Field(description="Designs whose power was computed, cheapest first.")
    notes: list[str]


def parse_saving(text: str, flag: str = "--detect") -> float:
    """A saving as '15%' or '0.15': a share of cost strictly between 0 and 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise InputError(f"{flag}: {text!r} is not a saving between 0 and 100 % (e.g. 15%)")
    return value
