"""Decision calibration (issue 28): do the intervals specfleet shows cover with the confidence they
state, how often does it adopt what saves nothing, and how often does it adopt what does save?

SIMULATED sweeps on REAL noise, decided by specfleet's own code:

- The noise comes from stored sweeps (default: every finished sweep under ``results/``): the
  run-to-run and server-to-server variances of SLO-qualified tokens/s and of the SLO-percentile ITL
  are what ``specfleet.stats.variance`` estimates from their repeated cells, pooled over all of them
  (each sweep's groups and servers its own); a window's run-to-run offset is drawn from their
  opening-against-closing differences themselves (over the square root of 2, either sign: the real
  noise's shape, tails and all), and a server life's from a normal at the server variance.
- A simulated sweep has the matrix and the server layout of a real config (``demo``:
  configs/demo-cpu.yaml; ``nightly``: configs/llama70b-h200-nightly.yaml, its baseline stages on four
  replicas as its plan lays them out), and the config's ``analysis.noise_history`` of earlier
  simulated sweeps' baselines (``--no-history``: a first run). Every cell is a stored baseline cell
  of the same class and load (the nightly's classes and loads mapped onto the stored ones in turn),
  its rate moved by its server's and its window's offsets, and every speculative cell by a true
  speedup exp(theta). Its decisions, verdicts at the mix, k policies and class verdicts come from
  ``specfleet.verdicts.analysis.decide_sweep``. Demand is set to 1e9 tokens/s so that whole-replica rounding
  is negligible: a true speedup s then saves 1 - 1/s. The equivalence and quality gates pass (their
  own calibration is the stochastic gate's); the stochastic test is off.
- Truths: theta = g x tau for g in -2 (a loss), 0, 1, 2, 3, tau the run-to-run noise of one window on
  another server (the noise floor: sqrt(server_var + run_var)).
- The canary: A/A (two identical replicas side by side on a stored baseline cell's prompts), with
  ``--from`` (the noise of a fresh simulated demo sweep's baseline and its history) and without.

Prints the coverage of every interval the product shows (marginal: the comparison alone, two-sided;
corrected: each bound one-sided, all of a sweep's bounds at once), the false adopt rates at a true
saving of 0, the power at each gain, and the canary's A/A promote and rollback rates.

    python -m benchmarks.decision_calibration [SWEEP_DIR ...] [--sweeps-per-gain N] [--nightly-per-gain N]
        [--canaries N] [--no-history] [--server-share F] [--error-control CONTROL] [--json OUT]

``--server-share F`` is a robustness check: the truth's server part set to F of the estimated
total noise (the stored sweeps put it at 0), everything else as above.
"""

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.table import Table

from benchmarks.results_record import results_dir, write_result
from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.matrix import ArmPlan, CellIdentity
from specfleet.production.canary import (
    AcceptanceFigure,
    PairedClass,
    canary_family,
    canary_verdict,
    class_claims,
    compare_class,
)
from specfleet.results import CellResult
from specfleet.stats.bootstrap import Interval
from specfleet.stats.quality import GateResult, quality_gate
from specfleet.stats.runs import ConfigKey, Metric, RunValue, config_key, percentile_run, rate_run
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import RunNoise, estimate_noise
from specfleet.verdicts.analysis import Verdicts, decide_sweep
from specfleet.verdicts.evidence import earlier_runs
from specfleet.verdicts.prompt_class import class_verdicts
from specfleet.verdicts.traffic_mix import cell_token_shares, effective_mix
from specfleet_tasks.plan.sweep_plan import Phase, planned_cells
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.sweep import StoredSweep

if TYPE_CHECKING:
    from benchmarks.decision_verdicts import NoiseTruth

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"demo": ROOT / "configs" / "demo-cpu.yaml", "nightly": ROOT / "configs" / "llama70b-h200-nightly.yaml"}
GAINS = (-2.0, 0.0, 1.0, 2.0, 3.0)
DEMAND = 1e9
PASS = [GateResult(gate="greedy_exact_match", passed=True, detail="simulated: passes")]
QUALITY = GateResult(gate="quality", passed=True, detail="simulated: passes")
NONE = AcceptanceFigure(value=None, source="none", requests=0)
METRICS: tuple[Metric, Metric] = ("qualified_tokens_per_s", "itl")
FloatArray = npt.NDArray[np.float64]


# --- the real noise -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolCell:
    """A stored usable baseline cell: its requests, its rate and its ITL percentile."""

    label: str
    config: ConfigKey
    sample: CellSample
    log_itl: float | None

    @property
    def log_rate(self) -> float:
        return math.log(self.sample.qualified_tokens_per_s)


