"""A sweep's plan: the validated config (under a budget, as ``specfleet.planning.budget.budgeted`` runs
it), its fingerprint, the matrix with stable cell keys, and which cells still need a measurement
(the resume rule: a cell with a complete result in the results store is never measured again;
``--continue`` resumes the newest unfinished sweep of the config when its fingerprint is unchanged).
Each baseline stage is split over as many identical replicas as arms fit at once (``specfleet.planning.replicas``)."""

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig, arm_plans, cell_identities
from specfleet.contract.arms import schedule_text
from specfleet.contract.fingerprint import Fingerprint, changed_parts
from specfleet.contract.prompts import PromptItem
from specfleet.errors import InputError
from specfleet.gates.engine_findings import EngineCheck, EngineChecks
from specfleet.gates.scored_set import ScoredSet
from specfleet.planning.budget import budgeted
from specfleet.planning.replicas import arm_shares
from specfleet.verdicts.nights import identity_key
from specfleet.verdicts.policy_arm import DerivedPolicies, derive_policies, with_policy_arms
from specfleet_tasks.plan.engine_check import engine_checks
from specfleet_tasks.plan.fingerprint import compute_fingerprint
from specfleet_tasks.plan.models import resolve_models
from specfleet_tasks.plan.preflight import config_base_dir, prefix_cache_warnings, tokenizer_warnings
from specfleet_tasks.plan.prompt_sets import load_prompt_class, load_scored_sets
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.results import ResultsStore, probe_file
from specfleet_tasks.store.sweep import (
    ENGINE_CHECKS_FILE,
    POLICY_FILE,
    SWEEP_FILE,
    StoredSweep,
    SweepRecord,
    read_derived_policies,
    read_sweep_record,
    stored_sweeps,
)

Phase = Literal["main", "baseline_end"]
POLICY_STAGE = "k policy"


@dataclass(frozen=True)
class ArmWork:
    """One server start: an arm in a phase and the (identity, key) cells it still owes."""

    arm: ArmPlan
    phase: Phase
    cells: list[tuple[CellIdentity, str]]
    probe: bool
    """Run the equivalence probes: none stored yet for this arm."""
    quality_probe: bool = False
    """Answer the scored sets: the quality gate is configured and this arm stored no answers yet."""
    replica: int = 0
    """Which of the baseline's identical servers in its stage (0 for every other arm)."""


