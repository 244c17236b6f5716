"""Everything one report shows, assembled once for both the HTML and the markdown output."""

from dataclasses import dataclass
from datetime import UTC, datetime

from specfleet.measure.acceptance import ClassAcceptance, class_acceptance
from specfleet.report.sweep_report import SweepReport
from specfleet.verdicts.kpolicy import KPolicy, Recommendation
from specfleet_tasks.report.diff import SweepDiff, diff_sweeps
from specfleet_tasks.report.headline import inconclusive_lines
from specfleet_tasks.report.measures import (
    EnergyRow,
    KVRow,
    LatencyCurve,
    acceptance_by_position,
    contract_sections,
    energy_rows,
    kv_rows,
    latency_curves,
    read_together_notes,
)
from specfleet_tasks.report.predicted import PredictedView, predicted_view
from specfleet_tasks.report.tables import policy_comparison_lines
from specfleet_tasks.report.views import HeatMap, TheoryRow, heat_maps, modelled_grid, theory_rows
from specfleet_tasks.store.sweep import StoredSweep


@dataclass(frozen=True)
class ReportContent:
    sweep: StoredSweep
    """The stored sweep: its config, cells and records, and its report (``StoredSweep.report``)."""
    draft_cost_ratio: float
    generated_at: str
    deployable: list[tuple[KPolicy, dict[str, object] | None, Recommendation]]
    """The all-prompt-classes specfleet policy of each speculative arm, its speculative_config, and
    whether a policy arm measured it."""
    policy_comparisons: list[str]
    """Each measured k policy beside its composed verdict
    (``specfleet_tasks.report.tables.policy_comparison_lines``)."""
    maps: list[HeatMap]
    theory: list[TheoryRow]
    grid_ks: list[int]
    grid: list[tuple[float, list[float]]]
    latency: list[tuple[LatencyCurve, LatencyCurve]]
    read_together: list[str]
    acceptance: dict[str, dict[str, list[float]]]
    acceptance_missing: dict[str, str]
    acceptance_rows: list[ClassAcceptance]
    """Acceptance length per request per speculative arm, prompt class and sampling mode."""
    kv: list[KVRow]
    energy: list[EnergyRow]
    inconclusive: list[str]
    """Each inconclusive verdict at the mix and cell, apart from the rejects (``headline.inconclusive_lines``)."""
    contract: list[tuple[str, list[tuple[str, str]]]]
    diff: SweepDiff | None
    predicted: PredictedView | None
    """The measured and predicted view; nothing above reads it."""

    @property
    def report(self) -> SweepReport:
        return self.sweep.report


def build_content(sweep: StoredSweep, draft_cost_ratio: float, against: StoredSweep | None = None, *,
                  with_predicted: bool = True) -> ReportContent:
    """``draft_cost_ratio`` is the c the modelled lines assume; ``against`` adds the diff;
    ``with_predicted`` the measured and predicted view (the performance model calibrated on the sweep)."""
    report = sweep.report
    ks, grid = modelled_grid(sweep.config, draft_cost_ratio)
    rates, missing = acceptance_by_position(sweep)
    return ReportContent(
        sweep=sweep, draft_cost_ratio=draft_cost_ratio,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        deployable=[(p.specfleet, p.specfleet.speculative_config(), p.recommended) for p in report.k_policy
                    if p.peer is None],
        policy_comparisons=policy_comparison_lines(report.policy_comparisons),
        maps=heat_maps(sweep), theory=theory_rows(sweep, draft_cost_ratio), grid_ks=ks, grid=grid,
        latency=latency_curves(sweep), read_together=read_together_notes(sweep),
        acceptance=rates, acceptance_missing=missing, acceptance_rows=class_acceptance(sweep.cells, sweep.records),
        kv=kv_rows(sweep), energy=energy_rows(sweep), inconclusive=inconclusive_lines(report.mix, report.decisions),
        contract=contract_sections(sweep), diff=diff_sweeps(sweep, against) if against is not None else None,
        predicted=predicted_view(sweep) if with_predicted else None,
    )
