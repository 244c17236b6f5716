"""The sweep's report: what the aggregate step decided, made once and stored as ``summary.json``;
every output (terminal, ``summary.md``, ``report.md``, the HTML report, MLflow, the Prefect
artifacts) renders it, and every reader of an earlier sweep reads it back through ``read_report``.

Each decision is held once (``decisions``); the cost table and the negative-result cells are views
of them (``SweepReport.cost_table``, ``SweepReport.negative_cells``), not stored copies.
"""

import json
from typing import Any, Literal, TypedDict

from pydantic import Field, ValidationError, field_validator

from specfleet.contract.base import RecordModel, known_format
from specfleet.contract.server_args import DeploymentArgs
from specfleet.contract.sweep import SweepConfig
from specfleet.errors import InputError
from specfleet.gates.engine_findings import EngineCheck
from specfleet.gates.equivalence import ArmEquivalence
from specfleet.gates.quality import QualityCheck
from specfleet.measure.acceptance import ClassAcceptance
from specfleet.planning.not_measured import NotMeasuredCell
from specfleet.results import ArmTiming
from specfleet.stats.quality import GateResult
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.analysis import SweepAnalysis
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.kpolicy import KPolicyReport
from specfleet.verdicts.mix import MixVerdict
from specfleet.verdicts.policy_arm import PolicyComparison
from specfleet.verdicts.prompt_class import ClassVerdict, class_verdicts
from specfleet.verdicts.sequential import Look
from specfleet.verdicts.table import DecisionRow, decision_rows, hardware_label

REPORT_FILE = "summary.json"
REPORT_FORMAT = 2
"""``summary.json``'s format: 1 (no ``format`` key) also stored the cost table and the negative cells
as rows beside the decisions, and no class verdicts; 2 stores each decision once and the class verdicts."""
FORMAT_1_ROWS = ("cost_table", "negative_cells")
"""Format 1's stored copies of the decisions, views of them since format 2."""


class ArmSummary(RecordModel):
    arm: str
    phase: str
    cells_measured: int
    error: str | None
    timing: ArmTiming | None = Field(description="None when the arm's Ray task died past its retries.")
    measured_fraction: float | None = Field(description="Measured windows over the arm's wall time.")


class SweepReport(RecordModel):
    """Everything the sweep reports; every figure comes from a stored measurement."""

    format: int = Field(REPORT_FORMAT, description="1: written before each decision was stored once.")
    sweep_id: str
    config_name: str
    fingerprint: str
    resumed: bool
    cells_planned: int
    cells_complete: int
    cells_ok: int
    cells_invalid: int
    failed_cells: list[str] = Field(description="Label and reason of every cell without a complete result, "
                                    "except those the budget did not start (not_measured).")
    not_measured: list[NotMeasuredCell] = Field(
        default_factory=list, description="Cells the budget did not start, each with the performance model's "
        "prediction (PREDICTED, never read by a decision); --continue measures them.")
    servers_started: int = Field(description="Arms whose server started in this invocation (0: nothing left to "
                                 "measure, or nothing fit the budget).")
    arms: list[ArmSummary]
    engine: str = Field(description="The engine the cost table names (the config's engine.name).")
    hardware: str = Field(description="The hardware per replica as the cost table names it.")
    mix: list[MixVerdict] = Field(
        default_factory=list, description="The verdict at the traffic mix per speculative arm and k policy, "
        "the sweep's headline (empty when it could not be formed: the notes say why).")
    class_verdicts: list[ClassVerdict] = Field(
        default_factory=list, description="The verdict per prompt class and sampling mode, over the speculative "
        "arms' verdicts at the mix (``specfleet.verdicts.prompt_class``).")
    noise: list[RunNoise] = Field(
        default_factory=list, description="The sweep's run-to-run noise per figure (SLO-qualified tokens/s, ITL), "
        "pooled over its repeated cells, with its own interval: what every interval includes (empty in summaries "
        "written before it was pooled; their decisions are then recomputed).")
    gates: dict[str, list[GateResult]] = Field(description="The equivalence gates per speculative arm.")
    equivalence: list[ArmEquivalence] = Field(
        default_factory=list, description="The equivalence tests behind the gates per speculative arm: exact-match "
        "rates, the stochastic test's p-value and power, what is unavailable (empty in summaries written before "
        "they were stored).")
    quality: list[QualityCheck] = Field(
        default_factory=list, description="The held-out quality gate per speculative arm, prompt class and "
        "sampling mode, run or not run with why (empty in summaries written before the gate was wired).")
    notes: list[str]
    decisions: list[Decision] = Field(description="Every cell's decision, adopted, rejected or inconclusive.")
    look: Look | None = Field(
        None, description="With analysis.nights: which look of its sequence the sweep is and the confidence its "
        "verdicts were decided at (None: decided alone at analysis.confidence).")
    k_policy: list[KPolicyReport]
    policy_comparisons: list[PolicyComparison] = Field(
        default_factory=list, description="Each k policy measured on its own server (policy.measure, --policy-from): "
        "its verdict at the mix beside the one composed from fixed-k cells, and how far apart they are.")
    acceptance: list[ClassAcceptance] = Field(
        default_factory=list, description="Acceptance length per speculative arm, prompt class and sampling mode: "
        "the counters' 1 + accepted / drafts beside the per-request distributions of the client's estimate (tokens "
        "per step over all steps) and of vLLM's own figure (empty in summaries written before it existed).")
    engine_checks: list[EngineCheck] = Field(
        default_factory=list, description="The installed engine's self-checks (none in older summaries).")
    results_dir: str
    server_args: DeploymentArgs | None = Field(
        None, description="Each arm's vLLM server arguments for the target, and the speculation-off ones to "
        "roll back to (None in summaries written before they were stored).")
    model_overhead_ms: float | None = Field(
        None, description="The performance model's server time per request fitted to this sweep's cells (a model "
        "parameter, never read by a decision): a plan calibrated on this sweep reuses it rather than searching "
        "again. None in older summaries, with no cell to fit, or when the fit failed (a note says why).")
    wall_s: float | None = Field(None, description="Seconds from this invocation's start to its summary "
                                 "(what a plan calibrated on this sweep reads); None in older summaries.")
    after_stages_s: float | None = Field(
        None, description="Of wall_s, the seconds after the last stage (logging, aggregation): what a budget keeps "
        "back after the closing baseline; None in older summaries.")
    recomputed: str | None = Field(
        None, exclude=True, description="None when the sweep's aggregate step made this report; else why a reader "
        "made it again from the stored cells (never stored).")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: int) -> int:
        return known_format(value, REPORT_FORMAT)

    @property
    def cost_table(self) -> list[DecisionRow]:
        """One row per decision, adopted, rejected or inconclusive, in the decisions' order."""
        return decision_rows(self.decisions, self.engine, self.hardware)

    @property
    def negative_cells(self) -> list[DecisionRow]:
        """The rejected cells' rows (an inconclusive cell is no negative result)."""
        return [row for row in self.cost_table if row.verdict == "reject"]

    @property
    def decided_by(self) -> str:
        """Where the decisions come from: the sweep's own report, or why they were made again."""
        return self.recomputed or f"the sweep's {REPORT_FILE}"

    @property
    def exit_failed(self) -> bool:
        return bool(self.failed_cells)