@dataclass(frozen=True)
class RealNoise:
    sweeps: list[str]
    noise: dict[Metric, RunNoise]
    offsets: dict[Metric, FloatArray]
    """Real run-to-run offsets: each A/A pair's difference over sqrt 2, with either sign."""
    baseline: dict[tuple[str, float], list[PoolCell]]
    """Usable baseline cells by (prompt class, concurrency), every stored sweep."""
    server_share: float | None = None
    """``--server-share``: the truth's server part as this share of the estimated total (a
    robustness check on noise unlike the stored sweeps'); None: the estimates themselves."""

    @property
    def tau(self) -> float:
        found = self.noise["qualified_tokens_per_s"].relative_sd
        assert found is not None
        return found

    def truth(self, metric: Metric) -> tuple[float, float]:
        """The simulation's true variances: the pooled unbiased estimates, a negative one as 0."""
        noise = self.noise[metric]
        if not noise.estimated:
            return 0.0, 0.0
        server_var, run_var = (max(p, 0.0) for p in noise.parts())
        if self.server_share is None:
            return server_var, run_var
        total = server_var + run_var
        return self.server_share * total, (1.0 - self.server_share) * total

    def run_offset(self, metric: Metric, rng: np.random.Generator, size: int | None = None) -> FloatArray:
        """Run-to-run offsets drawn from the real ones, scaled to the run part (the pairs also carry
        the server part, which the simulation draws apart)."""
        server_var, run_var = self.truth(metric)
        real = self.offsets[metric]
        scale = math.sqrt(run_var / (server_var + run_var)) if server_var + run_var > 0 else 0.0
        return np.asarray(rng.choice(real, size=size) * scale, dtype=np.float64)


def _unique(run: RunValue, sweep: str) -> RunValue:
    """A run labelled by its sweep: groups and server lives are each sweep's own."""
    return RunValue(run.metric, run.label, f"{sweep}/{run.arm}", run.config, f"{sweep}/{run.server}", run.log_value)


def real_noise(sweep_dirs: Sequence[Path]) -> RealNoise:
    runs: dict[Metric, list[RunValue]] = {m: [] for m in METRICS}
    baseline: dict[tuple[str, float], list[PoolCell]] = defaultdict(list)
    offsets: dict[Metric, list[float]] = {m: [] for m in METRICS}
    for sweep_dir in sweep_dirs:
        data = StoredSweep(sweep_dir)
        ends: dict[ConfigKey, dict[str, tuple[RunValue | None, RunValue | None]]] = defaultdict(dict)
        for cell in data.cells:
            if not cell.usable or cell.key not in data.records:
                continue
            sample = CellSample.from_records(cell, data.records[cell.key], data.config.slo)
            key = config_key(cell.identity)
            rate, gaps = rate_run(sample, key), percentile_run(sample, key, data.config.slo.percentile)
            for metric, run in zip(METRICS, (rate, gaps), strict=True):
                if run is not None:
                    runs[metric].append(_unique(run, data.id))
            if cell.identity.method == "baseline" and rate is not None:
                baseline[(key[0], key[2])].append(PoolCell(f"{data.id}: {cell.identity.label}", key, sample,
                                                           gaps.log_value if gaps else None))
                ends[key][cell.identity.phase] = (rate, gaps)
        for phases in ends.values():
            if len(phases) == 2:
                for m, (opening, closing) in enumerate(zip(phases["main"], phases["baseline_end"], strict=True)):
                    if opening is not None and closing is not None:
                        d = (closing.log_value - opening.log_value) / math.sqrt(2.0)
                        offsets[METRICS[m]] += [d, -d]
    return RealNoise([d.name for d in sweep_dirs], {m: estimate_noise(runs[m], m, 0.95) for m in METRICS},
                     {m: np.array(v) for m, v in offsets.items()}, dict(baseline))


# --- a simulated sweep ----------------------------------------------------------------------------

@dataclass
class Shape:
    name: str
    config: SweepConfig
    layout: list[tuple[ArmPlan, Phase, int, list[tuple[CellIdentity, str]]]]
    source: dict[ConfigKey, PoolCell]
    """The stored cell each configuration is."""


