"""Decision calibration (issue 28): do the intervals specfleet shows cover with the confidence they
state, how often does it adopt what saves nothing, and how often does it adopt what does save?

SIMULATED sweeps on REAL noise, decided by specfleet's own code:

- The noise comes from stored sweeps (default: every sweep under ``results/``): the request-level
  spread is their own request records, resampled; the run-to-run and server-to-server variances
  (SLO-qualified tokens/s and SLO-percentile ITL) are what ``specfleet.stats.variance`` estimates
  from their repeated cells, pooled over all of them (each sweep's groups and servers its own).
- A simulated sweep has the matrix and the server layout of a real config (``demo``:
  configs/demo-cpu.yaml; ``nightly``: configs/llama70b-h200-nightly.yaml, its baseline stages on four
  replicas as its plan lays them out): per server life an offset, per window a run-to-run offset,
  per cell requests resampled from a stored cell (the nightly's classes and loads mapped onto the
  stored cells in turn), and every speculative cell a true speedup exp(theta). Its decisions,
  verdicts at the mix, k policies and class verdicts come from ``specfleet.analysis.decide_sweep``.
  Demand is set to 1e9 tokens/s so that whole-replica rounding is negligible: a true speedup s then
  saves 1 - 1/s. The equivalence and quality gates pass (their own calibration is the stochastic
  gate's); the stochastic test is off.
- Truths: theta = g x tau for g in -2 (a loss), 0, 1, 2, 3, tau the run-to-run noise of one window
  on another server (the noise floor: sqrt(server_var + run_var)).
- The canary: A/A (two identical replicas side by side, the same prompts in the same order: each
  class's opening and closing baseline cells of a stored sweep, paired by request, each rescaled to
  the same rate), with ``--from`` (the noise of a fresh simulated demo sweep's baseline) and without.

Prints the coverage of every interval the product shows (marginal: the comparison alone;
corrected: simultaneous over the sweep's family, as the verdicts read them), the false adopt rates
at a true saving of 0, the power at each gain, and the canary's A/A promote and rollback rates.

    python benchmarks/decision_calibration.py [SWEEP_DIR ...] [--sweeps N] [--canaries N] [--json OUT]
"""

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.table import Table

from specfleet.analysis import Verdicts, decide_sweep
from specfleet.canary import AcceptanceFigure, PairedClass, canary_family, canary_verdict, class_claims, compare_class
from specfleet.class_verdict import class_verdicts
from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.matrix import ArmPlan, CellIdentity
from specfleet.evidence import earlier_runs
from specfleet.results import CellResult
from specfleet.stats.bootstrap import Interval
from specfleet.stats.noise import config_key
from specfleet.stats.quality import GateResult, quality_gate
from specfleet.stats.runs import ConfigKey, Metric, RunValue, percentile_run, rate_run
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import RunNoise, estimate_noise
from specfleet.traffic import cell_token_shares, effective_mix
from tasks.plan.config import load_sweep_config
from tasks.plan.sweep_plan import Phase, planned_cells
from tasks.report.load import load_report_data

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"demo": ROOT / "configs" / "demo-cpu.yaml", "nightly": ROOT / "configs" / "llama70b-h200-nightly.yaml"}
GAINS = (-2.0, 0.0, 1.0, 2.0, 3.0)
DEMAND = 1e9
PASS = [GateResult(gate="greedy_exact_match", passed=True, detail="simulated: passes")]
QUALITY = GateResult(gate="quality", passed=True, detail="simulated: passes")
NONE = AcceptanceFigure(value=None, source="none", requests=0)
FloatArray = npt.NDArray[np.float64]


# --- the real noise -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolCell:
    """A stored usable cell: its measured rate and per-request arrays."""

    label: str
    config: ConfigKey
    sample: CellSample

    @property
    def log_rate(self) -> float:
        return math.log(self.sample.qualified_tokens_per_s)


@dataclass(frozen=True)
class RealNoise:
    sweeps: list[str]
    tps: RunNoise
    itl: RunNoise
    baseline: dict[tuple[str, float], list[PoolCell]]
    """Usable baseline cells by (prompt class, concurrency), every stored sweep."""
    pairs: dict[tuple[str, float], list[tuple[PoolCell, PoolCell]]]
    """Opening and closing baseline cells of one sweep at the same configuration: A/A pairs."""

    @property
    def tau(self) -> float:
        assert self.tps.relative_sd is not None
        return self.tps.relative_sd


