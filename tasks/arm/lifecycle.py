"""One arm's whole server life: start, equivalence and quality probes, its cells, stop.

This is the unit of work a Ray task runs (``tasks/cluster/stage.py``); it returns plain results
and writes each cell to the results store as soon as it is measured. Under a budget
(``specfleet.planning.budget``) its cells run most decision-relevant first, a cell that does not fit is
not started, and a server is not started when none of its cells fits.
"""

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig
from specfleet.contract.prompts import PromptItem
from specfleet.contract.server_args import server_args
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import ClassAnswers, ItemAnswer, QualityProbe, item_answers, quality_samplings
from specfleet.gates.scored_set import ScoredSet
from specfleet.planning.budget import CellBudget, NotMeasured, bracket_keys, by_priority, fits, not_measured
from specfleet.planning.replicas import server_name
from specfleet.results import ArmTiming, CellResult
from specfleet.stats.equivalence import planned_samples_per_prompt, sample_seeds
from specfleet_tasks.arm.cell import CellPlan, measure_cell
from specfleet_tasks.arm.energy import EnergyWindow, find_counter
from specfleet_tasks.arm.probes import answer_probe, greedy_probe, stochastic_probe
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.engines import arm_engine
from specfleet_tasks.engine.features import per_request_spec_metrics
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import ArmServer, ArmStartError, log_tail
from specfleet_tasks.engine.startups import record_startup, startup_key
from specfleet_tasks.engine.synthetic_plugin import arm_server_env
from specfleet_tasks.loadgen import (
    ClosedLoop,
    Load,
    PoissonArrivals,
    RequestSettings,
    ServerEndpoint,
    route_for,
    run_async,
)
from specfleet_tasks.store.results import ResultsStore, probe_file

SERVED_MODEL_NAME = "specfleet-target"


@dataclass
class ArmOutcome:
    """What came of one arm; ``error`` is set when a server failed to start or died for good."""

    arm: str
    cells: list[CellResult] = field(default_factory=list)
    error: str | None = None
    timing: ArmTiming = field(default_factory=ArmTiming)
    not_measured: list[NotMeasured] = field(default_factory=list)
    """Cells the budget did not start."""


@dataclass
class _Clock:
    """Accumulates an arm's phases into its ``ArmTiming``."""

    started: float = field(default_factory=time.monotonic)
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("startup_s", "probe_s", "warmup_s",
                                                                            "measured_s"), 0.0))
    server_starts: int = 0

    def timing(self) -> ArmTiming:
        return ArmTiming(**self.phases, wall_s=time.monotonic() - self.started, server_starts=self.server_starts,
                         restarts=max(0, self.server_starts - 1))


def api_key(config: SweepConfig) -> str | None:
    name = config.engine.api_key_env
    return os.environ.get(name) if name else None


def probe_prompts(config: SweepConfig, prompts_by_class: dict[str, list[PromptItem]]) -> list[PromptItem]:
    name = config.equivalence.prompt_class or config.prompt_classes[0].name
    return prompts_by_class[name][: config.equivalence.prompts]


def cell_plan(
    config: SweepConfig, identity: CellIdentity, key: str, prompts: Sequence[PromptItem]
) -> CellPlan:
    pclass = next(p for p in config.prompt_classes if p.name == identity.prompt_class)
    sampling = next(s for s in config.sampling if s.name == identity.sampling)
    load: Load = (ClosedLoop(int(identity.load_value)) if identity.load_mode == "concurrency"
                  else PoissonArrivals(identity.load_value, config.load.arrival_seed))
    settings = RequestSettings(
        route=route_for(prompts), max_tokens=pclass.max_output_tokens, ignore_eos=config.load.ignore_eos,
        sampling=sampling, timeout_s=config.load.request_timeout_s,
    )
    return CellPlan(
        identity=identity, key=key, prompts=prompts, settings=settings, load=load,
        requests=config.load.requests_per_cell, warmup_requests=config.load.warmup_requests,
        slo=config.slo, max_error_fraction=config.load.max_error_fraction,
        client_lag_limit_ms=config.load.client_lag_limit_ms,
        adaptive_stopping=config.load.adaptive_stopping, confidence=config.analysis.confidence,
    )