def shape(name: str, noise: RealNoise, history: bool = True, error_control: str | None = None) -> Shape:
    config = load_sweep_config(SHAPES[name])
    analysis = config.analysis.model_copy(update={
        "noise_history": config.analysis.noise_history if history else 0,
        "error_control": error_control or config.analysis.error_control})
    config = config.model_copy(update={
        "hardware": config.hardware.model_copy(update={"peak_demand_tokens_per_s": DEMAND}),
        "equivalence": config.equivalence.model_copy(update={"stochastic": None}),
        "load": config.load.model_copy(update={"adaptive_stopping": None}), "analysis": analysis})
    real = sorted(noise.baseline)
    classes = sorted({pc for pc, _ in real})
    loads = sorted({load for _, load in real})
    source = {}
    for i, pc in enumerate(p.name for p in config.prompt_classes):
        for j, level in enumerate(config.load.concurrency):
            cell_class = pc if pc in classes else classes[i % len(classes)]
            cell_load = float(level) if float(level) in loads else loads[min(j, len(loads) - 1)]
            pool = [p for p in noise.baseline.get((cell_class, cell_load), []) if p.log_itl is not None]
            for s in config.sampling:
                source[(pc, "concurrency", float(level), s.name)] = pool[(i + j) % len(pool)]
    return Shape(name, config, planned_cells(config, "simulated"), source)


def simulate_sweep(sh: Shape, noise: RealNoise, theta: float, rng: np.random.Generator,
                   baseline_only: bool = False) -> tuple[list[CellResult], dict[str, CellSample]]:
    """One sweep: per server life an offset, per window a real run-to-run offset, per speculative cell
    the true speedup; the stored cell's requests and ITL gaps moved by the same offsets."""
    server_sd = {m: math.sqrt(noise.truth(m)[0]) for m in METRICS}
    cells, samples = [], {}
    for arm, phase, replica, idents in sh.layout:
        if baseline_only and not arm.is_baseline:
            continue
        life = f"{arm.arm}/{phase}/{replica}"
        server = {m: rng.normal(0.0, server_sd[m]) for m in METRICS}
        for ident, key in idents:
            pool = sh.source[config_key(ident)]
            effect = 0.0 if arm.is_baseline else theta
            log_rate = pool.log_rate + effect + server["qualified_tokens_per_s"] + float(
                noise.run_offset("qualified_tokens_per_s", rng))
            scale = math.exp(server["itl"] + float(noise.run_offset("itl", rng)))
            template = pool.sample.cell
            cell = template.model_copy(update={
                "identity": ident, "key": f"{key}-{phase}-{replica}", "server": life, "status": "ok", "reasons": [],
                "throughput": template.throughput.model_copy(update={"qualified_tokens_per_s": math.exp(log_rate)})})
            cells.append(cell)
            s = pool.sample
            samples[cell.key] = CellSample(cell=cell, qualified_tokens=s.qualified_tokens, durations_s=s.durations_s,
                                           ttft_ms=np.full(len(s.ttft_ms), 1.0),
                                           itl_ms=tuple(gaps * scale for gaps in s.itl_ms))
    return cells, samples


def history(sh: Shape, noise: RealNoise, rng: np.random.Generator, sweeps: int | None = None) -> list[RunValue]:
    """The repeated runs of ``analysis.noise_history`` earlier simulated sweeps (their baselines)."""
    out: list[RunValue] = []
    for night in range(sh.config.analysis.noise_history if sweeps is None else sweeps):
        cells, samples = simulate_sweep(sh, noise, 0.0, rng, baseline_only=True)
        out += earlier_runs(f"earlier-{night}", cells, samples, sh.config.slo, sh.config.analysis)
    return out


def decide(sh: Shape, cells: Sequence[CellResult], samples: Mapping[str, CellSample],
           earlier: Sequence[RunValue]) -> Verdicts:
    gates = {p.arm: PASS for p in arm_plans(sh.config)[1:]}
    quality = {(c.identity.arm, c.identity.prompt_class, c.identity.sampling): QUALITY for c in cells if c.identity.k}
    return decide_sweep(sh.config, cells, samples, gates, quality, {}, earlier)


def _covers(interval: Interval | None, truth: float) -> bool | None:
    """A two-sided interval covers the truth (None where none was formed)."""
    if interval is None or interval.low is None or interval.high is None:
        return None
    return bool(interval.low <= truth <= interval.high)


def _bounds(interval: Interval | None, truth: float) -> tuple[bool, bool] | None:
    """A corrected interval's two one-sided bounds: (low end at or under the truth, high end at or over)."""
    if interval is None or interval.low is None or interval.high is None:
        return None
    return interval.low <= truth, interval.high >= truth