def _unique(run: RunValue, sweep: str) -> RunValue:
    """A run labelled by its sweep: groups and server lives are each sweep's own."""
    return RunValue(run.metric, run.label, f"{sweep}/{run.arm}", run.config, f"{sweep}/{run.server}", run.log_value,
                    run.within_var, run.within_df)


def real_noise(sweep_dirs: Sequence[Path], seed: int) -> RealNoise:
    tps_runs: list[RunValue] = []
    itl_runs: list[RunValue] = []
    baseline: dict[tuple[str, float], list[PoolCell]] = defaultdict(list)
    pairs: dict[tuple[str, float], list[tuple[PoolCell, PoolCell]]] = defaultdict(list)
    rng = np.random.default_rng(seed)
    for sweep_dir in sweep_dirs:
        data = load_report_data(sweep_dir)
        ends: dict[ConfigKey, dict[str, PoolCell]] = defaultdict(dict)
        for cell in data.cells:
            if not cell.usable or cell.key not in data.records:
                continue
            sample = CellSample.from_records(cell, data.records[cell.key], data.config.slo)
            key = config_key(cell.identity)
            if (run := rate_run(sample, key)) is not None:
                tps_runs.append(_unique(run, data.sweep_id))
            if (gaps := percentile_run(sample, key, data.config.slo.percentile, rng, 200)) is not None:
                itl_runs.append(_unique(gaps, data.sweep_id))
            if cell.identity.method == "baseline" and sample.qualified_tokens_per_s > 0:
                pool = PoolCell(f"{data.sweep_id}: {cell.identity.label}", key, sample)
                baseline[(key[0], key[2])].append(pool)
                ends[key][cell.identity.phase] = pool
        for key, phases in ends.items():
            if len(phases) == 2 and len(phases["main"].sample.qualified_tokens) == len(
                    phases["baseline_end"].sample.qualified_tokens):
                pairs[(key[0], key[2])].append((phases["main"], phases["baseline_end"]))
    return RealNoise([d.name for d in sweep_dirs], estimate_noise(tps_runs, "qualified_tokens_per_s", 0.95),
                     estimate_noise(itl_runs, "itl", 0.95), dict(baseline), dict(pairs))


def truth(noise: RunNoise) -> tuple[float, float]:
    """The simulation's true variances: the stored sweeps' unbiased estimates, a negative one as 0."""
    if not noise.estimated:
        return 0.0, 0.0
    server_var, run_var = noise.parts()
    return max(server_var, 0.0), max(run_var, 0.0)


# --- a simulated sweep ----------------------------------------------------------------------------

@dataclass
class Shape:
    name: str
    config: SweepConfig
    layout: list[tuple[ArmPlan, Phase, int, list[tuple[CellIdentity, str]]]]
    source: dict[ConfigKey, PoolCell]
    """The stored cell each configuration resamples its requests from."""
    requests: int
    template: CellResult


def shape(name: str, noise: RealNoise, history: bool = True) -> Shape:
    config = load_sweep_config(SHAPES[name])
    analysis = config.analysis if history else config.analysis.model_copy(update={"noise_history": 0})
    config = config.model_copy(update={
        "hardware": config.hardware.model_copy(update={"peak_demand_tokens_per_s": DEMAND}),
        "equivalence": config.equivalence.model_copy(update={"stochastic": None}),
        "load": config.load.model_copy(update={"adaptive_stopping": None}), "analysis": analysis})
    layout = planned_cells(config, "simulated")
    real = sorted(noise.baseline)
    classes = sorted({pc for pc, _ in real})
    loads = sorted({load for _, load in real})
    source = {}
    for i, pc in enumerate(p.name for p in config.prompt_classes):
        for j, level in enumerate(config.load.concurrency):
            cell_class = pc if pc in classes else classes[i % len(classes)]
            cell_load = float(level) if float(level) in loads else loads[min(j, len(loads) - 1)]
            pool = noise.baseline[(cell_class, cell_load)]
            for s in config.sampling:
                source[(pc, "concurrency", float(level), s.name)] = pool[(i + j) % len(pool)]
    template = next(iter(source.values())).sample.cell
    return Shape(name, config, layout, source, config.load.requests_per_cell, template)


