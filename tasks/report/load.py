"""A sweep's results folder read into one typed ``ReportData``: the contract, every stored cell
and its per-request records, the equivalence probes, and the decisions with the k policy.

Decisions come from the sweep's ``summary.json`` when it wrote one; a sweep that stopped
before aggregating has them recomputed here with the same core functions
(``specfleet.decisions.decide_all``, ``specfleet.kpolicy.k_policy_reports``).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from specfleet.contract import SweepConfig, arm_plans
from specfleet.decisions import Decision, decide_all
from specfleet.errors import InputError
from specfleet.fingerprint import Fingerprint
from specfleet.kpolicy import KPolicyReport, k_policy_reports
from specfleet.results import CellResult, RequestRecord
from specfleet.stats.equivalence import GreedyEquivalence, StochasticResult, greedy_equivalence, stochastic_equivalence
from specfleet.stats.quality import GateResult
from specfleet.stats.samples import CellSample
from tasks.aggregate import PEER_MIN_RUNS, PERMUTATIONS, SweepSummary, _greedy, _sampled
from tasks.config import load_sweep_config
from tasks.loadgen.parquet import read_records_parquet
from tasks.sweep_plan import SWEEP_FILE

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class ArmEquivalence:
    """The equivalence results of one speculative arm, recomputed from the stored probes."""

    arm: str
    greedy: GreedyEquivalence | None
    stochastic: StochasticResult | None
    unavailable: list[str]
    """Why a test has no result (no stored probe, no samples, no stochastic spec)."""

    @property
    def gates(self) -> list[GateResult]:
        """The gates a decision consumes: none without a greedy result, as the sweep does."""
        if self.greedy is None:
            return []
        return [self.greedy.gate()] + ([self.stochastic.gate()] if self.stochastic else [])


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
    decisions: list[Decision]
    policies: list[KPolicyReport]
    decisions_source: str
    notes: list[str]
    failed_cells: list[str]

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


def equivalence_results(sweep_dir: Path, config: SweepConfig) -> list[ArmEquivalence]:
    """Greedy exact match (with the baseline's repeat as control) and the stochastic test, per arm."""
    plans = arm_plans(config)
    base = _read_json(sweep_dir / "equivalence" / f"{plans[0].arm}.json")
    base_greedy, control, base_sampled = _greedy(base, "greedy"), _greedy(base, "greedy_repeat"), _sampled(base)
    spec = config.equivalence.stochastic
    out = []
    for plan in plans[1:]:
        probe = _read_json(sweep_dir / "equivalence" / f"{plan.arm}.json")
        greedy, sampled = _greedy(probe, "greedy"), _sampled(probe)
        missing = []
        greedy_result = stochastic_result = None
        if base_greedy is None or greedy is None:
            missing.append(f"greedy: no stored probe of {plans[0].arm if base_greedy is None else plan.arm}")
        else:
            greedy_result = greedy_equivalence(base_greedy, greedy, control)
        if spec is None:
            missing.append("stochastic: not configured (equivalence.stochastic is unset)")
        elif base_sampled is None or sampled is None:
            missing.append("stochastic: no stored samples of both arms")
        else:
            stochastic_result = stochastic_equivalence(
                base_sampled, sampled, significance=spec.significance, power=spec.power,
                min_detectable_tv=spec.min_detectable_tv, permutations=PERMUTATIONS, seed=config.analysis.seed)
        out.append(ArmEquivalence(plan.arm, greedy_result, stochastic_result, missing))
    return out


def _recompute(cells: list[CellResult], records: dict[str, list[RequestRecord]], config: SweepConfig,
               equivalence: list[ArmEquivalence]) -> tuple[list[Decision], list[KPolicyReport]]:
    samples = {c.key: CellSample.from_records(c, records[c.key], config.slo)
               for c in cells if c.usable and c.key in records}
    gates = {e.arm: e.gates for e in equivalence if e.greedy is not None}
    decisions = decide_all(cells, samples, config, gates)
    return decisions, k_policy_reports(decisions, cells, config, peer_min_runs=PEER_MIN_RUNS)


def load_report_data(sweep_dir: Path) -> ReportData:
    stored = _read_json(sweep_dir / SWEEP_FILE)
    config, source = _config(sweep_dir, stored)
    cells = _cells(sweep_dir, config)
    records = {c.key: read_records_parquet(sweep_dir / c.records_file) for c in cells
               if c.records_file and (sweep_dir / c.records_file).is_file()}
    equivalence = equivalence_results(sweep_dir, config)
    summary_path = sweep_dir / SUMMARY_FILE
    if summary_path.is_file():
        summary = SweepSummary.model_validate_json(summary_path.read_text(encoding="utf-8"))
        decisions = [Decision.model_validate(d) for d in summary.decisions]
        policies = [KPolicyReport.model_validate({k: v for k, v in p.items() if k != "speculative_config"})
                    for p in summary.k_policy]
        origin, notes, failed = f"the sweep's {SUMMARY_FILE}", summary.notes, summary.failed_cells
    else:
        decisions, policies = _recompute(cells, records, config, equivalence)
        origin = f"recomputed from the stored cells (the sweep wrote no {SUMMARY_FILE}: it stopped before aggregating)"
        notes, failed = [], []
    return ReportData(
        sweep_id=sweep_dir.name, sweep_dir=sweep_dir, config=config, config_source=source,
        fingerprint=Fingerprint.model_validate(stored["fingerprint"]), cells=cells, records=records,
        equivalence=equivalence, decisions=decisions, policies=policies, decisions_source=origin,
        notes=notes, failed_cells=failed,
    )
