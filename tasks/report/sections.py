"""The one order every text of a sweep's report follows: the terminal (``specfleet_cli.render.print_sweep_summary``),
``summary.md`` (also MLflow's and the Prefect artifact: ``specfleet_tasks.report.summary_md``), ``report.md``
(``specfleet_tasks.report.markdown``) and the HTML report (``specfleet_tasks.report.html``). Each renders the
sections its
report has, in ``SECTIONS`` order and under these titles, each in its own way (the terminal groups the
decisions, the files show them as tables); the report's figures (heat maps, latency, KV, energy, the
measured and predicted view, the diff) follow them in the report's files."""

from dataclasses import dataclass
from typing import Literal

from specfleet.report.sweep_report import SweepReport
from specfleet_tasks.report.headline import INCONCLUSIVE_TITLE, MIX_TITLE
from specfleet_tasks.report.tables import ACCEPTANCE_TITLE, POLICY_COMPARISON_TITLE, not_measured_title

SectionKey = Literal["mix", "classes", "noise", "decisions", "negative", "inconclusive", "k_policy",
                     "policy_comparison", "gates", "acceptance", "server_args", "engine_checks", "overhead",
                     "not_measured", "failed", "notes"]
SECTIONS: tuple[SectionKey, ...] = (
    "mix", "classes", "noise", "decisions", "negative", "inconclusive", "k_policy", "policy_comparison", "gates",
    "acceptance", "server_args", "engine_checks", "overhead", "not_measured", "failed", "notes")
TITLES: dict[SectionKey, str] = {
    "mix": MIX_TITLE,
    "classes": "Verdict per prompt class",
    "noise": "Run-to-run noise (every interval includes it)",
    "decisions": "Decisions per cell (cost per million SLO-qualified tokens)",
    "negative": "Negative-result cells (rejected)",
    "inconclusive": INCONCLUSIVE_TITLE,
    "k_policy": "k policy (specfleet rule)",
    "policy_comparison": POLICY_COMPARISON_TITLE,
    "gates": "Equivalence and quality gates",
    "acceptance": ACCEPTANCE_TITLE,
    "server_args": "Server arguments (deploy, roll back)",
    "engine_checks": "Engine self-checks",
    "overhead": "Sweep overhead (this run's arms)",
    "not_measured": "Not measured",
    "failed": "Failed cells (resume to measure them)",
    "notes": "Notes",
}


@dataclass(frozen=True)
class Section:
    key: SectionKey
    title: str


def report_sections(report: SweepReport) -> list[Section]:
    """The sections ``report`` has, in ``SECTIONS`` order; one that would say nothing (no policy measured
    on its own server, no server arguments, engine checks, arms run, cells left out, failed or notes) is
    left out of every output alike."""
    empty = {"policy_comparison": not report.policy_comparisons, "server_args": report.server_args is None,
             "engine_checks": not report.engine_checks, "overhead": not report.arms,
             "not_measured": not report.not_measured, "failed": not report.failed_cells, "notes": not report.notes}
    return [Section(key, not_measured_title(len(report.not_measured)) if key == "not_measured" else TITLES[key])
            for key in SECTIONS if not empty.get(key, False)]
