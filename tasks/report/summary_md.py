"""``summary.md``: the sweep's report as the flow writes it when it finishes (also logged to MLflow
and published as the Prefect artifact), its sections in the one order (``specfleet_tasks.report.sections``);
``report.md`` shows the same sections with more detail (``specfleet_tasks.report.markdown``)."""

from collections.abc import Callable, Sequence

from specfleet.report.sweep_report import SweepReport
from specfleet.verdicts.prompt_class import ClassVerdict
from specfleet_tasks.report import fmt
from specfleet_tasks.report.headline import inconclusive_lines, look_lines, mix_markdown, noise_lines
from specfleet_tasks.report.sections import SectionKey, report_sections
from specfleet_tasks.report.tables import (
    ACCEPTANCE_CAPTION,
    ACCEPTANCE_COLUMNS,
    COST_COLUMNS,
    NEGATIVE_COLUMNS,
    OVERHEAD_COLUMNS,
    engine_check_lines,
    gate_lines,
    k_policy_lines,
    markdown_table,
    not_measured_line,
    policy_comparison_lines,
)

Body = Callable[[SweepReport], str]


def bullets(lines: Sequence[str]) -> str:
    return "".join(f"- {line}\n" for line in lines)


def code_block(lines: Sequence[str]) -> str:
    return "```\n" + "".join(line + "\n" for line in lines) + "```\n"


def class_verdict_table(verdicts: Sequence[ClassVerdict]) -> str:
    """The verdict per prompt class: the arm shown, its saving and corrected interval, and why."""
    header = ("prompt class", "verdict", "best arm (method, k)", "saving", "saving interval (corrected)",
              "speedup [corrected]", "comparisons", "reason", "cells adopted")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in verdicts:
        f = v.figures
        if f is None or v.arm is None:
            lines.append(f"| {v.label} | {v.verdict} | {fmt.NA} | | | | | {v.reason} | |")
            continue
        lines.append(
            f"| {v.label} | **{v.verdict}** | {v.arm} ({v.method}, k={v.k}) | {fmt.pct(f.saving_fraction)} | "
            f"{fmt.saving_range(f.pessimistic_saving_fraction, f.optimistic_saving_fraction)} | "
            f"{fmt.speedup(f.speedup_corrected)} | {v.comparisons or fmt.NA} | {v.reason.replace('|', '/')} | "
            f"{', '.join(v.adopted_at) or 'none'} |")
    return "\n".join(lines) + "\n"


def server_args_lines(report: SweepReport) -> list[str]:
    """The adopted arms' server commands, then the speculation-off one (what a rollback restarts with)."""
    args = report.server_args
    if args is None:
        return []
    adopted = [v for v in report.mix if v.adoptable and v.name in args.speculative]
    lines = [f"adopted at the traffic mix (corrected for {v.comparisons} comparisons), {v.name}: "
             f"`{args.command(v.name)}`" for v in adopted]
    partial = [v.name for v in report.mix if v.partial and v.name in args.speculative]
    lines = lines or ["adopted at the traffic mix: none" + (f" (PARTIAL, never adoptable: {', '.join(partial)})"
                                                            if partial else "")]
    return [*lines, f"speculation off ({args.speculation_off_arm}; the rollback: vLLM sets speculation when a server "
                    f"starts, so a replica rolls back by restarting with these): `{args.command()}`",
            "without --host and --port, which the deployment sets"]


BODIES: dict[SectionKey, Body] = {
    "mix": lambda r: "".join(f"{line}\n\n" for line in look_lines(r.look, r.mix, r.decisions)) + mix_markdown(r.mix),
    "classes": lambda r: class_verdict_table(r.class_verdicts),
    "noise": lambda r: bullets(noise_lines(r.noise)),
    "decisions": lambda r: markdown_table(r.cost_table, COST_COLUMNS),
    "negative": lambda r: markdown_table(r.negative_cells, NEGATIVE_COLUMNS),
    "inconclusive": lambda r: bullets(inconclusive_lines(r.mix, r.decisions)),
    "k_policy": lambda r: code_block([line for p in r.k_policy if p.peer is None for line in k_policy_lines(p)]),
    "policy_comparison": lambda r: code_block(policy_comparison_lines(r.policy_comparisons)),
    "gates": lambda r: bullets(gate_lines(r.gates, r.quality)),
    "acceptance": lambda r: f"{ACCEPTANCE_CAPTION}\n\n" + markdown_table(r.acceptance, ACCEPTANCE_COLUMNS),
    "server_args": lambda r: bullets(server_args_lines(r)),
    "engine_checks": lambda r: "".join(line + "\n" for line in engine_check_lines(r.engine_checks)),
    "overhead": lambda r: markdown_table(r.arms, OVERHEAD_COLUMNS),
    "not_measured": lambda r: bullets([not_measured_line(c) for c in r.not_measured]),
    "failed": lambda r: bullets(r.failed_cells),
    "notes": lambda r: bullets(r.notes),
}
"""What ``summary.md`` shows under each section's title."""


def summary_markdown(report: SweepReport) -> str:
    """The counts, then every section of the report in the one order."""
    parts = [
        f"# Sweep {report.sweep_id}\n\n",
        f"Config `{report.config_name}`, fingerprint `{report.fingerprint}`, {report.hardware}.\n",
        f"Cells: {report.cells_complete}/{report.cells_planned} complete ({report.cells_ok} ok, "
        f"{report.cells_invalid} invalid, {len(report.failed_cells)} failed"
        + (f", {len(report.not_measured)} not measured (budget)" if report.not_measured else "") + "); "
        f"{report.servers_started} servers started in this run.\n",
    ]
    for section in report_sections(report):
        parts += [f"\n## {section.title}\n\n", BODIES[section.key](report)]
    return "".join(parts)
