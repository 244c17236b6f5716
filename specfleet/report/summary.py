"""A sweep's summary: what the aggregate step produced, stored as ``summary.json`` and read back
by sync, revalidation and the report as the same typed objects."""

from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.server_args import DeploymentArgs
from specfleet.gates.engine_findings import EngineCheck
from specfleet.gates.equivalence import ArmEquivalence
from specfleet.gates.quality import QualityCheck
from specfleet.measure.acceptance import ClassAcceptance
from specfleet.planning.not_measured import NotMeasuredCell
from specfleet.results import ArmTiming
from specfleet.stats.quality import GateResult
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.kpolicy import KPolicyReport
from specfleet.verdicts.mix import MixVerdict
from specfleet.verdicts.policy_arm import PolicyComparison
from specfleet.verdicts.table import DecisionRow


class ArmSummary(RecordModel):
    arm: str
    phase: str
    cells_measured: int
    error: str | None
    timing: ArmTiming | None = Field(description="None when the arm's Ray task died past its retries.")
    measured_fraction: float | None = Field(description="Measured windows over the arm's wall time.")


class SweepSummary(RecordModel):
    """Everything the sweep reports; every figure comes from a stored measurement."""

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
    mix: list[MixVerdict] = Field(
        default_factory=list, description="The verdict at the traffic mix per speculative arm and k policy, "
        "the sweep's headline (empty in summaries written before it existed, or when it could not be formed: "
        "the notes say why).")
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
    cost_table: list[DecisionRow] = Field(description="One row per decision, adopted or rejected.")
    negative_cells: list[DecisionRow]
    decisions: list[Decision]
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

    @property
    def exit_failed(self) -> bool:
        return bool(self.failed_cells)


def run_status(summary: SweepSummary | None) -> Literal["FINISHED", "FAILED"]:
    """The sweep's MLflow parent-run status: FINISHED only when it aggregated with every cell
    complete or left out by its budget, since revalidation trusts finished sweeps alone; FAILED
    (no summary, or cells failed) says resume it."""
    return "FINISHED" if summary is not None and not summary.exit_failed else "FAILED"
