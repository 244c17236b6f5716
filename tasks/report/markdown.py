"""The two markdown documents of a sweep, built from the same tables (``tasks.report.tables``):
the sweep summary the flow writes when it finishes (``summary.md``, MLflow, the Prefect
artifact), and the report's summary (``specfleet report``): both open with the verdict at the
traffic mix, then the decision per prompt class, the k policies, the negative cells and the
gates, pointing at the HTML report for the figures; the report's summary also carries the measured
and predicted view's tables."""

from specfleet.contract import arm_plans
from specfleet.report.sweep_report import SweepReport
from tasks.report import fmt
from tasks.report.content import ReportContent
from tasks.report.headline import INCONCLUSIVE_TITLE, inconclusive_lines, mix_markdown, noise_lines
from tasks.report.predicted import MEASURED_COLUMNS, PREDICTED_COLUMNS, caption, table_title
from tasks.report.tables import (
    ACCEPTANCE_CAPTION,
    ACCEPTANCE_COLUMNS,
    ACCEPTANCE_TITLE,
    COST_COLUMNS,
    NEGATIVE_COLUMNS,
    OVERHEAD_COLUMNS,
    POLICY_COMPARISON_TITLE,
    engine_check_lines,
    gate_line,
    gate_lines,
    k_policy_lines,
    markdown_table,
    not_measured_line,
    not_measured_title,
    policy_comparison_lines,
)


def summary_markdown(summary: SweepReport) -> str:
    """The sweep summary: counts, the verdict at the traffic mix, cost table, negative cells, k
    policy, overhead, gates, notes, then the failed cells and the cells the budget did not measure."""
    hardware = summary.cost_table[0].hardware if summary.cost_table else None
    parts = [
        f"# Sweep {summary.sweep_id}\n\n",
        f"Config `{summary.config_name}`, fingerprint `{summary.fingerprint}`"
        + (f", {hardware}" if hardware else "") + ".\n",
        f"Cells: {summary.cells_complete}/{summary.cells_planned} complete ({summary.cells_ok} ok, "
        f"{summary.cells_invalid} invalid, {len(summary.failed_cells)} failed"
        + (f", {len(summary.not_measured)} not measured (budget)" if summary.not_measured else "") + "); "
        f"{summary.servers_started} servers started in this run.\n\n",
        mix_markdown(summary.mix),
        "\n## Run-to-run noise (every interval includes it)\n\n",
        *(f"- {line}\n" for line in noise_lines(summary.noise)),
        "\n## Cost per million SLO-qualified tokens and decisions\n\n",
        markdown_table(summary.cost_table, COST_COLUMNS),
        "\n## Negative-result cells (rejected)\n\n", markdown_table(summary.negative_cells, NEGATIVE_COLUMNS),
        f"\n## {INCONCLUSIVE_TITLE}\n\n",
        *(f"- {line}\n" for line in inconclusive_lines(summary.mix, summary.decisions)),
        f"\n## {ACCEPTANCE_TITLE}\n\n{ACCEPTANCE_CAPTION}\n\n", markdown_table(summary.acceptance, ACCEPTANCE_COLUMNS),
        "\n## k policy (specfleet rule, all prompt classes)\n\n```\n",
        *(line + "\n" for p in summary.k_policy if p.peer is None for line in k_policy_lines(p)),
        "```\n\n",
        *([f"## {POLICY_COMPARISON_TITLE}\n\n```\n",
           *(line + "\n" for line in policy_comparison_lines(summary.policy_comparisons)), "```\n\n"]
          if summary.policy_comparisons else []),
        "## Sweep overhead (this run's arms)\n\n", markdown_table(summary.arms, OVERHEAD_COLUMNS),
        "\n## Equivalence gates\n\n", *(f"- {line}\n" for line in gate_lines(summary.gates, summary.quality)),
    ]
    if summary.server_args is not None:
        parts += ["\n## Server arguments (deploy, roll back)\n\n", *(f"- {line}\n" for line in
                                                                   server_args_lines(summary))]
    if summary.engine_checks:
        parts += ["\n## Engine self-checks\n\n", *(line + "\n" for line in engine_check_lines(summary.engine_checks))]
    if summary.notes:
        parts += ["\n## Notes\n\n", *(f"- {note}\n" for note in summary.notes)]
    if summary.failed_cells:
        parts += ["\n## Failed cells (resume to measure them)\n\n", *(f"- {f}\n" for f in summary.failed_cells)]
    if summary.not_measured:
        parts += [f"\n## {not_measured_title(len(summary.not_measured))}\n\n",
                  *(f"- {not_measured_line(c)}\n" for c in summary.not_measured)]
    return "".join(parts)