@dataclass
class _Gate:
    """Which cells may start: under a ``budget``, those that fit (an opening baseline cell with its
    closing twin) and, in the closing baseline, only the ``bracket`` cells: a closing cell whose
    opening twin was not measured brackets nothing (``specfleet.planning.budget``); without one, every cell."""

    budget: CellBudget | None = None
    closing: bool = False
    bracket: frozenset[str] = frozenset()
    committed_s: float = 0.0
    """Twins of the opening cells this server measured: the closing stage owes them."""

    def allows(self, key: str, now_unix_s: float) -> bool:
        if self.budget is None or key in self.bracket:
            return True
        return not self.closing and fits(self.budget, key, now_unix_s, self.closing, self.committed_s)

    def commit(self, key: str) -> None:
        if self.budget is not None:
            self.committed_s += self.budget.twin_s.get(key, 0.0)

    def start_s(self, arm: str) -> float:
        """The arm's predicted start-up and probes."""
        return 0.0 if self.budget is None else self.budget.server_start_s.get(arm, 0.0)

    def worth_a_start(self, arm: str, cells: Sequence[tuple[CellIdentity, str]]) -> bool:
        """Does any of ``cells`` fit once the server has started?"""
        return any(self.allows(key, time.time() + self.start_s(arm)) for _, key in cells)

    def skipped(self, identity: CellIdentity, key: str, start_s: float = 0.0) -> NotMeasured:
        assert self.budget is not None
        if self.closing:
            return NotMeasured(identity=identity, key=key, detail="its opening twin was not measured: nothing to "
                               "bracket")
        return not_measured(self.budget, identity, key, time.time(), self.closing, start_s, self.committed_s)


def _server(config: SweepConfig, arm: ArmPlan, resolved: dict[str, str], log_path: Path) -> ArmServer:
    port = free_port(config.engine.host)
    args = server_args(config.engine, config.models.target, arm, resolved, port, SERVED_MODEL_NAME,
                       tensor_parallel_size=config.hardware.tensor_parallel_size,
                       per_request_spec_metrics=per_request_spec_metrics(arm))
    return ArmServer(
        args, arm_server_env(config.engine, arm), config.engine.host, port, log_path,
        config.engine.startup_timeout_s, config.engine.stop_grace_s, api_key(config),
        Path(config.engine.ca_bundle) if config.engine.ca_bundle else None, arm_engine(),
    )


async def _probe(config: SweepConfig, arm: ArmPlan, endpoint: ServerEndpoint, prompts: list[PromptItem],
                 store: ResultsStore) -> None:
    """Greedy continuations (twice on the baseline: the numerical-stability control) and samples."""
    max_tokens = config.equivalence.greedy_max_tokens
    greedy = await greedy_probe(endpoint, prompts, max_tokens)
    repeat = await greedy_probe(endpoint, prompts, max_tokens) if arm.is_baseline else None
    spec, sampled = config.equivalence.stochastic, None
    if spec is not None:
        _, planned = planned_samples_per_prompt(spec, len(prompts))
        sampled = await stochastic_probe(endpoint, prompts, sample_seeds(config.analysis.seed, arm.arm, planned),
                                         spec.tokens_per_sample, spec.temperature)
    payload = EquivalenceProbe(arm=arm.arm, greedy=greedy, greedy_repeat=repeat, stochastic=sampled)
    store.write_json(probe_file("equivalence", arm.arm), payload)


async def _answer_scored_sets(config: SweepConfig, arm: ArmPlan, endpoint: ServerEndpoint,
                              scored_sets: Mapping[str, ScoredSet | None], store: ResultsStore) -> None:
    """Each class's scored set answered at greedy and at each sampling mode, scored: the quality gate's input."""
    classes: dict[str, ClassAnswers | None] = {}
    for pc in config.prompt_classes:
        scored = scored_sets.get(pc.name)
        if scored is None:
            classes[pc.name] = None
            continue
        prompts = [item.as_prompt() for item in scored.items]
        answers: dict[str, dict[str, ItemAnswer]] = {}
        for sampling in quality_samplings(config):
            texts, errors = await answer_probe(endpoint, prompts, pc.max_output_tokens, sampling)
            answers[sampling.name] = item_answers(scored.items, texts, errors)
        classes[pc.name] = ClassAnswers(source=scored.source, sha256=scored.sha256, answers=answers)
    store.write_json(probe_file("quality", arm.arm), QualityProbe(arm=arm.arm, classes=classes))