def _requests(pool: PoolCell, n: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray, float,
                                                                          npt.NDArray[np.intp]]:
    """n requests resampled from the stored cell; the log ratio they move its rate by."""
    s = pool.sample
    idx = rng.integers(0, len(s.qualified_tokens), n)
    tokens, busy = s.qualified_tokens[idx], s.durations_s[idx]
    moved = math.log((tokens.sum() / busy.sum()) / (s.qualified_tokens.sum() / s.durations_s.sum()))
    return tokens, busy, moved, idx


def simulate_sweep(sh: Shape, noise: RealNoise, theta: float, rng: np.random.Generator, with_itl: bool = False,
                   baseline_only: bool = False) -> tuple[list[CellResult], dict[str, CellSample]]:
    """One sweep: per server life an offset, per window a run-to-run offset, requests resampled."""
    server_var, run_var = truth(noise.tps)
    itl_server, itl_run = truth(noise.itl)
    cells, samples = [], {}
    for arm, phase, replica, idents in sh.layout:
        if baseline_only and not arm.is_baseline:
            continue
        life = f"{arm.arm}/{phase}/{replica}"
        offset, itl_offset = rng.normal(0, math.sqrt(server_var)), rng.normal(0, math.sqrt(itl_server))
        for ident, key in idents:
            pool = sh.source[config_key(ident)]
            tokens, busy, moved, idx = _requests(pool, sh.requests, rng)
            effect = 0.0 if arm.is_baseline else theta
            rate = math.exp(pool.log_rate + effect + offset + rng.normal(0, math.sqrt(run_var)) + moved)
            cell = sh.template.model_copy(update={
                "identity": ident, "key": f"{key}-{phase}-{replica}", "server": life, "status": "ok", "reasons": [],
                "throughput": sh.template.throughput.model_copy(update={"qualified_tokens_per_s": rate})})
            scale = math.exp(itl_offset + rng.normal(0, math.sqrt(itl_run)))
            itl = tuple(pool.sample.itl_ms[i] * scale for i in idx) if with_itl else tuple(np.empty(0) for _ in idx)
            cells.append(cell)
            samples[cell.key] = CellSample(cell=cell, qualified_tokens=tokens, durations_s=busy,
                                           ttft_ms=np.full(len(idx), 1.0), itl_ms=itl)
    return cells, samples


def history(sh: Shape, noise: RealNoise, rng: np.random.Generator) -> list[RunValue]:
    """The repeated runs of ``analysis.noise_history`` earlier simulated nights (their baselines)."""
    out: list[RunValue] = []
    for night in range(sh.config.analysis.noise_history):
        cells, samples = simulate_sweep(sh, noise, 0.0, rng, baseline_only=True)
        out += earlier_runs(f"night-{night}", cells, samples, sh.config.slo, sh.config.analysis)
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


def policy_truth(sh: Shape, subject_ks: Mapping[float, int], speedup: float) -> float:
    """The true mix speedup of a k policy: k = 0 loads at 1, the others at ``speedup``, weighted by
    the mix's token shares over the true baseline rates."""
    mix = effective_mix(sh.config)
    shares = cell_token_shares(mix)
    base = cand = 0.0
    for (pc, load), f in shares.items():
        if f <= 0:
            continue
        mu = math.exp(sh.source[(pc, "concurrency", load, sh.config.sampling[0].name)].log_rate)
        base += f / mu
        cand += f / (mu * (speedup if subject_ks.get(load, 0) > 0 else 1.0))
    return base / cand