def server_args_lines(summary: SweepReport) -> list[str]:
    """The adopted arms' server commands, then the speculation-off one (what a rollback restarts with)."""
    args = summary.server_args
    if args is None:
        return []
    adopted = [v for v in summary.mix if v.adoptable and v.name in args.speculative]
    lines = [f"adopted at the traffic mix (corrected for {v.comparisons} comparisons), {v.name}: "
             f"`{args.command(v.name)}`" for v in adopted]
    partial = [v.name for v in summary.mix if v.partial and v.name in args.speculative]
    lines = lines or ["adopted at the traffic mix: none" + (f" (PARTIAL, never adoptable: {', '.join(partial)})"
                                                            if partial else "")]
    return [*lines, f"speculation off ({args.speculation_off_arm}; the rollback: vLLM sets speculation when a server "
                    f"starts, so a replica rolls back by restarting with these): `{args.command()}`",
            "without --host and --port, which the deployment sets"]


def _decision_lines(content: ReportContent) -> list[str]:
    header = ("prompt class", "verdict", "best arm (method, k)", "saving", "saving interval (corrected)",
              "speedup [corrected]", "comparisons", "reason", "cells adopted")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in content.report.class_verdicts:
        f = v.figures
        if f is None or v.arm is None:
            lines.append(f"| {v.label} | {v.verdict} | {fmt.NA} | | | | | {v.reason} | |")
            continue
        lines.append(
            f"| {v.label} | **{v.verdict}** | {v.arm} ({v.method}, k={v.k}) | {fmt.pct(f.saving_fraction)} | "
            f"{fmt.saving_range(f.pessimistic_saving_fraction, f.optimistic_saving_fraction)} | "
            f"{fmt.speedup(f.speedup_corrected)} | {v.comparisons or fmt.NA} | {v.reason.replace('|', '/')} | "
            f"{', '.join(v.adopted_at) or 'none'} |")
    return lines


def _policy_lines(content: ReportContent) -> list[str]:
    lines = ["", "## k policy (ready-to-paste vLLM speculative_config)", ""]
    for v in content.report.class_verdicts:
        lines += [f"**{v.label}**:", ""]
        if v.speculative_config:
            lines += ["```json", fmt.config_json(v.speculative_config), "```", ""]
        if v.config_note:
            lines += [v.config_note if v.speculative_config else f"{fmt.NA}: {v.config_note}", ""]
    for policy, config, recommended in content.deployable:
        lines += [f"**{policy.spec_name}, all prompt classes ({policy.sampling})**, {recommended}:", ""]
        lines += ["```json", fmt.config_json(config), "```", ""] if config else \
            [f"{fmt.NA}: {policy.refused or 'speculation adopted at no measured level'}", ""]
    if content.policy_comparisons:
        lines += ["", f"## {POLICY_COMPARISON_TITLE}", "", "```", *content.policy_comparisons, "```", ""]
    return lines