class Decided(TypedDict):
    """What the analysis decides, as the report holds it: the fields ``decided`` fills."""

    engine: str
    hardware: str
    mix: list[MixVerdict]
    class_verdicts: list[ClassVerdict]
    noise: list[RunNoise]
    gates: dict[str, list[GateResult]]
    equivalence: list[ArmEquivalence]
    quality: list[QualityCheck]
    decisions: list[Decision]
    k_policy: list[KPolicyReport]
    policy_comparisons: list[PolicyComparison]
    look: Look | None


def decided(config: SweepConfig, analysis: SweepAnalysis) -> Decided:
    """The report's decisions from the sweep's analysis, the class verdicts made here, once."""
    return Decided(engine=config.engine.name, hardware=hardware_label(config), mix=analysis.mix,
                   class_verdicts=class_verdicts(config, analysis.decisions, analysis.mix, analysis.policies),
                   noise=analysis.noise, gates=analysis.gates, equivalence=analysis.equivalence,
                   quality=analysis.quality, decisions=analysis.decisions, k_policy=analysis.policies,
                   policy_comparisons=analysis.policy_comparisons, look=analysis.look)


def read_report(text: str, config: SweepConfig, where: str = REPORT_FILE) -> SweepReport:
    """``summary.json`` of any format this version reads, as today's report: the one migration.
    ``config``: the sweep's own (what format 1 did not store: the engine, the hardware and the class
    verdicts are made from it and the stored decisions). A file it cannot read is one line naming it."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise InputError(f"{where}: not a sweep report (a JSON object)")
        if data.get("format", 1) == 1:
            return _from_format_1(data, config)
        return SweepReport.model_validate(data)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: not JSON ({err.msg} at line {err.lineno})") from None
    except ValidationError as err:
        first = err.errors()[0]
        field = "".join(f"{part}: " for part in first["loc"])
        raise InputError(f"{where}: {field}{first['msg'].removeprefix('Value error, ')}") from None


def _from_format_1(data: dict[str, Any], config: SweepConfig) -> SweepReport:
    """Format 1 without its stored rows; the engine and hardware its rows named, the class verdicts made."""
    rows = data.get("cost_table") or []
    named = {"engine": rows[0]["engine"], "hardware": rows[0]["hardware"]} if rows else {
        "engine": config.engine.name, "hardware": hardware_label(config)}
    kept = {key: value for key, value in data.items() if key not in FORMAT_1_ROWS}
    report = SweepReport.model_validate({**kept, **named, "format": 1})
    verdicts = class_verdicts(config, report.decisions, report.mix, report.k_policy)
    return report.model_copy(update={"class_verdicts": verdicts})


def run_status(report: SweepReport | None) -> Literal["FINISHED", "FAILED"]:
    """The sweep's MLflow parent-run status: FINISHED only when it aggregated with every cell
    complete or left out by its budget, since revalidation trusts finished sweeps alone; FAILED
    (no report, or cells failed) says resume it."""
    return "FINISHED" if report is not None and not report.exit_failed else "FAILED"
