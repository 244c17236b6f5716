"""What a sweep's verdicts are made from: every usable run as a run value (SLO-qualified tokens/s
and the SLO-percentile ITL), the run-to-run noise pooled over the sweep, and the one family in
which every claim the sweep could adopt (cells, classes, arms at the mix, k policies) is decided
(``specfleet.verdicts.rule``)."""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from specfleet.contract.checks import AnalysisSpec
from specfleet.contract.workload import SLOSpec
from specfleet.results.cell import CellResult
from specfleet.stats.runs import ConfigKey, Metric, RunTable, RunValue, config_key, percentile_run, rate_run
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import NoiseDesign, RunNoise, estimate_noise
from specfleet.verdicts.rule import Claim, ClaimResult, Family


def run_values(cells: Sequence[CellResult], samples: Mapping[str, CellSample], slo: SLOSpec,
               analysis: AnalysisSpec) -> tuple[list[RunValue], list[RunValue]]:
    """(SLO-qualified tokens/s, SLO-percentile ITL) run values of every usable cell with a sample."""
    tps_runs: list[RunValue] = []
    itl_runs: list[RunValue] = []
    for cell in cells:
        sample = samples.get(cell.key)
        if not cell.usable or sample is None:
            continue
        key = config_key(cell.identity)
        if (rate := rate_run(sample, key)) is not None:
            tps_runs.append(rate)
        if (gaps := percentile_run(sample, key, slo.percentile)) is not None:
            itl_runs.append(gaps)
    return tps_runs, itl_runs


def earlier_runs(sweep_id: str, cells: Sequence[CellResult], samples: Mapping[str, CellSample], slo: SLOSpec,
                 analysis: AnalysisSpec) -> list[RunValue]:
    """An earlier sweep's repeated runs (both figures) as noise history: its arms and server lives
    named after it, so its groups stay its own and no claim of this sweep reads them."""
    out = []
    for runs in run_values(cells, samples, slo, analysis):
        repeated = [runs[i] for i in NoiseDesign.of(runs).rows]
        out += [RunValue(r.metric, f"{sweep_id}: {r.label}", f"{sweep_id}/{r.arm}", r.config, f"{sweep_id}/{r.server}",
                         r.log_value) for r in repeated]
    return out


def sequence_runs(sweep_id: str, cells: Sequence[CellResult], samples: Mapping[str, CellSample], slo: SLOSpec,
                  analysis: AnalysisSpec, arms: Collection[str]) -> list[RunValue]:
    """An earlier look's runs (both figures) of ``arms`` (``analysis.nights``): more runs of the same arms
    and configurations, which this look's claims read; its server lives named after it, so the
    variance model keeps each night's servers their own."""
    out = []
    for runs in run_values([c for c in cells if c.identity.arm in arms], samples, slo, analysis):
        out += [RunValue(r.metric, f"{sweep_id}: {r.label}", r.arm, r.config, f"{sweep_id}/{r.server}", r.log_value)
                for r in runs]
    return out


@dataclass
class Evidence:
    tps: RunTable
    itl: RunTable
    noise: dict[Metric, RunNoise]
    family: Family
    """The claims the sweep could adopt."""
    shown: Family
    """Claims shown beside them and never decided on (a cell's ITL speedup): their marginal intervals."""
    baseline_arm: str

    @classmethod
    def of(cls, cells: Sequence[CellResult], samples: Mapping[str, CellSample], slo: SLOSpec,
           analysis: AnalysisSpec, baseline_arm: str, history: Sequence[RunValue] = (),
           sequence: Sequence[RunValue] = ()) -> "Evidence":
        """Run values of every usable cell with a per-request sample, and ``sequence`` (the earlier looks'
        runs, ``analysis.nights``), which the claims read too; the noise from their repeats and from
        ``history`` (earlier sweeps' repeated runs, ``analysis.noise_history``), which no claim reads."""
        tps_runs, itl_runs = run_values(cells, samples, slo, analysis)
        tps_runs += [r for r in sequence if r.metric == "qualified_tokens_per_s"]
        itl_runs += [r for r in sequence if r.metric == "itl"]
        tps_runs += [r for r in history if r.metric == "qualified_tokens_per_s"]
        itl_runs += [r for r in history if r.metric == "itl"]
        tps, itl = RunTable.of(tps_runs), RunTable.of(itl_runs, offset=len(tps_runs))
        earlier = len({r.arm.split("/", 1)[0] for r in history})
        pooled = f"; pooled with {earlier} earlier sweeps of this config and fingerprint" if earlier else ""
        noise: dict[Metric, RunNoise] = {}
        metrics: tuple[tuple[Metric, list[RunValue]], ...] = (("qualified_tokens_per_s", tps_runs), ("itl", itl_runs))
        for metric, runs in metrics:
            found = estimate_noise(runs, metric, analysis.confidence)
            noise[metric] = found.model_copy(update={"source": found.source + pooled}) if found.estimated else found
        runs = [*tps_runs, *itl_runs]
        family = Family(runs, noise, analysis.confidence, analysis.error_control, analysis.seed)
        shown = Family(runs, noise, analysis.confidence, analysis.error_control, analysis.seed)
        return cls(tps, itl, noise, family, shown, baseline_arm)

    def decide(self) -> dict[str, ClaimResult]:
        """The family decided, and the shown claims' intervals beside it (keys never collide)."""
        return {**self.family.decide(), **self.shown.decide()}

    def table(self, metric: Metric) -> RunTable:
        return self.tps if metric == "qualified_tokens_per_s" else self.itl

    def speedup_claim(self, key: str, kind: str, arm: str, config: ConfigKey, metric: Metric,
                      break_even: float = 1.0) -> Claim | None:
        """Candidate over baseline at one configuration (for ITL, baseline over candidate: lower is
        faster); None where either side has no run of this metric."""
        table = self.table(metric)
        if not (table.has(arm, config) and table.has(self.baseline_arm, config)):
            return None
        sign = 1.0 if metric == "qualified_tokens_per_s" else -1.0
        log = sign * (table.log_mean(arm, config) - table.log_mean(self.baseline_arm, config))
        weights = table.weights(arm, config, sign)
        for i, w in table.weights(self.baseline_arm, config, -sign).items():
            weights[i] = weights.get(i, 0.0) + w
        return Claim(key=key, kind=kind, log_estimate=log, weights=weights,  # type: ignore[arg-type]
                     break_even=break_even, metric=metric)
