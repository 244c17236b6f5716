"""What the terminal shows at the end of a sweep (``specfleet_cli.render.print_sweep_summary`` prints it): the
report's sections in the one order (``specfleet_tasks.report.sections``), each as a few plain lines, one screen
for the demo; the per-cell tables are in ``summary.md``, which the lines name."""

from collections.abc import Callable

from specfleet.report.sweep_report import SweepReport
from specfleet_tasks.report.fmt import NA
from specfleet_tasks.report.headline import (
    class_verdict_lines,
    grouped_decision_lines,
    grouped_gate_lines,
    inconclusive_lines,
    look_lines,
    mix_lines,
    noise_lines,
)
from specfleet_tasks.report.sections import SectionKey, report_sections
from specfleet_tasks.report.summary_md import server_args_lines
from specfleet_tasks.report.tables import engine_check_lines, k_policy_lines, not_measured_line, policy_comparison_lines

NOT_MEASURED_SHOWN = 20
"""Not-measured cells listed at the end of a sweep; the rest are in summary.md."""
Lines = Callable[[SweepReport], list[str]]


def _in_summary_md(what: str) -> Lines:
    return lambda r: [f"{what}: {r.results_dir}/summary.md"]


def _not_measured(report: SweepReport) -> list[str]:
    more = len(report.not_measured) - NOT_MEASURED_SHOWN
    return ([not_measured_line(c) for c in report.not_measured[:NOT_MEASURED_SHOWN]]
            + ([f"... and {more} more in {report.results_dir}/summary.md"] if more > 0 else []))


LINES: dict[SectionKey, Lines] = {
    "mix": lambda r: [*look_lines(r.look, r.mix, r.decisions),
                      *(mix_lines(r.mix) or [f"{NA}: no verdict at the traffic mix (see the notes)"])],
    "classes": lambda r: class_verdict_lines(r.class_verdicts),
    "noise": lambda r: noise_lines(r.noise),
    "decisions": lambda r: [f"{len(r.decisions)} cells, grouped by verdict and reason (each cell's figures: "
                            f"{r.results_dir}/summary.md)", *grouped_decision_lines(r.decisions)],
    "negative": lambda r: [f"{len(r.negative_cells)} cells rejected, each with its reason and figures: "
                           f"{r.results_dir}/summary.md"],
    "inconclusive": lambda r: inconclusive_lines(r.mix, r.decisions),
    "k_policy": lambda r: [line for p in r.k_policy if p.peer is None for line in k_policy_lines(p)],
    "policy_comparison": lambda r: policy_comparison_lines(r.policy_comparisons),
    "gates": lambda r: grouped_gate_lines(r.gates, r.quality),
    "acceptance": _in_summary_md("per speculative arm, prompt class and sampling mode"),
    "server_args": lambda r: [line.replace("`", "") for line in server_args_lines(r)],
    "engine_checks": lambda r: engine_check_lines(r.engine_checks),
    "overhead": _in_summary_md("where each arm's wall time went"),
    "not_measured": _not_measured,
    "failed": lambda r: r.failed_cells,
    "notes": lambda r: r.notes,
}


def terminal_sections(report: SweepReport) -> list[tuple[str, list[str]]]:
    """Each section's title and lines, in the one order."""
    return [(section.title, LINES[section.key](report)) for section in report_sections(report)]