@dataclass
class Tally:
    """Counts per figure: covered / formed, adopted / offered."""

    hits: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: bool | None) -> None:
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

    def corrected(interval: Interval | None, truth: float) -> None:
        """A corrected bound states its confidence for all of the sweep's bounds at once."""
        found = _bounds(interval, truth)
        if found is not None:
            lows.append(found[0])
            highs.append(found[1])

    for d in v.decisions:
        c = d.comparison
        tally.add("cell marginal", _covers(c.qualified_tps_speedup if c else None, speedup))
        corrected(c.qualified_tps_speedup_corrected if c else None, speedup)
        tally.add("adopt: cell", d.verdict == "adopt")
    for m in v.mix:
        if m.name.endswith("-k-policy"):
            truth = policy_truth(sh, {float(c.load_value): c.k or 0 for c in m.cells}, speedup)
            corrected(m.fleet.speedup_corrected, truth)
            tally.add("adopt: policy at the mix", m.adoptable)
            continue
        tally.add("mix marginal", _covers(m.fleet.speedup, speedup))
        corrected(m.fleet.speedup_corrected, speedup)
        for f in m.per_class.values():
            tally.add("class marginal", _covers(f.speedup, speedup))
            corrected(f.speedup_corrected, speedup)
        tally.add("adopt: arm at the mix", m.adoptable)
    classes = class_verdicts(sh.config, v.decisions, v.mix, v.policies)
    for cv in classes:
        tally.add("adopt: class verdict", cv.verdict == "adopt")
    tally.add("corrected: every lower bound of the sweep at once", all(lows) if lows else None)
    tally.add("corrected: every upper bound of the sweep at once", all(highs) if highs else None)
    tally.add("adopt: anything in the sweep", any(d.verdict == "adopt" for d in v.decisions)
              or any(m.adoptable for m in v.mix) or any(cv.verdict == "adopt" for cv in classes))


# --- the canary -------------------------------------------------------------------------------------