def policy_truth(sh: Shape, ks: Mapping[float, int], speedup: float) -> float:
    """The true mix speedup of a k policy: k = 0 loads at 1, the others at ``speedup``, weighted by
    the mix's token shares over the true baseline rates."""
    shares = cell_token_shares(effective_mix(sh.config))
    base = cand = 0.0
    for (pc, load), f in shares.items():
        if f <= 0:
            continue
        mu = math.exp(sh.source[(pc, "concurrency", load, sh.config.sampling[0].name)].log_rate)
        base += f / mu
        cand += f / (mu * (speedup if ks.get(load, 0) > 0 else 1.0))
    return base / cand


@dataclass
class Tally:
    """Counts per figure: covered / formed, adopted / offered."""

    hits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: bool | float | None) -> None:
        if value is not None:
            self.hits[name].append(value)

    def rate(self, name: str) -> tuple[float | None, int]:
        values = self.hits.get(name, [])
        return (float(np.mean(values)) if values else None), len(values)


def score_sweep(sh: Shape, v: Verdicts, speedup: float, tally: Tally) -> None:
    """Coverage of every displayed interval (marginal: two-sided; corrected: each bound one-sided and
    all of a sweep's bounds at once), and what was adopted."""
    lows: list[bool] = []
    highs: list[bool] = []
    missed_when_adopted: list[bool] = []

    def corrected(interval: Interval | None, truth: float, adopted: bool) -> None:
        """A corrected bound states its confidence for all of the sweep's bounds at once (max-T), or
        for the adopted ones on average (FCR)."""
        found = _bounds(interval, truth)
        if found is not None:
            lows.append(found[0])
            highs.append(found[1])
            if adopted:
                missed_when_adopted.append(not found[0])

    for d in v.decisions:
        c = d.comparison
        tally.add("cell marginal", _covers(c.qualified_tps_speedup if c else None, speedup))
        corrected(c.qualified_tps_speedup_corrected if c else None, speedup, d.verdict == "adopt")
        tally.add("adopt: cell", d.verdict == "adopt")
    for m in v.mix:
        if m.name.endswith("-k-policy"):
            corrected(m.fleet.speedup_corrected, policy_truth(sh, {c.load_value: c.k or 0 for c in m.cells}, speedup),
                      m.fleet.adopted)
            tally.add("adopt: policy at the mix", m.adoptable)
            continue
        tally.add("mix marginal", _covers(m.fleet.speedup, speedup))
        corrected(m.fleet.speedup_corrected, speedup, m.fleet.adopted)
        for f in m.per_class.values():
            tally.add("class marginal", _covers(f.speedup, speedup))
            corrected(f.speedup_corrected, speedup, f.adopted)
        tally.add("adopt: arm at the mix", m.adoptable)
    classes = class_verdicts(sh.config, v.decisions, v.mix, v.policies)
    for cv in classes:
        tally.add("adopt: class verdict", cv.verdict == "adopt")
    tally.add("corrected: every lower bound of the sweep at once", all(lows) if lows else None)
    tally.add("corrected: every upper bound of the sweep at once", all(highs) if highs else None)
    tally.add("corrected, adopted claims whose low end lies above the truth (FCR; 0 when none)",
              float(np.mean(missed_when_adopted)) if missed_when_adopted else 0.0)
    tally.add("adopt: anything in the sweep", any(d.verdict == "adopt" for d in v.decisions)
              or any(m.adoptable for m in v.mix) or any(cv.verdict == "adopt" for cv in classes))


# --- the canary -------------------------------------------------------------------------------------