@dataclass
class SweepPlan:
    config: SweepConfig
    config_path: Path
    sweep_id: str
    resumed: bool
    resolved: dict[str, str]
    fingerprint: Fingerprint
    store: ResultsStore
    prompts_by_class: dict[str, list[PromptItem]]
    scored_sets: dict[str, ScoredSet | None]
    """The quality gate's held-out items by prompt class; None where a class has none."""
    warnings: list[str]
    engine_checks: list[EngineCheck]
    origin: str | None = None
    """With ``--continue``: which sweep it continues, or why it started a new one (one line)."""
    cells: dict[str, CellIdentity] = field(default_factory=dict)
    """Every planned cell by key, complete or not."""
    work: list[ArmWork] = field(default_factory=list)
    """Servers to start, baseline first and baseline end last; arms with nothing to do are left out."""
    derived: DerivedPolicies | None = None
    """The k policies measured as arms (``policy.measure``), once derived; stored in ``POLICY_FILE``."""
    probed: set[str] = field(default_factory=set)
    """Arms whose first server is planned: the probes go to it."""

    @property
    def pending_cells(self) -> int:
        return sum(len(w.cells) for w in self.work)

    def pull_results(self) -> None:
        """Reopen the store: with an S3 mirror this fetches what arms on other Ray nodes wrote."""
        self.store = ResultsStore(self.store.root, self.sweep_id)

    @property
    def policy_pending(self) -> bool:
        """The config measures its k policy and the policy stage has not derived it yet."""
        return self.config.measures_policy and self.derived is None

    def stages(self) -> Iterator[tuple[str, list[ArmWork]]]:
        """Baseline (its replicas side by side), then every speculative arm side by side, then (with
        ``policy.measure``) the k policies they imply, each on its own server, then the baseline again:
        its start and end cells bracket the night, so drift shows up in the noise floor. The policies
        are derived when their stage is reached, from the cells stored by then (``derive_policy``)."""
        yield from self._nonempty("baseline", [w for w in self.work if w.arm.is_baseline and w.phase == "main"])
        yield from self._nonempty("speculative arms", [w for w in self.work if not w.arm.is_baseline
                                                       and w.arm.policy_of is None])
        if self.policy_pending:
            self.derive_policy()
        yield from self._nonempty(POLICY_STAGE, [w for w in self.work if w.arm.policy_of is not None])
        yield from self._nonempty("baseline (end)", [w for w in self.work if w.phase == "baseline_end"])

    @staticmethod
    def _nonempty(label: str, work: list[ArmWork]) -> Iterator[tuple[str, list[ArmWork]]]:
        if work:
            yield label, work

    def derive_policy(self) -> DerivedPolicies:
        """Decide on the cells stored so far, derive each fixed-k arm's k policy, store it, and plan
        its arm (``specfleet.verdicts.policy_arm``)."""
        self.pull_results()
        stored = StoredSweep(self.store.dir, config=self.config)
        cells = [c for c in stored.cells if c.key in self.cells]
        analysis = stored.analyse(cells, stored.usable_records)
        derived = derive_policies(self.config, analysis.policies, cells, self.sweep_id)
        self.store.write_json(POLICY_FILE, derived)
        self.add_policy_arms(derived)
        return derived

    def add_policy_arms(self, derived: DerivedPolicies) -> None:
        """The derived policies' arms in the config, their cells in the matrix, their servers in the work."""
        self.derived = derived
        self.config = with_policy_arms(self.config, derived)
        policy_arms = {a.name for a in derived.arms}
        complete = self.store.complete_keys()
        for arm in (p for p in arm_plans(self.config) if p.arm in policy_arms):
            for replica, share in enumerate(arm_shares(self.config, arm, "main", cell_identities(self.config, arm))):
                cells = [(ident, ident.key(self.fingerprint.digest)) for ident in share]
                self.cells.update({key: ident for ident, key in cells})
                self._add_work(arm, "main", replica, cells, complete)

    def _add_work(self, arm: ArmPlan, phase: Phase, replica: int, cells: list[tuple[CellIdentity, str]],
                  complete: set[str]) -> None:
        """One server for the cells not complete; the arm's first server runs its probes where none are stored."""
        todo = [(ident, key) for ident, key in cells if key not in complete]
        if not todo:
            return
        first = phase == "main" and arm.arm not in self.probed
        self.probed.add(arm.arm)
        probe = first and self.store.read_json(probe_file("equivalence", arm.arm)) is None
        quality = (first and self.config.equivalence.quality_tolerance is not None
                   and self.store.read_json(probe_file("quality", arm.arm)) is None)
        self.work.append(ArmWork(arm=arm, phase=phase, cells=todo, probe=probe, quality_probe=quality,
                                 replica=replica))


