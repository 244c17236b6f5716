"""What a canary compares against: the replicas (checked before anything is sent) and, with
``--from``, the sweep's SLO, analysis settings, noise floor, break-even and rollback arguments;
and where its verdict goes (MLflow, and a Prefect event on ``rollback``)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specfleet.contract import AnalysisSpec, SLOSpec
from specfleet.contract.matrix import arm_plans
from specfleet.contract.workload import LoadSpec
from specfleet.errors import InputError
from specfleet.production.canary import CanaryResult
from specfleet.production.replica_age import Replica
from specfleet.stats.runs import Metric, RunValue
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import NO_REPEATS, NoiseDesign, RunNoise
from specfleet.verdicts.evidence import Evidence
from specfleet_tasks.arm.cell import CellPlan
from specfleet_tasks.engine.endpoint_check import check_openai_endpoint, served_models
from specfleet_tasks.loadgen import ServerEndpoint
from specfleet_tasks.plan.prompt_sets import resolve_prompts

DEFAULT_QUALITY_TOLERANCE = 0.1
"""Without a sweep: one item in ten worse on average (the demo config's own tolerance)."""
NO_SLO_MS = float("inf")
STANDALONE_EXPERIMENT = "specfleet-canary"
CLIENT_LAG_LIMIT_MS = CellPlan.client_lag_limit_ms
MAX_ERROR_FRACTION = float(LoadSpec.model_fields["max_error_fraction"].default)
"""A replica with more failed requests has a cell that is not usable: its class is not compared."""
NO_SWEEP = "no sweep (--from): no estimate of replica-to-replica noise"


@dataclass(frozen=True)
class CanaryLoad:
    concurrency: int | None
    rate: float | None
    requests: int
    warmup: int
    max_tokens: int
    temperature: float


@dataclass(frozen=True)
class SweepContext:
    """What the canary reads from a sweep: its SLO and analysis settings, its run-to-run noise (and
    the repeated runs it was estimated from, so the canary's intervals redraw it), the break-even
    tokens per step of the candidate's arm, and the speculation-off server arguments."""

    sweep_id: str | None
    experiment: str
    """MLflow experiment of the canary's run: the sweep's config name, beside its runs."""
    slo: SLOSpec
    analysis: AnalysisSpec
    quality_tolerance: float
    noise: dict[Metric, RunNoise]
    noise_runs: list[RunValue]
    """The sweep's repeated runs (both figures): what ``noise`` was estimated from."""
    arm: str | None
    break_even_tokens_per_step: float | None
    """At the canary's load, for ``arm`` (the monitor's figure: speculative step / baseline step)."""
    rollback_server_args: list[str] | None
    notes: list[str]
    client_lag_limit_ms: float = CLIENT_LAG_LIMIT_MS
    """A cell whose client fell further behind is invalid: the sweep's setting with ``--from``."""
    max_error_fraction: float = MAX_ERROR_FRACTION
    """A cell with more failed requests is invalid: the sweep's setting with ``--from``."""


def no_noise(confidence: float, why: str) -> dict[Metric, RunNoise]:
    return {metric: RunNoise(metric=metric, identified="none", server_var=None, run_var=None, runs=0, groups=0,
                             servers=0, relative_sd=None, relative_sd_low=None, relative_sd_high=None,
                             confidence=confidence, source=why)
            for metric in ("qualified_tokens_per_s", "itl")}


def standalone_context(slo: SLOSpec) -> SweepContext:
    analysis = AnalysisSpec()
    return SweepContext(sweep_id=None, experiment=STANDALONE_EXPERIMENT, slo=slo, analysis=analysis,
                        quality_tolerance=DEFAULT_QUALITY_TOLERANCE, noise=no_noise(analysis.confidence, NO_SWEEP),
                        noise_runs=[], arm=None, break_even_tokens_per_step=None, rollback_server_args=None, notes=[])


def _repeated(runs: list[RunValue]) -> list[RunValue]:
    """The runs in repeated groups: the only ones that say anything about the noise."""
    design = NoiseDesign.of(runs)
    return [runs[i] for i in design.rows]


def sweep_context(sweep: str, results_dir: Path, load: CanaryLoad, arm: str | None) -> SweepContext:
    """The sweep's settings and noise at the canary's load (``--from``), and from its monitor basis
    (``specfleet.production.monitor_basis``: the adopted arm, or ``arm``) the break-even tokens per step at
    the canary's concurrency and the speculation-off server arguments."""
    from specfleet_tasks.monitor.rules import sweep_basis
    from specfleet_tasks.store.sweep import StoredSweep

    stored = StoredSweep.find(sweep, results_dir)
    config = stored.config
    samples = {c.key: CellSample.from_records(c, stored.records[c.key], config.slo)
               for c in stored.cells if c.usable and c.key in stored.records}
    evidence = Evidence.of(stored.cells, samples, config.slo, config.analysis, arm_plans(config)[0].arm,
                           stored.noise_history())
    noise_runs = [*_repeated(evidence.tps.runs), *_repeated(evidence.itl.runs)]
    tolerance = config.equivalence.quality_tolerance
    break_even, watched, notes = None, arm, []
    try:
        basis, _ = sweep_basis(stored, arm)
        watched = basis.arm
        break_even = next((b.break_even_tokens_per_step for b in basis.buckets if b.concurrency == load.concurrency),
                          None)
        if break_even is None:
            notes.append(f"{stored.id}: no break-even for {basis.arm} at this load")
    except InputError as err:  # no adopted arm and none named, or no break-even at any load
        if arm is not None:
            raise
        notes.append(f"no break-even: {err}")
    off = stored.report.server_args.speculation_off if stored.report.server_args is not None else None
    if not evidence.noise["qualified_tokens_per_s"].estimated:
        notes.append(f"{stored.id}: {evidence.noise['qualified_tokens_per_s'].source or NO_REPEATS}: "
                     "no estimate of replica-to-replica noise")
    return SweepContext(
        sweep_id=stored.id, experiment=config.name, slo=config.slo, analysis=config.analysis,
        quality_tolerance=DEFAULT_QUALITY_TOLERANCE if tolerance is None else tolerance, noise=evidence.noise,
        noise_runs=noise_runs, arm=watched, break_even_tokens_per_step=break_even, rollback_server_args=off,
        notes=notes, client_lag_limit_ms=config.load.client_lag_limit_ms,
        max_error_fraction=config.load.max_error_fraction)


def _replica(url: str, flag: str, model: str | None, api_key: str | None, ca_bundle: Path | None,
             insecure: bool) -> ServerEndpoint:
    endpoint = ServerEndpoint.from_url(url, model or "", api_key, ca_bundle=ca_bundle, insecure=insecure, flag=flag)
    if model is not None:
        check_openai_endpoint(endpoint, flag)
        return endpoint
    models = served_models(endpoint, flag)
    if len(models) != 1:
        raise InputError(f"{flag} {endpoint.base_url}: serves {', '.join(models) or 'no model'}; name one with --model")
    return replace(endpoint, model=models[0])


def canary_setup(baseline: str, candidate: str, model: str | None, api_key: str | None, prompts: Sequence[str],
                 load: CanaryLoad, from_sweep: str | None, arm: str | None, results_dir: Path,
                 slo_ttft_ms: float | None, slo_itl_ms: float | None, ca_bundle: Path | None = None,
                 insecure: bool = False, baseline_twin: str | None = None
                 ) -> tuple[dict[Replica, ServerEndpoint], SweepContext]:
    """Every replica (the baseline twin too, where given) answers as an OpenAI server, every prompt
    set reads, the sweep loads: else one line, exit 2. Credentials in a replica's URL become its
    Authorization header (``ServerEndpoint.from_url``)."""
    urls: dict[Replica, tuple[str, str]] = {"baseline": (baseline, "--baseline"),
                                            "candidate": (candidate, "--candidate")}
    if baseline_twin is not None:
        urls["twin"] = (baseline_twin, "--baseline-twin")
    replicas = {replica: _replica(url, flag, model, api_key, ca_bundle, insecure)
                for replica, (url, flag) in urls.items()}
    for name in prompts:
        resolve_prompts(name)
    if len({Path(name).stem for name in prompts}) != len(prompts):
        raise InputError(f"--prompts: two prompt sets share a class name ({', '.join(prompts)})")
    if from_sweep is None:
        slo = SLOSpec(ttft_ms=slo_ttft_ms or NO_SLO_MS, itl_ms=slo_itl_ms or NO_SLO_MS)
        return replicas, standalone_context(slo)
    if slo_ttft_ms is not None or slo_itl_ms is not None:
        raise InputError("--slo-ttft-ms/--slo-itl-ms: with --from the sweep's SLO applies")
    return replicas, sweep_context(from_sweep, results_dir, load, arm)


def publish(result: CanaryResult, canary_dir: Path, experiment: str, tracking: str | None,
            params: Mapping[str, str]) -> list[str]:
    """Log the canary to MLflow (the sweep's experiment with ``--from``). Best effort: the verdict
    is already stored in ``canary_dir``; what could not be logged comes back as a note. (A
    ``rollback``'s Prefect event is ``specfleet_flows.canary.emit_rollback``'s: Prefect stays in flows/.)"""
    from specfleet_tasks.tracking.runs import log_canary_run, tracking_uri, unreachable

    notes: list[str] = []
    uri = tracking_uri(tracking)
    reason = unreachable(uri)
    if reason is None:
        log_canary_run(uri, experiment, canary_dir.name, result, params)
    else:
        notes.append(f"MLflow not reachable ({reason}): the canary is in {canary_dir}/canary.json only")
    return notes