def simulate_canary(noise: RealNoise, demo: Shape, with_from: bool, rng: np.random.Generator,
                    tally: Tally) -> None:
    """An A/A canary at the demo's largest load, every class: both replicas baselines on the same
    prompts, each on its own server (offsets as a sweep's), one window each."""
    config = demo.config
    load = max(float(c) for c in config.load.concurrency)
    classes = []
    for pc in (p.name for p in config.prompt_classes):
        pool = demo.source[(pc, "concurrency", load, config.sampling[0].name)]
        replicas = []
        for replica in ("baseline", "candidate"):
            server = {m: rng.normal(0.0, math.sqrt(noise.truth(m)[0])) for m in METRICS}
            rate = math.exp(pool.log_rate + server["qualified_tokens_per_s"]
                            + float(noise.run_offset("qualified_tokens_per_s", rng)))
            scale = math.exp(server["itl"] + float(noise.run_offset("itl", rng)))
            s = pool.sample
            ident = s.cell.identity.model_copy(update={"sampling": "canary"})
            cell = s.cell.model_copy(update={
                "identity": ident, "key": f"canary-{pc}-{replica}", "status": "ok", "reasons": [],
                "throughput": s.cell.throughput.model_copy(update={"qualified_tokens_per_s": rate})})
            replicas.append(CellSample(cell=cell, qualified_tokens=s.qualified_tokens, durations_s=s.durations_s,
                                       ttft_ms=np.full(len(s.ttft_ms), 1.0),
                                       itl_ms=tuple(gaps * scale for gaps in s.itl_ms)))
        classes.append(PairedClass(pc, replicas[0], replicas[1]))
    measured: dict[Metric, RunNoise]
    noise_runs: list[RunValue]
    if with_from:  # the --from sweep's repeated runs and its noise history, as sweep_context reads them
        noise_runs = history(demo, noise, rng, config.analysis.noise_history + 1)
        measured = {m: estimate_noise([r for r in noise_runs if r.metric == m], m, config.analysis.confidence)
                    for m in METRICS}
    else:
        from specfleet_tasks.canary.context import NO_SWEEP, no_noise

        measured, noise_runs = no_noise(config.analysis.confidence, NO_SWEEP), []
    family, claims = canary_family(classes, noise_runs, measured, config.slo, config.analysis)
    results = family.decide()
    label = "with --from" if with_from else "without --from"
    compared, lows, highs = [], [], []
    for paired in classes:
        comparison, decided = class_claims(paired, results, claims[paired.name], config.slo, measured)
        tally.add(f"canary {label}: tokens/s marginal", _covers(comparison.qualified_tps_speedup, 1.0))
        tally.add(f"canary {label}: ITL marginal", _covers(comparison.itl_speedup, 1.0))
        for key in ("faster", "itl_faster"):
            own = claims[paired.name]
            found = _bounds(results[own[key].key].corrected, 1.0) if key in own else None
            if found is not None:
                lows.append(found[0])
                highs.append(found[1])
        scores = dict.fromkeys(("a", "b", "c", "d"), 1.0)
        quality = quality_gate(scores, scores, prompt_class=paired.name, sampling="greedy", tolerance=0.1,
                               confidence=0.95, resamples=100, rng=rng)
        compared.append(compare_class(paired.name, comparison, decided, NONE, NONE, None, None, quality, True))
    tally.add(f"canary {label}: every corrected lower bound at once", all(lows) if lows else None)
    tally.add(f"canary {label}: every corrected upper bound at once", all(highs) if highs else None)
    verdict, _ = canary_verdict(compared, measured["qualified_tokens_per_s"].estimated)
    tally.add(f"canary {label}: promote", verdict == "promote")
    tally.add(f"canary {label}: rollback", verdict == "rollback")


# --- the run ------------------------------------------------------------------------------------------