def new_sweep_id(name: str, now: datetime | None = None) -> str:
    """Readable, sortable and unique: ``<config name>-<UTC time>-<4 hex>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def open_sweep(results_dir: Path, sweep_id: str) -> tuple[ResultsStore, SweepRecord]:
    """An existing sweep's store (fetched from the S3 mirror when one is set) and what it
    recorded when it started (config, fingerprint)."""
    store = ResultsStore(results_dir, sweep_id)
    if not (store.dir / SWEEP_FILE).is_file():
        with contextlib.suppress(OSError):
            store.dir.rmdir()  # only if opening the unknown id left an empty folder
        raise InputError(f"--resume {sweep_id}: no sweep with this id under {results_dir}")
    return store, read_sweep_record(store.dir / SWEEP_FILE)


def _changed(stored: SweepRecord, fingerprint: Fingerprint) -> str | None:
    """The changed fingerprint parts of a stored sweep, None when its fingerprint is ``fingerprint``."""
    old = stored.fingerprint
    return None if old.digest == fingerprint.digest else ", ".join(changed_parts(old, fingerprint)) or "fingerprint"


def _check_resume(sweep_id: str, stored: SweepRecord, config: SweepConfig, fingerprint: Fingerprint) -> None:
    """A resumed sweep must measure the same thing: same config name, same fingerprint."""
    if stored.name != config.name:
        raise InputError(f"--resume {sweep_id}: that sweep ran config {stored.name!r}, not {config.name!r}")
    if (parts := _changed(stored, fingerprint)) is not None:
        raise InputError(f"--resume {sweep_id}: {parts} changed since that sweep started; "
                         "start a new sweep (results of different fingerprints never mix)")


def check_continue(results_dir: Path, name: str, resume: str | None) -> list[StoredSweep]:
    """The sweeps ``--continue`` chooses from; an ``InputError`` with ``--resume`` or when there is none."""
    if resume is not None:
        raise InputError("--continue and --resume: give one (--continue finds the sweep itself)")
    found = stored_sweeps(results_dir, name)
    if not found:
        raise InputError(f"--continue: no earlier sweep of config {name!r} under {results_dir}")
    return found


def planned_cells(config: SweepConfig, digest: str) -> list[tuple[ArmPlan, Phase, int, list[tuple[CellIdentity, str]]]]:
    """Every server start of the sweep in order, each stage split over its server lives (a baseline
    stage's replicas, a speculative arm's ``arm_server_lives``) and the baseline again at the end:
    (arm, phase, replica, its (identity, key) cells)."""
    arms = arm_plans(config)
    phases: list[tuple[ArmPlan, Phase]] = [(a, "main") for a in arms] + [(arms[0], "baseline_end")]
    out = []
    for arm, phase in phases:
        for replica, share in enumerate(arm_shares(config, arm, phase, cell_identities(config, arm, phase))):
            out.append((arm, phase, replica, [(ident, ident.key(digest)) for ident in share]))
    return out


def continued_sweep(results_dir: Path, config: SweepConfig, fingerprint: Fingerprint,
                    found: list[StoredSweep]) -> tuple[str | None, str]:
    """The sweep ``--continue`` resumes (None: start a new one) and one line saying which and why:
    the newest of ``found`` with a planned cell not complete in its store, if its fingerprint is unchanged."""
    for sweep in found:
        sweep_id = sweep.id
        keys = {key for _, _, _, cells in planned_cells(config, sweep.record.fingerprint.digest) for _, key in cells}
        missing = len(keys - ResultsStore(results_dir, sweep_id).complete_keys())
        if not missing:
            continue
        if (parts := _changed(sweep.record, fingerprint)) is not None:
            return None, f"--continue: {parts} changed since sweep {sweep_id} started; starting a new sweep"
        return sweep_id, f"--continue: sweep {sweep_id}, {missing} of {len(keys)} cells left to measure"
    if not found:
        return None, f"--continue: no earlier sweep of config {config.name!r} under {results_dir}; starting the first"
    return None, f"--continue: every sweep of config {config.name!r} under {results_dir} is finished; " \
                 "starting a new sweep"


def check_policy_from(results_dir: Path, config: SweepConfig, sweep: str, resume: str | None,
                      continue_sweep: bool) -> None:
    """``--policy-from`` checked before Prefect starts; its fingerprint when the flow plans."""
    if resume is not None or continue_sweep:
        raise InputError("--policy-from with --resume or --continue: a resumed follow-up measures the policies it "
                         "stored; give --resume alone")
    follow_up_policies(results_dir, sweep, config, None)


def follow_up_policies(results_dir: Path, sweep: str, config: SweepConfig,
                       fingerprint: Fingerprint | None) -> DerivedPolicies:
    """``--policy-from SWEEP``: the k policies a finished sweep of the same config and fingerprint
    (None: not checked) chose, as arms to measure; an ``InputError`` when there is nothing to measure."""
    earlier = StoredSweep.find(sweep, results_dir)
    where = f"--policy-from {earlier.id}"
    if earlier.record.name != config.name:
        raise InputError(f"{where}: that sweep ran config {earlier.record.name!r}, not {config.name!r}")
    if fingerprint is not None and (parts := _changed(earlier.record, fingerprint)) is not None:
        raise InputError(f"{where}: {parts} changed since that sweep: its policy was chosen for what it measured")
    if earlier.summary is None:
        raise InputError(f"{where}: the sweep wrote no summary (it has not finished), so it chose no policy")
    derived = derive_policies(config, earlier.summary.k_policy, earlier.cells, earlier.id)
    if not derived.arms:
        why = "; ".join(f"{p.spec_name}: {p.reason}" for p in derived.policies) or "no speculative arm"
        raise InputError(f"{where}: no k policy to measure at sampling {config.policy_sampling!r} ({why})")
    return derived


def plan_sweep(config_path: Path, resume: str | None, results_dir: Path, budget: str | None = None,
               continue_sweep: bool = False, policy_from: str | None = None) -> SweepPlan:
    """Validate, resolve models, fingerprint, expand the matrix and subtract complete cells.
    ``budget`` (``--budget``) overrides the config's budget block; ``continue_sweep`` is ``--continue``;
    ``policy_from`` (``--policy-from``) plans a follow-up: the baseline and the k policies of that
    sweep, each on its own server (a resumed follow-up keeps measuring the policies it stored)."""
    config = budgeted(load_sweep_config(config_path), budget)
    if continue_sweep and resume is not None:
        raise InputError("--continue and --resume: give one (--continue finds the sweep itself)")
    # The CLI refuses --continue without an earlier sweep (check_continue); a scheduled run's first
    # night has none and starts the first sweep (continued_sweep says so).
    found = stored_sweeps(results_dir, config.name) if continue_sweep else []
    base_dir = config_base_dir(config_path)
    prompts = {pc.name: load_prompt_class(pc, base_dir) for pc in config.prompt_classes}
    scored_sets = load_scored_sets(config, base_dir)
    resolved = resolve_models(config)
    fingerprint = compute_fingerprint(config, resolved)
    origin = None
    if continue_sweep:
        resume, origin = continued_sweep(results_dir, config, fingerprint, found)
    derived = None if policy_from is None else follow_up_policies(results_dir, policy_from, config, fingerprint)
    if resume is not None:
        store, stored = open_sweep(results_dir, resume)
        _check_resume(resume, stored, config, fingerprint)
        derived = read_derived_policies(store.dir)
        if derived is not None and derived.derived_from != resume:  # a follow-up: it measures no fixed-k arm
            config = config.model_copy(update={"arms": [config.baseline]})
    else:
        if derived is not None:
            config = config.model_copy(update={"arms": [config.baseline]})
            origin = (f"--policy-from {derived.derived_from}: measuring "
                      + "; ".join(f"{a.name} ({schedule_text(a.schedule or [])})" for a in derived.arms))
        store = ResultsStore(results_dir, new_sweep_id(config.name))
        record = SweepRecord(name=config.name, config_source=str(config_path.resolve()),
                             config=with_policy_arms(config, derived), fingerprint=fingerprint)
        store.write_json(SWEEP_FILE, record)
        if derived is not None:
            store.write_json(POLICY_FILE, derived)
    checks = engine_checks(fingerprint, config.hardware.on_cpu)
    store.write_json(ENGINE_CHECKS_FILE, EngineChecks(checks=checks))
    findings = EngineChecks(checks=checks).findings
    warnings = [*tokenizer_warnings(config, resolved), *prefix_cache_warnings(config), *findings]
    plan = SweepPlan(config=config, config_path=config_path, sweep_id=store.sweep_id, resumed=resume is not None,
                     resolved=resolved, fingerprint=fingerprint, store=store, prompts_by_class=prompts,
                     scored_sets=scored_sets, warnings=warnings,
                     engine_checks=checks, origin=origin)
    complete = store.complete_keys()
    for arm, phase, replica, cells in planned_cells(config, fingerprint.digest):
        plan.cells.update({key: ident for ident, key in cells})
        plan._add_work(arm, phase, replica, cells, complete)
    if derived is not None:  # a follow-up, or a resumed sweep that derived its policies already
        plan.add_policy_arms(derived)
    if config.analysis.nights is not None:
        plan.origin = "; ".join(line for line in (plan.origin, _look_line(plan)) if line)
    return plan


def _look_line(plan: SweepPlan) -> str:
    """Which look of its sequence the sweep is (``analysis.nights``), and which of its pending cells a
    budget measures last: those whose claims the previous look decided, whose verdicts are kept."""
    stored = StoredSweep(plan.store.dir, config=plan.config)
    look = stored.look
    if look is None:
        return ""
    decided = stored.decided_before()
    last = sum(identity_key(ident) in decided for work in plan.work for ident, _ in work.cells)
    after = (f"; {last} pending cells of claims look {look.look - 1} decided are measured last (their verdicts are "
             "kept), the inconclusive claims' first") if look.earlier_sweeps else ""
    return f"analysis.nights: {look.text}{after}"