def _measurement_lines(content: ReportContent) -> list[str]:
    lines = ["", "## Equivalence", ""]
    for arm in (p.arm for p in arm_plans(content.sweep.config) if not p.is_baseline):
        results = content.report.gates.get(arm, [])
        gates = "; ".join(f"{g.gate} {'passed' if g.passed else 'FAILED'}: {g.detail}" for g in results)
        lines.append(f"- {arm}: {gates or fmt.NA + ' (no greedy result: the notes say why)'}")
    if content.report.engine_checks:
        lines += ["", "## Engine self-checks", "", *engine_check_lines(content.report.engine_checks)]
    lines += ["", "## Held-out quality", "", *(f"- {gate_line(q.arm, q.gate())}" for q in content.report.quality)]
    if content.read_together:
        lines += ["", "## Latency caveats", "", *(f"- {n}" for n in content.read_together)]
    lines += ["", "## KV capacity", ""]
    lines += [f"- {r.arm}: {fmt.num(r.tokens, ',d')} tokens, draft costs {fmt.pct(r.draft_cost, signed=False)}"
              + (f" ({r.note})" if r.note else "") for r in content.kv]
    lines += ["", "## Energy per SLO-qualified accepted token", ""]
    lines += [f"- {r.arm} {r.load}: {fmt.num(r.j_per_qualified_token, '.4g')} J" + (f" ({r.note})" if r.note else "")
              for r in content.energy]
    return lines


def _predicted_lines(content: ReportContent) -> list[str]:
    view = content.predicted
    if view is None:
        return []
    lines = ["", "## Measured and predicted", "", caption(view)]
    bullets = [f"- not predicted: {line}" for line in view.missing] + [f"- {note}" for note in view.notes]
    lines += ["", *bullets] if bullets else []
    lines += ["", "### Measured cells", "", markdown_table(view.measured, MEASURED_COLUMNS).rstrip("\n")]
    lines += ["", f"### {table_title(view)}", "",
              markdown_table(view.predictions, PREDICTED_COLUMNS).rstrip("\n")]
    return lines


def _diff_lines(content: ReportContent) -> list[str]:
    diff = content.diff
    if diff is None:
        return []
    lines = ["", f"## Against sweep {diff.other_id}", "",
             f"Fingerprint parts changed: {', '.join(diff.fingerprint_changes) or 'none'}; "
             f"{len(diff.contract_changes)} contract fields differ; "
             f"{len(diff.flipped)} of {len(diff.rows)} decisions flipped.", ""]
    lines += [f"- {r.arm} {r.row} {r.load}: {r.other.verdict} -> {r.this.verdict} "
              f"({r.other.reason_code} -> {r.this.reason_code})" for r in diff.flipped if r.this and r.other]
    return lines


def render_markdown(content: ReportContent, html_name: str) -> str:
    d, sweep = content.report, content.sweep
    lines = [
        f"# specfleet report: sweep {d.sweep_id}", "",
        f"Config `{d.config_name}`, fingerprint `{d.fingerprint}`, {len(sweep.cells)} stored cells; "
        f"decisions from {d.decided_by}. Figures: `{html_name}`. Generated {content.generated_at}.", "",
        mix_markdown(d.mix, per_class=True),
        "## Run-to-run noise (every interval includes it)", "", *(f"- {line}" for line in noise_lines(d.noise)), "",
        "## Decision per prompt class", "", *_decision_lines(content), *_policy_lines(content),
        "## All decisions", "", markdown_table(d.cost_table, COST_COLUMNS),
        f"## Negative-result cells, rejected ({len(d.negative_cells)})", "",
        markdown_table(d.negative_cells, NEGATIVE_COLUMNS).rstrip("\n"),
        "", f"## {INCONCLUSIVE_TITLE}", "", *(f"- {line}" for line in content.inconclusive),
        "", f"## {ACCEPTANCE_TITLE}", "", ACCEPTANCE_CAPTION, "",
        markdown_table(content.acceptance_rows, ACCEPTANCE_COLUMNS).rstrip("\n"),
        *_measurement_lines(content), *_predicted_lines(content), *_diff_lines(content),
    ]
    if d.failed_cells:
        lines += ["", "## Failed cells", "", *(f"- {f}" for f in d.failed_cells)]
    if d.not_measured:
        lines += ["", f"## {not_measured_title(len(d.not_measured))}", "",
                  *(f"- {not_measured_line(c)}" for c in d.not_measured)]
    if d.notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in d.notes)]
    return "\n".join(lines) + "\n"