def stored_sweeps(paths: Sequence[str]) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    return sorted(p.parent for p in (ROOT / "results").glob("*/summary.json"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", help="stored sweep folders (default: every finished one under results/)")
    parser.add_argument("--sweeps-per-gain", type=int, default=200, dest="per_gain")
    parser.add_argument("--nightly-per-gain", type=int, default=100)
    parser.add_argument("--canaries", type=int, default=400)
    parser.add_argument("--shapes", default="demo,nightly")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--error-control", choices=["family_wise", "false_discovery_rate"],
                        help="override the configs' analysis.error_control")
    parser.add_argument("--server-share", type=float, help="robustness: the true server part as this share of the "
                        "estimated total noise (default: the estimates' own split)")
    parser.add_argument("--no-history", action="store_true",
                        help="every simulated sweep alone (its config's analysis.noise_history set to 0): a first run")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--verdicts", action="store_true", help="the three verdicts (adopt / reject / inconclusive) "
                        "at true ratios spanning the break-even, on the planned designs "
                        "(benchmarks/decision_verdicts.py); "
                        "its record goes to benchmarks/results/")
    parser.add_argument("--verdict-sweeps", type=int, default=80, help="with --verdicts: demo sweeps per ratio")
    parser.add_argument("--verdict-nightly", type=int, default=25, help="with --verdicts: nightly sweeps per ratio")
    parser.add_argument("--truths", help="with --verdicts: only these truths, by name, ';'-separated")
    parser.add_argument("--quick", action="store_true", help="with --verdicts: a few sweeps per ratio (a test)")
    parser.add_argument("--nights", action="store_true", help="with --verdicts: instead, consecutive nights of the "
                        "nightly shape decided as continued sweeps (analysis.nights; benchmarks/decision_nights.py)")
    parser.add_argument("--nights-sequences", type=int, default=40, help="with --nights: sequences per ratio")
    args = parser.parse_args(argv)
    console = Console(width=160)
    if args.verdicts:
        return run_nights_verdicts(console, args) if args.nights else run_verdicts(console, args)
    started = time.monotonic()
    noise = real_noise(stored_sweeps(args.sweeps))
    if args.server_share is not None:
        if not 0.0 <= args.server_share <= 1.0:
            print(f"--server-share: {args.server_share} is not between 0 and 1", file=sys.stderr)
            return 2
        noise = replace(noise, server_share=args.server_share)
    if not all(n.estimated for n in noise.noise.values()):
        print(f"no run-to-run estimate in the stored sweeps: {noise.noise['qualified_tokens_per_s'].source}",
              file=sys.stderr)
        return 2
    (server, run), (itl_server, itl_run) = noise.truth("qualified_tokens_per_s"), noise.truth("itl")
    tps = noise.noise["qualified_tokens_per_s"]
    raw = {m: n.parts() for m, n in noise.noise.items()}
    truth = ("the simulation's truth takes a negative estimate as 0" if args.server_share is None else
             f"the simulation's truth splits the estimated total {args.server_share:g} server / "
             f"{1 - args.server_share:g} run (--server-share)")
    console.print(f"REAL noise from {len(noise.sweeps)} stored sweeps; {truth}: tokens/s server {server:.5f} "
                  f"(estimate {raw['qualified_tokens_per_s'][0]:+.5f}), "
                  f"run {run:.5f} (tau {noise.tau:.3f} [{tps.relative_sd_low:.3f}, {tps.relative_sd_high:.3f}]); "
                  f"ITL server {itl_server:.5f} (estimate {raw['itl'][0]:+.5f}), run {itl_run:.5f}; {tps.source}; "
                  f"run offsets drawn from {len(noise.offsets['qualified_tokens_per_s']) // 2} real A/A pairs",
                  highlight=False)
    rng = np.random.default_rng(args.seed)
    stored: dict[str, object] = {"sweeps": noise.sweeps}
    stored |= {m: n.model_dump() for m, n in noise.noise.items()}
    out: dict[str, object] = {"noise": stored, "history": not args.no_history, "server_share": args.server_share,
                             "error_control": args.error_control}
    shapes: dict[str, object] = {}
    for name in args.shapes.split(","):
        sh = shape(name, noise, history=not args.no_history, error_control=args.error_control)
        per_gain = args.per_gain if name == "demo" else args.nightly_per_gain
        by_gain: dict[float, Tally] = {}
        overall = Tally()
        for gain in GAINS:
            tally = Tally()
            speedup = math.exp(gain * noise.tau)
            for _ in range(per_gain):
                cells, samples = simulate_sweep(sh, noise, math.log(speedup), rng)
                verdicts = decide(sh, cells, samples, history(sh, noise, rng))
                score_sweep(sh, verdicts, speedup, tally)
                score_sweep(sh, verdicts, speedup, overall)
            by_gain[gain] = tally
            console.print(f"{name}: gain {gain:+g} tau done ({time.monotonic() - started:.0f} s)", highlight=False)
        shapes[name] = _report(console, name, sh, by_gain, overall, per_gain)
    out["shapes"] = shapes
    canary = Tally()
    demo = shape("demo", noise, history=not args.no_history)
    for _ in range(args.canaries):
        simulate_canary(noise, demo, True, rng, canary)
        simulate_canary(noise, demo, False, rng, canary)
    out["canary"] = _table(console, f"Canary, A/A, {args.canaries} runs each (SIMULATED on real noise)", canary)
    console.print(f"total {time.monotonic() - started:.0f} s", highlight=False)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


def verdict_noise(paths: Sequence[str]) -> "NoiseTruth":
    """The stored sweeps' pooled noise (a negative part as 0), or the stated figure without any."""
    from benchmarks.decision_verdicts import STATED_RUN_VAR, STATED_SOURCE, NoiseTruth

    sweeps = stored_sweeps(paths)
    found = real_noise(sweeps) if sweeps else None
    if found is None or not found.noise["qualified_tokens_per_s"].estimated:
        return NoiseTruth(0.0, STATED_RUN_VAR, STATED_SOURCE)
    server_var, run_var = found.truth("qualified_tokens_per_s")
    source = found.noise["qualified_tokens_per_s"].source
    return NoiseTruth(server_var, run_var, f"{len(sweeps)} stored sweeps: {source}")


