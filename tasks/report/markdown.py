"""``report.md``, the report's markdown (``specfleet report``): the sweep's report in the one section
order (``specfleet_tasks.report.sections``), as ``summary.md`` shows it
(``specfleet_tasks.report.summary_md``) with more
detail where the report has it (each class's ready-to-paste config, each gate's test), then what the
report adds: latency caveats, KV capacity, energy, the measured and predicted view and the diff."""

from collections.abc import Callable

from specfleet.contract import arm_plans
from specfleet_tasks.report import fmt
from specfleet_tasks.report.content import ReportContent
from specfleet_tasks.report.headline import mix_markdown
from specfleet_tasks.report.predicted import MEASURED_COLUMNS, PREDICTED_COLUMNS, caption, table_title
from specfleet_tasks.report.sections import SectionKey, report_sections
from specfleet_tasks.report.summary_md import BODIES, bullets, code_block
from specfleet_tasks.report.summary_md import Body as SummaryBody
from specfleet_tasks.report.tables import (
    ACCEPTANCE_CAPTION,
    ACCEPTANCE_COLUMNS,
    gate_line,
    k_policy_lines,
    markdown_table,
)

Body = Callable[[ReportContent], str]


def _policies(content: ReportContent) -> str:
    """Each class's ready-to-paste ``speculative_config``, then each arm's policy over all classes."""
    lines = []
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
    report = content.report
    return "\n".join(lines) + "\n" + code_block([line for p in report.k_policy if p.peer is None
                                                 for line in k_policy_lines(p)])


def _gates(content: ReportContent) -> str:
    """The equivalence gates per speculative arm, then the held-out quality gates."""
    report = content.report
    lines = []
    for arm in (p.arm for p in arm_plans(content.sweep.config) if not p.is_baseline):
        gates = "; ".join(f"{g.gate} {'passed' if g.passed else 'FAILED'}: {g.detail}"
                          for g in report.gates.get(arm, []))
        lines.append(f"{arm}: {gates or fmt.NA + ' (no greedy result: the notes say why)'}")
    return bullets([*lines, *(gate_line(q.arm, q.gate()) for q in report.quality)])


def _of_report(body: SummaryBody) -> Body:
    return lambda content: body(content.report)


BODIES_MD: dict[SectionKey, Body] = {
    **{key: _of_report(body) for key, body in BODIES.items()},
    "mix": lambda c: mix_markdown(c.report.mix, per_class=True),
    "k_policy": _policies,
    "gates": _gates,
    "acceptance": lambda c: f"{ACCEPTANCE_CAPTION}\n\n" + markdown_table(c.acceptance_rows, ACCEPTANCE_COLUMNS),
}
"""What ``report.md`` shows under each section's title: ``summary.md``'s, with more detail in four."""


def _measures(content: ReportContent) -> list[tuple[str, str]]:
    """The report's own sections after the report's: latency caveats, KV capacity, energy."""
    kv = [f"{r.arm}: {fmt.num(r.tokens, ',d')} tokens, draft costs {fmt.pct(r.draft_cost, signed=False)}"
          + (f" ({r.note})" if r.note else "") for r in content.kv]
    energy = [f"{r.arm} {r.load}: {fmt.num(r.j_per_qualified_token, '.4g')} J" + (f" ({r.note})" if r.note else "")
              for r in content.energy]
    return [*([("Latency caveats", bullets(content.read_together))] if content.read_together else []),
            ("KV capacity", bullets(kv)), ("Energy per SLO-qualified accepted token", bullets(energy))]


def _predicted(content: ReportContent) -> list[tuple[str, str]]:
    view = content.predicted
    if view is None:
        return []
    notes = [f"not predicted: {line}" for line in view.missing] + list(view.notes)
    text = "\n".join([caption(view), *(["", bullets(notes).rstrip("\n")] if notes else []), "",
                      "### Measured cells", "", markdown_table(view.measured, MEASURED_COLUMNS).rstrip("\n"), "",
                      f"### {table_title(view)}", "", markdown_table(view.predictions, PREDICTED_COLUMNS)])
    return [("Measured and predicted", text)]


def _diff(content: ReportContent) -> list[tuple[str, str]]:
    diff = content.diff
    if diff is None:
        return []
    head = (f"Fingerprint parts changed: {', '.join(diff.fingerprint_changes) or 'none'}; "
            f"{len(diff.contract_changes)} contract fields differ; "
            f"{len(diff.flipped)} of {len(diff.rows)} decisions flipped.\n")
    flipped = [f"{r.arm} {r.row} {r.load}: {r.other.verdict} -> {r.this.verdict} "
               f"({r.other.reason_code} -> {r.this.reason_code})" for r in diff.flipped if r.this and r.other]
    return [(f"Against sweep {diff.other_id}", head + ("\n" + bullets(flipped) if flipped else ""))]


def render_markdown(content: ReportContent, html_name: str) -> str:
    report, sweep = content.report, content.sweep
    parts = [f"# specfleet report: sweep {report.sweep_id}\n\n"
             f"Config `{report.config_name}`, fingerprint `{report.fingerprint}`, {len(sweep.cells)} stored cells; "
             f"decisions from {report.decided_by}. Figures: `{html_name}`. Generated {content.generated_at}.\n"]
    sections = [(s.title, BODIES_MD[s.key](content)) for s in report_sections(report)]
    for title, body in [*sections, *_measures(content), *_predicted(content), *_diff(content)]:
        parts += [f"\n## {title}\n\n", body]
    return "".join(parts)
