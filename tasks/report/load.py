"""A sweep's results folder read into one typed ``ReportData``: the contract, every stored cell
and its per-request records, the equivalence and quality gates from the stored probes, and the
decisions with the k policy.

Decisions come from the sweep's ``summary.json`` when it wrote one, as the same typed objects the
aggregate step produced; a sweep that stopped before aggregating has them made here by the same
call (``specfleet.analysis.analyse_sweep``).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from specfleet.analysis import analyse_sweep, sweep_quality
from specfleet.contract import SweepConfig, arm_plans
from specfleet.decisions import Decision
from specfleet.engine_findings import EngineCheck
from specfleet.errors import InputError
from specfleet.fingerprint import Fingerprint
from specfleet.gates import ArmEquivalence, arm_equivalence
from specfleet.kpolicy import KPolicyReport
from specfleet.mix_verdict import MixVerdict
from specfleet.not_measured import NotMeasuredCell
from specfleet.quality_gates import QualityCheck
from specfleet.results import CellResult, RequestRecord
from specfleet.server_args import DeploymentArgs
from specfleet.stats.variance import RunNoise
from specfleet.summary import SweepSummary
from tasks.analysis.aggregate import stored_engine_checks, stored_probes, stored_quality, stored_records
from tasks.plan.config import load_sweep_config
from tasks.plan.sweep_plan import SWEEP_FILE

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class ReportData:
    sweep_id: str
    sweep_dir: Path
    config: SweepConfig
    config_source: str
    fingerprint: Fingerprint
    cells: list[CellResult]
    records: dict[str, list[RequestRecord]]
    """Per-request records by cell key, for every cell that stored them."""
    equivalence: list[ArmEquivalence]
    quality: list[QualityCheck]
    decisions: list[Decision]
    policies: list[KPolicyReport]
    mix: list[MixVerdict]
    """The verdicts at the traffic mix (empty, with a note saying why, when none could be formed)."""
    noise: list[RunNoise]
    """The sweep's run-to-run noise per figure: the noise floor every interval includes."""
    decisions_source: str
    notes: list[str]
    failed_cells: list[str]
    not_measured: list[NotMeasuredCell]
    """Cells the sweep's budget did not start, with their predictions (from its summary)."""
    engine_checks: list[EngineCheck]
    server_args: DeploymentArgs | None
    """Each arm's server arguments, from the summary (None without one, or in one written before them)."""

    @property
    def baseline_arm(self) -> str:
        return arm_plans(self.config)[0].arm


def find_sweep_dir(sweep: str, results_root: Path) -> Path:
    """``sweep`` is a sweep's results folder or a sweep id under ``results_root``."""
    for candidate in (Path(sweep), results_root / sweep):
        if (candidate / SWEEP_FILE).is_file():
            return candidate
    if Path(sweep).is_dir():
        raise InputError(f"{sweep}: not a sweep results folder (no {SWEEP_FILE})")
    raise InputError(f"{sweep}: no sweep with this id under {results_root}")


def _config(sweep_dir: Path, stored: dict[str, object]) -> tuple[SweepConfig, str]:
    source = Path(str(stored.get("config", "")))
    if not source.is_file():
        raise InputError(f"{sweep_dir.name}: its config {source} is not readable here; the report needs the contract")
    config = load_sweep_config(source)
    if config.name != stored.get("name"):
        raise InputError(f"{sweep_dir.name}: {source} now names config {config.name!r}, the sweep ran "
                         f"{stored.get('name')!r}")
    return config, str(source)


def _cells(sweep_dir: Path, config: SweepConfig) -> list[CellResult]:
    cells = [CellResult.model_validate_json(p.read_text(encoding="utf-8"))
             for p in sorted((sweep_dir / "cells").glob("*.json"))]
    arms = {plan.arm for plan in arm_plans(config)}
    unknown = sorted({c.identity.arm for c in cells} - arms)
    if unknown:
        raise InputError(f"{sweep_dir.name}: stored arm {unknown[0]!r} is not in the config as it is now")
    return cells


def _read_json(path: Path) -> dict[str, object]:
    if not path.is_file():
        return {}
    loaded: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def load_report_data(sweep_dir: Path) -> ReportData:
    stored = _read_json(sweep_dir / SWEEP_FILE)
    config, source = _config(sweep_dir, stored)
    cells = _cells(sweep_dir, config)
    records = stored_records(sweep_dir, cells, usable_only=False)
    probes, answers = stored_probes(sweep_dir, config), stored_quality(sweep_dir, config)
    engine = stored_engine_checks(sweep_dir)
    equivalence = arm_equivalence(config, arm_plans(config), probes, engine.findings)
    summary_path = sweep_dir / SUMMARY_FILE
    summary = (SweepSummary.model_validate_json(summary_path.read_text(encoding="utf-8"))
               if summary_path.is_file() else None)
    if summary is not None and summary.noise:
        decisions, policies, mix, noise = summary.decisions, summary.k_policy, summary.mix, summary.noise
        origin, notes, failed = f"the sweep's {SUMMARY_FILE}", summary.notes, summary.failed_cells
        not_measured, server_args = summary.not_measured, summary.server_args
    else:
        analysis = analyse_sweep(config, cells, records, probes, answers, engine.findings)
        decisions, policies, mix, noise = analysis.decisions, analysis.policies, analysis.mix, analysis.noise
        origin = (f"recomputed from the stored cells (the sweep wrote no {SUMMARY_FILE}: it stopped before aggregating)"
                  if summary is None else f"recomputed from the stored cells (its {SUMMARY_FILE} was written before "
                  "the run-to-run noise was pooled: its decisions followed an older rule)")
        notes = analysis.notes
        failed = summary.failed_cells if summary is not None else []
        not_measured = summary.not_measured if summary is not None else []
        server_args = summary.server_args if summary is not None else None
    return ReportData(
        sweep_id=sweep_dir.name, sweep_dir=sweep_dir, config=config, config_source=source,
        fingerprint=Fingerprint.model_validate(stored["fingerprint"]), cells=cells, records=records,
        equivalence=equivalence, quality=sweep_quality(config, answers, engine.findings), decisions=decisions,
        policies=policies, mix=mix, noise=noise, decisions_source=origin, notes=notes, failed_cells=failed,
        not_measured=not_measured, engine_checks=engine.checks, server_args=server_args,
    )