VERDICTS_BENCHMARK = "decision_calibration_verdicts"


def run_verdicts(console: Console, args: argparse.Namespace) -> int:
    """The three verdicts over every shape and truth; the record under benchmarks/results/."""
    from benchmarks.decision_verdicts import NIGHTLY_TRUTHS, TRUTHS, goals, run_setting

    noise = verdict_noise(args.sweeps)
    console.print(f"noise: tau {noise.tau:.3f} (server {noise.server_var:.5f}, run {noise.run_var:.5f}); "
                  f"{noise.source}",
                  highlight=False)
    per = {"demo": 4 if args.quick else args.verdict_sweeps, "nightly": 2 if args.quick else args.verdict_nightly}
    settings = []
    for name in args.shapes.split(","):
        truths = TRUTHS if name == "demo" else [t for t in TRUTHS if t.name in NIGHTLY_TRUTHS]
        chosen = [t for t in truths if args.truths is None or t.name in args.truths.split(";")]
        for truth in chosen[:2] if args.quick else chosen:
            settings.append(run_setting(name, truth, noise, per[name], args.seed,
                                        lambda line: console.print(line, highlight=False)))
    met = goals(settings) if not args.quick else []
    record = {"benchmark": "decision_calibration --verdicts", "label": "SIMULATED sweeps on the planned designs",
              "machine": _machine(), "commit": _commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "noise": {"server_var": noise.server_var, "run_var": noise.run_var, "tau": noise.tau,
                        "source": noise.source},
              "sweeps_per_ratio": per, "quick": args.quick, "settings": settings, "goals": met,
              "met": all(bool(g["met"]) for g in met) if met else None}
    _verdict_tables(console, settings, met)
    _publish(console, args.json, VERDICTS_BENCHMARK, "decision-verdicts", record, met,
             f"SIMULATED sweeps of the planned {args.shapes} designs, {per} sweeps per ratio; noise {noise.source}")
    return 0


def _publish(console: Console, json_out: Path | None, benchmark: str, detail: str, record: dict[str, Any],
             met: Sequence[dict[str, Any]], note: str) -> None:
    """The full tables to ``json_out`` (else the benchmark's detail folder) and, when goals were
    checked, the record under benchmarks/results/."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = json_out or results_dir() / benchmark / "detail" / f"{detail}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2), encoding="utf-8")
    console.print(f"full tables: {out}", highlight=False)
    if met:
        write_result(benchmark, "; ".join(str(g["goal"]) for g in met), record["met"],
                     {_figure_name(g): _percent(g["figure"]) for g in met}, note=f"{note}; full tables: {out.name}")


NIGHTS_BENCHMARK = "decision_calibration_nights"


def run_nights_verdicts(console: Console, args: argparse.Namespace) -> int:
    """Sequences of consecutive nights per truth and ratio; the record under benchmarks/results/."""
    from benchmarks.decision_nights import nights_goals, nights_truths, run_nights

    noise = verdict_noise(args.sweeps)
    console.print(f"noise: tau {noise.tau:.3f} (server {noise.server_var:.5f}, run {noise.run_var:.5f}); "
                  f"{noise.source}", highlight=False)
    sequences = 2 if args.quick else args.nights_sequences
    truths = nights_truths(args.truths)
    settings = [run_nights(truth, noise, sequences, args.seed, lambda line: console.print(line, highlight=False))
                for truth in (truths[:1] if args.quick else truths)]
    met = nights_goals(settings) if not args.quick else []
    record = {"benchmark": "decision_calibration --verdicts --nights",
              "label": "SIMULATED sequences of nightly sweeps on the planned design",
              "machine": _machine(), "commit": _commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "noise": {"server_var": noise.server_var, "run_var": noise.run_var, "tau": noise.tau,
                        "source": noise.source},
              "sequences_per_ratio": sequences, "quick": args.quick, "settings": settings, "goals": met,
              "met": all(bool(g["met"]) for g in met) if met else None}
    _nights_tables(console, settings, met)
    _publish(console, args.json, NIGHTS_BENCHMARK, "decision-nights", record, met,
             f"SIMULATED sequences of the planned nightly design, {sequences} sequences per ratio; "
             f"noise {noise.source}")
    return 0


def _nights_tables(console: Console, settings: Sequence[dict[str, Any]], met: Sequence[dict[str, Any]]) -> None:
    for s in settings:
        table = Table(title=f"{s['shape']} over {s['looks']} nights ({s['spending']} spending) / {s['truth']['name']}: "
                      "arms at the mix decided by look k (adopt/reject), any wrong adopt, any wrong reject")
        for column in ("ratio", "x", *(f"look {k}" for k in range(1, s["looks"] + 1)), "wrong adopt", "wrong reject"):
            table.add_column(column)
        for label, r in s["ratios"].items():
            looks = [f"{look['adopt']:.0%}/{look['reject']:.0%}" for look in r["looks"]]
            wrong = ["-" if r[k] is None else f"{r[k]:.1%}" for k in ("wrong_adopt", "wrong_reject")]
            table.add_row(label, f"{r['ratio']:.3f}", *looks, *wrong)
        console.print(table)
    for g in met:
        console.print(f"goal: {g['goal']}: {g['figure']} -> {'met' if g['met'] else 'NOT met'}", highlight=False)


def _percent(share: object) -> float | None:
    return round(100.0 * float(share), 1) if isinstance(share, int | float) else None


def _figure_name(goal: dict[str, Any]) -> str:
    """A goal's figure as a record key: its words and where its worst case was, in snake case, in per cent."""
    words = " ".join([str(goal["goal"]), *map(str, goal.get("where") or [])])
    return "_".join("".join(c if c.isalnum() else " " for c in words.lower()).split())[:90] + "_pct"


