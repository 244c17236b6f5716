"""What a canary compares against: the replicas (checked before anything is sent) and, with
``--from``, the sweep's SLO, analysis settings, noise floor, break-even and rollback arguments;
and where its verdict goes (MLflow, and a Prefect event on ``rollback``)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specfleet.canary import CanaryResult
from specfleet.contract import AnalysisSpec, SLOSpec
from specfleet.errors import InputError
from specfleet.stats.noise import baseline_noise, sweep_noise_floor
from tasks.arm.cell import CellPlan
from tasks.engine.endpoint_check import check_openai_endpoint, served_models
from tasks.loadgen import ClosedLoop, Load, PoissonArrivals, ServerEndpoint
from tasks.plan.prompt_sets import resolve_prompts

DEFAULT_QUALITY_TOLERANCE = 0.1
"""Without a sweep: one item in ten worse on average (the demo config's own tolerance)."""
NO_SLO_MS = float("inf")
STANDALONE_EXPERIMENT = "specfleet-canary"
CLIENT_LAG_LIMIT_MS = CellPlan.client_lag_limit_ms


@dataclass(frozen=True)
class CanaryLoad:
    concurrency: int | None
    rate: float | None
    requests: int
    warmup: int
    max_tokens: int
    temperature: float

    def load(self) -> Load:
        return ClosedLoop(self.concurrency) if self.concurrency is not None else PoissonArrivals(self.rate or 1.0, 0)


@dataclass(frozen=True)
class SweepContext:
    """What the canary reads from a sweep: its SLO and analysis settings, its baseline noise, the
    break-even tokens per step of the candidate's arm, and the speculation-off server arguments."""

    sweep_id: str | None
    experiment: str
    """MLflow experiment of the canary's run: the sweep's config name, beside its runs."""
    slo: SLOSpec
    analysis: AnalysisSpec
    quality_tolerance: float
    floors: dict[str, float]
    """Largest baseline spread per prompt class at the canary's load."""
    sweep_floor: float | None
    arm: str | None
    break_even_tokens_per_step: float | None
    """At the canary's load, for ``arm`` (the monitor's figure: speculative step / baseline step)."""
    rollback_server_args: list[str] | None
    notes: list[str]
    client_lag_limit_ms: float = CLIENT_LAG_LIMIT_MS
    """A cell whose client fell further behind is invalid: the sweep's setting with ``--from``."""

    def noise(self, prompt_class: str) -> tuple[float | None, str]:
        if self.sweep_id is None:
            return None, "no sweep (--from): bootstrap intervals over requests only"
        if prompt_class in self.floors:
            return self.floors[prompt_class], f"{self.sweep_id}: baseline spread of {prompt_class} at this load"
        if self.sweep_floor is not None:
            return self.sweep_floor, f"{self.sweep_id}: largest baseline spread in the sweep"
        return None, f"{self.sweep_id}: no repeated baseline; bootstrap intervals over requests only"


def standalone_context(slo: SLOSpec) -> SweepContext:
    return SweepContext(sweep_id=None, experiment=STANDALONE_EXPERIMENT, slo=slo, analysis=AnalysisSpec(),
                        quality_tolerance=DEFAULT_QUALITY_TOLERANCE, floors={}, sweep_floor=None, arm=None,
                        break_even_tokens_per_step=None, rollback_server_args=None, notes=[])


def sweep_context(sweep: str, results_dir: Path, load: CanaryLoad, arm: str | None) -> SweepContext:
    """The sweep's settings and noise at the canary's load (``--from``), and from its monitor basis
    (``specfleet.monitor_basis``: the adopted arm, or ``arm``) the break-even tokens per step at
    the canary's concurrency and the speculation-off server arguments."""
    from tasks.monitor.rules import sweep_basis
    from tasks.report.load import find_sweep_dir, load_report_data

    data = load_report_data(find_sweep_dir(sweep, results_dir))
    mode, value = ("concurrency", float(load.concurrency)) if load.concurrency is not None else ("rate", load.rate)
    floors: dict[str, float] = {}
    for floor in baseline_noise(data.cells).values():
        if (floor.load_mode, floor.load_value) == (mode, value) and floor.relative_spread is not None:
            floors[floor.prompt_class] = max(floors.get(floor.prompt_class, 0.0), floor.relative_spread)
    tolerance = data.config.equivalence.quality_tolerance
    break_even, watched, notes = None, arm, []
    try:
        basis, _ = sweep_basis(data.sweep_id, results_dir, arm)
        watched = basis.arm
        break_even = next((b.break_even_tokens_per_step for b in basis.buckets if b.concurrency == load.concurrency),
                          None)
        if break_even is None:
            notes.append(f"{data.sweep_id}: no break-even for {basis.arm} at this load")
    except InputError as err:  # no adopted arm and none named, or no break-even at any load
        if arm is not None:
            raise
        notes.append(f"no break-even: {err}")
    off = data.server_args.speculation_off if data.server_args is not None else None
    return SweepContext(
        sweep_id=data.sweep_id, experiment=data.config.name, slo=data.config.slo, analysis=data.config.analysis,
        quality_tolerance=DEFAULT_QUALITY_TOLERANCE if tolerance is None else tolerance, floors=floors,
        sweep_floor=sweep_noise_floor(baseline_noise(data.cells)), arm=watched, break_even_tokens_per_step=break_even,
        rollback_server_args=off, notes=notes, client_lag_limit_ms=data.config.load.client_lag_limit_ms)


def _replica(url: str, flag: str, model: str | None, api_key: str | None) -> ServerEndpoint:
    if model is not None:
        endpoint = ServerEndpoint(url, model, api_key)
        check_openai_endpoint(endpoint, flag)
        return endpoint
    models = served_models(ServerEndpoint(url, "", api_key), flag)
    if len(models) != 1:
        raise InputError(f"{flag} {url}: serves {', '.join(models) or 'no model'}; name one with --model")
    return ServerEndpoint(url, models[0], api_key)


def canary_setup(baseline: str, candidate: str, model: str | None, api_key: str | None, prompts: Sequence[str],
                 load: CanaryLoad, from_sweep: str | None, arm: str | None, results_dir: Path,
                 slo_ttft_ms: float | None, slo_itl_ms: float | None) -> tuple[list[ServerEndpoint], SweepContext]:
    """Both replicas answer as OpenAI servers, every prompt set reads, the sweep loads: else one line, exit 2."""
    replicas = [_replica(baseline, "--baseline", model, api_key), _replica(candidate, "--candidate", model, api_key)]
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
    ``rollback``'s Prefect event is ``flows.canary.emit_rollback``'s: Prefect stays in flows/.)"""
    from tasks.tracking.runs import log_canary_run, tracking_uri, unreachable

    notes: list[str] = []
    uri = tracking_uri(tracking)
    reason = unreachable(uri)
    if reason is None:
        log_canary_run(uri, experiment, canary_dir.name, result, params)
    else:
        notes.append(f"MLflow not reachable ({reason}): the canary is in {canary_dir}/canary.json only")
    return notes

