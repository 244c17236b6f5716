"""A sweep's plan: the validated config, its fingerprint, the matrix with stable cell keys,
and which cells still need a measurement (the resume rule: a cell with a complete result
in the results store is never measured again). Each baseline stage is split over as many
identical replicas as arms fit at once (``specfleet.replicas``)."""

import contextlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig, arm_plans, cell_identities
from specfleet.engine_findings import EngineCheck, EngineChecks
from specfleet.errors import InputError
from specfleet.fingerprint import Fingerprint, changed_parts
from specfleet.prompts import PromptItem
from specfleet.replicas import replica_shares
from specfleet.scored_set import ScoredSet
from specfleet.sweep_estimate import slots
from tasks.plan.config import load_sweep_config
from tasks.plan.engine_check import engine_checks
from tasks.plan.fingerprint import compute_fingerprint
from tasks.plan.models import resolve_models
from tasks.plan.preflight import config_base_dir, tokenizer_warnings
from tasks.plan.prompt_sets import load_prompt_class, load_scored_sets
from tasks.store.results import ResultsStore, probe_file

Phase = Literal["main", "baseline_end"]
SWEEP_FILE = "sweep.json"
ENGINE_CHECKS_FILE = "engine_checks.json"


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
    cells: dict[str, CellIdentity] = field(default_factory=dict)
    """Every planned cell by key, complete or not."""
    work: list[ArmWork] = field(default_factory=list)
    """Servers to start, baseline first and baseline end last; arms with nothing to do are left out."""

    @property
    def pending_cells(self) -> int:
        return sum(len(w.cells) for w in self.work)

    def pull_results(self) -> None:
        """Reopen the store: with an S3 mirror this fetches what arms on other Ray nodes wrote."""
        self.store = ResultsStore(self.store.root, self.sweep_id)

    def stages(self) -> list[tuple[str, list[ArmWork]]]:
        """Baseline (its replicas side by side), then every speculative arm side by side, then the
        baseline again: its start and end cells bracket the night, so drift shows up in the noise floor."""
        stages = [
            ("baseline", [w for w in self.work if w.arm.is_baseline and w.phase == "main"]),
            ("speculative arms", [w for w in self.work if not w.arm.is_baseline]),
            ("baseline (end)", [w for w in self.work if w.phase == "baseline_end"]),
        ]
        return [(label, work) for label, work in stages if work]


def new_sweep_id(name: str, now: datetime | None = None) -> str:
    """Readable, sortable and unique: ``<config name>-<UTC time>-<4 hex>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def open_sweep(results_dir: Path, sweep_id: str) -> tuple[ResultsStore, dict[str, Any]]:
    """An existing sweep's store (fetched from the S3 mirror when one is set) and what it
    recorded when it started (config name, fingerprint)."""
    store = ResultsStore(results_dir, sweep_id)
    stored = store.read_json(SWEEP_FILE)
    if stored is None:
        with contextlib.suppress(OSError):
            store.dir.rmdir()  # only if opening the unknown id left an empty folder
        raise InputError(f"--resume {sweep_id}: no sweep with this id under {results_dir}")
    return store, stored


def _check_resume(sweep_id: str, stored: dict[str, Any], config: SweepConfig, fingerprint: Fingerprint) -> None:
    """A resumed sweep must measure the same thing: same config name, same fingerprint."""
    if stored.get("name") != config.name:
        raise InputError(f"--resume {sweep_id}: that sweep ran config {stored.get('name')!r}, not {config.name!r}")
    old = Fingerprint.model_validate(stored["fingerprint"])
    if old.digest != fingerprint.digest:
        parts = ", ".join(changed_parts(old, fingerprint)) or "fingerprint"
        raise InputError(f"--resume {sweep_id}: {parts} changed since that sweep started; "
                         "start a new sweep (results of different fingerprints never mix)")


def plan_sweep(config_path: Path, resume: str | None, results_dir: Path) -> SweepPlan:
    """Validate, resolve models, fingerprint, expand the matrix and subtract complete cells."""
    config = load_sweep_config(config_path)
    base_dir = config_base_dir(config_path)
    prompts = {pc.name: load_prompt_class(pc, base_dir) for pc in config.prompt_classes}
    scored_sets = load_scored_sets(config, base_dir)
    resolved = resolve_models(config)
    fingerprint = compute_fingerprint(config, resolved)
    if resume is not None:
        store, stored = open_sweep(results_dir, resume)
        _check_resume(resume, stored, config, fingerprint)
    else:
        store = ResultsStore(results_dir, new_sweep_id(config.name))
        store.write_json(SWEEP_FILE, {"name": config.name, "config": str(config_path.resolve()),
                                      "fingerprint": fingerprint.model_dump(mode="json")})
    checks = engine_checks(fingerprint, config.hardware.on_cpu)
    store.write_json(ENGINE_CHECKS_FILE, EngineChecks(checks=checks))
    findings = EngineChecks(checks=checks).findings
    plan = SweepPlan(config=config, config_path=config_path, sweep_id=store.sweep_id, resumed=resume is not None,
                     resolved=resolved, fingerprint=fingerprint, store=store, prompts_by_class=prompts,
                     scored_sets=scored_sets, warnings=[*tokenizer_warnings(config, resolved), *findings],
                     engine_checks=checks)
    complete = store.complete_keys()
    arms = arm_plans(config)
    phases: list[tuple[ArmPlan, Phase]] = [(a, "main") for a in arms] + [(arms[0], "baseline_end")]
    replicas = slots(config)[0]
    for arm, phase in phases:
        main = phase == "main"
        probe = main and store.read_json(probe_file("equivalence", arm.arm)) is None
        quality = (main and config.equivalence.quality_tolerance is not None
                   and store.read_json(probe_file("quality", arm.arm)) is None)
        identities = cell_identities(config, arm, phase)
        for replica, share in enumerate(replica_shares(identities, replicas) if arm.is_baseline else [identities]):
            cells = [(ident, ident.key(fingerprint.digest)) for ident in share]
            plan.cells.update({key: ident for ident, key in cells})
            todo = [(ident, key) for ident, key in cells if key not in complete]
            if todo:  # the probes go to the first server of the arm that starts
                plan.work.append(ArmWork(arm=arm, phase=phase, cells=todo, probe=probe, quality_probe=quality,
                                         replica=replica))
                probe = quality = False
    return plan