def simulate_canary(noise: RealNoise, demo: Shape, with_from: bool, rng: np.random.Generator,
                    tally: Tally) -> None:
    """An A/A canary at the demo's c4 classes: both replicas baselines, paired prompt by prompt."""
    server_var, run_var = truth(noise.tps)
    itl_server, itl_run = truth(noise.itl)
    config = demo.config
    classes = []
    for (pc, load), found in sorted(noise.pairs.items()):
        if load != max(lv for _, lv in noise.pairs):
            continue
        opening, closing = found[int(rng.integers(0, len(found)))]
        n = len(opening.sample.qualified_tokens)
        idx = rng.integers(0, n, n)
        replicas: list[CellSample] = []
        opening_itl = float(np.percentile(opening.sample.pooled_itl_ms(), config.slo.percentile))
        for real in (opening, closing):
            s = real.sample
            same_rate = (s.qualified_tokens.sum() / s.durations_s.sum()) / math.exp(opening.log_rate)
            busy = s.durations_s * same_rate  # both real runs rescaled to the opening's rate and ITL: an A/A pair
            same_itl = opening_itl / float(np.percentile(s.pooled_itl_ms(), config.slo.percentile))
            tokens, busy = s.qualified_tokens[idx], busy[idx]
            moved = math.log((tokens.sum() / busy.sum()) / math.exp(opening.log_rate))
            rate = math.exp(opening.log_rate + rng.normal(0, math.sqrt(server_var)) +
                            rng.normal(0, math.sqrt(run_var)) + moved)
            scale = math.exp(rng.normal(0, math.sqrt(itl_server)) + rng.normal(0, math.sqrt(itl_run)))
            ident = s.cell.identity.model_copy(update={"sampling": "canary"})
            cell = demo.template.model_copy(update={
                "identity": ident, "key": f"canary-{pc}-{len(replicas)}", "status": "ok", "reasons": [],
                "throughput": demo.template.throughput.model_copy(update={"qualified_tokens_per_s": rate})})
            replicas.append(CellSample(cell=cell, qualified_tokens=tokens, durations_s=busy, ttft_ms=np.full(n, 1.0),
                                       itl_ms=tuple(s.itl_ms[i] * scale * same_itl for i in idx)))
        classes.append(PairedClass(pc, *replicas))
    measured: dict[Metric, RunNoise]
    noise_runs: list[RunValue]
    if with_from:  # the --from sweep's repeated runs and its noise history, as sweep_context reads them
        noise_runs = []
        for night in range(config.analysis.noise_history + 1):
            cells, samples = simulate_sweep(demo, noise, 0.0, rng, with_itl=True, baseline_only=True)
            noise_runs += earlier_runs(f"sweep-{night}", cells, samples, config.slo, config.analysis)
        metrics: tuple[Metric, Metric] = ("qualified_tokens_per_s", "itl")
        measured = {m: estimate_noise([r for r in noise_runs if r.metric == m], m, config.analysis.confidence)
                    for m in metrics}
    else:
        from tasks.canary.context import NO_SWEEP, no_noise

        measured, noise_runs = no_noise(config.analysis.confidence, NO_SWEEP), []
    family, claims = canary_family(classes, noise_runs, measured, config.slo, config.analysis)
    results = family.decide()
    label = "with --from" if with_from else "without --from"
    compared = []
    lows: list[bool] = []
    highs: list[bool] = []
    for paired in classes:
        comparison, decided = class_claims(paired, results, claims[paired.name], config.slo, measured)
        stated = comparison.qualified_tps_speedup is not None and comparison.qualified_tps_speedup.confidence
        tally.add(f"canary {label}: tokens/s marginal", _covers(comparison.qualified_tps_speedup, 1.0)
                  if stated else None)
        bounds = _bounds(comparison.qualified_tps_speedup_corrected, 1.0) if stated else None
        if bounds is not None:
            lows.append(bounds[0])
            highs.append(bounds[1])
        tally.add(f"canary {label}: ITL marginal", _covers(comparison.itl_speedup, 1.0)
                  if comparison.itl_speedup and comparison.itl_speedup.confidence else None)
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", help="stored sweep folders (default: every finished one under results/)")
    parser.add_argument("--sweeps-per-gain", type=int, default=200, dest="per_gain")
    parser.add_argument("--nightly-per-gain", type=int, default=100)
    parser.add_argument("--canaries", type=int, default=400)
    parser.add_argument("--shapes", default="demo,nightly")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-history", action="store_true",
                        help="every simulated sweep alone (its config's analysis.noise_history set to 0): a first run")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    console = Console()
    started = time.monotonic()
    noise = real_noise(stored_sweeps(args.sweeps), args.seed)
    if not noise.tps.estimated or not noise.itl.estimated:
        print(f"no run-to-run estimate in the stored sweeps: {noise.tps.source}; {noise.itl.source}", file=sys.stderr)
        return 2
    (server, run), (itl_server, itl_run) = truth(noise.tps), truth(noise.itl)
    console.print(f"REAL noise from {len(noise.sweeps)} stored sweeps (a negative estimate taken as 0): tokens/s "
                  f"server {server:.5f}, run {run:.5f} (tau {noise.tau:.3f} [{noise.tps.relative_sd_low:.3f}, "
                  f"{noise.tps.relative_sd_high:.3f}]); ITL server {itl_server:.5f}, run {itl_run:.5f}; "
                  f"{noise.tps.source}", highlight=False)
    rng = np.random.default_rng(args.seed)
    out: dict[str, object] = {"noise": {"sweeps": noise.sweeps, "tokens_per_s": noise.tps.model_dump(),
                                        "itl": noise.itl.model_dump()}, "shapes": {}}
    for name in args.shapes.split(","):
        sh = shape(name, noise, history=not args.no_history)
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
        out["shapes"][name] = _report(console, name, sh, by_gain, overall, per_gain)  # type: ignore[index]
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
        console, f"{name}: coverage at 95 % over all gains ({per_gain} sweeps per gain, {cells} cells each; "
        "SIMULATED on real noise)", coverage)}
    table = Table(title=f"{name}: adopt rates per true gain (x tau); at 0 every adopt is false")
    table.add_column("figure")
    for gain in by_gain:
        table.add_column(f"{gain:+g} tau")
    names = sorted(k for k in overall.hits if k.startswith("adopt"))
    rates: dict[str, dict[str, float | None]] = {}
    for figure in names:
        row = [by_gain[g].rate(figure)[0] for g in by_gain]
        rates[figure] = {f"{g:+g}": r for g, r in zip(by_gain, row, strict=True)}
        table.add_row(figure, *("n/a" if r is None else f"{r:.1%}" for r in row))
    console.print(table)
    result["adopt"] = rates
    return result


if __name__ == "__main__":
    raise SystemExit(main())