def _verdict_tables(console: Console, settings: Sequence[dict[str, Any]], met: Sequence[dict[str, Any]]) -> None:
    for s in settings:
        table = Table(title=f"{s['shape']} / {s['truth']['name']}: mix adopt / reject / inconclusive, wrong adopt, "
                      f"wrong reject (planned 80 % MDS: adopt {s['planned']['adopt_speedup']:.2f}x, reject "
                      f"{s['planned']['reject_speedup']:.2f}x)")
        for column in ("ratio", "x", "mix A/R/I", "class A/R/I", "cell A/R/I", "wrong adopt", "wrong reject"):
            table.add_column(column)
        for label, r in s["ratios"].items():
            shares = r["shares"]
            cells = ["/".join(f"{shares[k][v]:.0%}" for v in ("adopt", "reject", "inconclusive"))
                     for k in ("mix", "class", "cell")]
            wrong = ["-" if r[k] is None else f"{r[k]:.1%}" for k in ("wrong_adopt", "wrong_reject")]
            table.add_row(label, f"{r['ratio']:.3f}", *cells, *wrong)
        console.print(table)
    for g in met:
        console.print(f"goal: {g['goal']}: {g['figure']} -> {'met' if g['met'] else 'NOT met'}", highlight=False)


def _machine() -> dict[str, object]:
    from benchmarks.model_accuracy import machine

    return machine()


def _commit() -> str | None:
    import subprocess

    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False)
    return done.stdout.strip() or None


def _table(console: Console, title: str, tally: Tally) -> dict[str, object]:
    table = Table(title=title)
    for column in ("figure", "rate", "n"):
        table.add_column(column)
    rows: dict[str, object] = {}
    for name in sorted(tally.hits):
        rate, n = tally.rate(name)
        rows[name] = {"rate": rate, "n": n}
        table.add_row(name, "n/a" if rate is None else f"{rate:.1%}", str(n))
    console.print(table)
    return rows


def _report(console: Console, name: str, sh: Shape, by_gain: Mapping[float, Tally], overall: Tally,
            per_gain: int) -> dict[str, object]:
    cells = sum(len(c) for *_, c in sh.layout)
    coverage = Tally(hits={k: v for k, v in overall.hits.items() if not k.startswith("adopt")})
    result: dict[str, object] = {"coverage": _table(
        console, f"{name}: coverage at 95 % over all gains ({per_gain} sweeps per gain, {cells} cells each, noise "
        f"history {sh.config.analysis.noise_history}, {sh.config.analysis.error_control}; SIMULATED on real noise)",
        coverage)}
    table = Table(title=f"{name}: adopt rates per true gain (x tau); at 0 every adopt is false")
    table.add_column("figure")
    for gain in by_gain:
        table.add_column(f"{gain:+g} tau")
    rates: dict[str, dict[str, float | None]] = {}
    for figure in sorted(k for k in overall.hits if k.startswith("adopt")):
        row = [by_gain[g].rate(figure)[0] for g in by_gain]
        rates[figure] = {f"{g:+g}": r for g, r in zip(by_gain, row, strict=True)}
        table.add_row(figure, *("n/a" if r is None else f"{r:.1%}" for r in row))
    console.print(table)
    result["adopt"] = rates
    return result


if __name__ == "__main__":
    raise SystemExit(main())