def run_arm(
    config: SweepConfig,
    arm: ArmPlan,
    cells: Sequence[tuple[CellIdentity, str]],
    resolved: dict[str, str],
    prompts_by_class: dict[str, list[PromptItem]],
    store: ResultsStore,
    probe: bool = True,
    scored_sets: Mapping[str, ScoredSet | None] | None = None,
    replica: int = 0,
    budget: CellBudget | None = None,
    closing: bool = False,
) -> ArmOutcome:
    """Start the arm's server, probe equivalence, answer the ``scored_sets`` (by prompt class; None:
    no quality probe), measure each (identity, key) cell, stop. ``replica`` names the server's log.

    Cells the store already holds complete are skipped, so a retried task never re-measures.
    A server that dies mid-cell fails that cell (reason and log tail kept) and is restarted,
    up to ``engine.max_restarts`` times, for the cells after it; ``--resume`` redoes the failed one.
    Under a ``budget`` (``closing``: these are the closing baseline's cells) cells run by priority
    and those that do not fit are returned as not measured; no server starts when none fits.
    """
    run = _ArmRun(config, arm, resolved, prompts_by_class, store, store.log_path(server_name(arm.arm, replica)))
    done = store.complete_keys()
    remaining = [(identity, key) for identity, key in cells if key not in done]
    if budget is not None:  # a replica's check cell stays first: it repeats the previous replica's first cell
        remaining = sorted(by_priority(budget, remaining, lambda cell: cell[1]), key=lambda c: not c[0].replica_check)
        measured = (c.identity for c in store.cells() if c.key in done)
        run.gate = _Gate(budget, closing, bracket_keys(remaining, measured) if closing else frozenset())
    server_environ = os.environ | arm_server_env(config.engine, arm)  # its CUDA_VISIBLE_DEVICES: the GPUs Ray assigned
    energy = EnergyWindow(*find_counter(environ=server_environ)) if remaining else None
    while remaining and energy is not None:
        if run.clock.server_starts > config.engine.max_restarts:
            run.outcome.error = (f"{run.outcome.error}; not restarted again (engine.max_restarts "
                                 f"{config.engine.max_restarts}), {len(remaining)} cells left for --resume")
            break
        if not run.gate.worth_a_start(arm.arm, remaining):
            start_s = run.gate.start_s(arm.arm)
            run.outcome.not_measured += [run.gate.skipped(identity, key, start_s) for identity, key in remaining]
            break
        try:
            first = run.clock.server_starts == 0 and not arm.synthetic  # a synthetic arm has no gate to probe for
            remaining = run.server_life(remaining, energy, probe and first, scored_sets if first else None)
        except ArmStartError as err:
            run.outcome.error = str(err)
            break
    run.outcome.timing = run.clock.timing()
    return run.outcome


@dataclass
class _ArmRun:
    """One arm's inputs and what its server lives have produced so far."""

    config: SweepConfig
    arm: ArmPlan
    resolved: dict[str, str]
    prompts_by_class: dict[str, list[PromptItem]]
    store: ResultsStore
    log_path: Path
    clock: _Clock = field(default_factory=_Clock)
    gate: _Gate = field(default_factory=_Gate)
    outcome: ArmOutcome = field(init=False)

    def __post_init__(self) -> None:
        self.outcome = ArmOutcome(arm=self.arm.arm)

    def server_life(self, cells: list[tuple[CellIdentity, str]], energy: EnergyWindow, probe: bool,
                    scored_sets: Mapping[str, ScoredSet | None] | None) -> list[tuple[CellIdentity, str]]:
        """One server start: probes, then cells until done or the server dies. Returns the
        cells still owed after a death (the one it died in is stored as failed)."""
        config, arm, store, phases = self.config, self.arm, self.store, self.clock.phases
        engine_version = engine_distribution()[1]
        self.clock.server_starts += 1
        with _server(config, arm, self.resolved, self.log_path) as server:
            life = f"{self.log_path.stem}@{datetime.now(UTC).isoformat(timespec='seconds')}"
            phases["startup_s"] += server.startup_s or 0.0
            if server.startup_s:
                record_startup(startup_key(config, arm), server.startup_s)
            endpoint = server.endpoint(SERVED_MODEL_NAME)
            if probe or scored_sets is not None:
                t0 = time.monotonic()
                if probe:
                    run_async(_probe(config, arm, endpoint, probe_prompts(config, self.prompts_by_class), store))
                if scored_sets is not None:
                    run_async(_answer_scored_sets(config, arm, endpoint, scored_sets, store))
                phases["probe_s"] += time.monotonic() - t0
            for index, (identity, key) in enumerate(cells):
                if not self.gate.allows(key, time.time()):
                    self.outcome.not_measured.append(self.gate.skipped(identity, key))
                    continue
                t0 = time.monotonic()
                plan = cell_plan(config, identity, key, self.prompts_by_class[identity.prompt_class])
                cell = run_async(measure_cell(endpoint, plan, energy, store, server.survived, engine_version, life))
                phases["measured_s"] += cell.throughput.duration_s
                phases["warmup_s"] += max(0.0, time.monotonic() - t0 - cell.throughput.duration_s)
                if not server.alive():  # failed (re-measured on resume), whenever in the cell it died
                    cell = cell.with_reasons([_log_tail_reason(self.log_path)], server_failed=True)
                    store.write_cell(cell)
                    self.outcome.cells.append(cell)
                    self.outcome.error = f"server died during cell {identity.label}"
                    return cells[index + 1:]
                self.outcome.cells.append(cell)
                self.gate.commit(key)
        return []


def _log_tail_reason(log_path: Path) -> str:
    return f"server log {log_path} ends:\n{log_tail(log_path)}"
