"""The sweep summary as text: shared column formats, the markdown report (Prefect artifact,
MLflow ``summary.md``, results dir) and the Prefect table and markdown artifacts.

A figure that was not measured prints as "n/a"; the row's reason says why.
"""

import json
from collections.abc import Callable, Mapping, Sequence

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.aggregate import SweepSummary
from tasks.report.fmt import NA

Row = Mapping[str, object]
Column = tuple[str, Callable[[Row], str]]


def _num(key: str, fmt: str, suffix: str = "") -> Callable[[Row], str]:
    def render(row: Row) -> str:
        value = row.get(key)
        return NA if not isinstance(value, int | float) else f"{value:{fmt}}{suffix}"
    return render


def _load(row: Row) -> str:
    concurrency = row.get("concurrency")
    return f"c{concurrency}" if concurrency is not None else f"{row.get('load_value')}/s"


def _speedup(row: Row) -> str:
    estimate, low, high = (row.get(k) for k in ("qualified_tps_speedup", "speedup_low", "speedup_high"))
    if not isinstance(estimate, int | float):
        return NA
    interval = f" [{low:.2f}, {high:.2f}]" if isinstance(low, float) and isinstance(high, float) else ""
    return f"{estimate:.2f}x{interval}"


def _text(key: str) -> Callable[[Row], str]:
    return lambda row: NA if row.get(key) is None else str(row.get(key))


COST_COLUMNS: list[Column] = [
    ("method", _text("method")), ("k", _text("k")), ("class", _text("prompt_class")), ("load", _load),
    ("accept r", _num("acceptance_rate", ".2f")), ("tok/step", _num("mean_acceptance_length", ".2f")),
    ("speedup [CI]", _speedup), ("base $/M", _num("baseline_cost_per_million_usd", ",.2f")),
    ("spec $/M", _num("candidate_cost_per_million_usd", ",.2f")), ("saving", _num("saving_fraction", "+.1%")),
    ("noise", _num("noise_floor", ".1%")), ("verdict", _text("verdict")), ("reason", _text("reason_code")),
]
NEGATIVE_COLUMNS: list[Column] = [
    ("method", _text("method")), ("k", _text("k")), ("class", _text("prompt_class")), ("load", _load),
    ("reason", _text("reason")),
]

OVERHEAD_COLUMNS: list[Column] = [
    ("arm", _text("arm")), ("phase", _text("phase")), ("cells", _text("cells_measured")),
    ("start s", _num("startup_s", ".1f")), ("probe s", _num("probe_s", ".1f")),
    ("warm-up s", _num("warmup_s", ".1f")), ("measured s", _num("measured_s", ".1f")),
    ("idle s", _num("idle_s", ".1f")), ("wall s", _num("wall_s", ".1f")),
    ("measured", _num("measured_fraction", ".0%")), ("restarts", _text("restarts")),
]


def overhead_rows(summary: SweepSummary) -> list[dict[str, object]]:
    """One row per arm run now: where its wall time went (issue 9, sweep overhead). An arm whose
    Ray task died has no figures (n/a), not zeros."""
    return [{"arm": a.arm, "phase": a.phase, "cells_measured": a.cells_measured,
             **(a.timing.model_dump() | {"idle_s": a.timing.idle_s} if a.timing else {}),
             "measured_fraction": a.measured_fraction}
            for a in summary.arms]


def markdown_table(rows: Sequence[Row], columns: Sequence[Column]) -> str:
    if not rows:
        return "(none)\n"
    lines = ["| " + " | ".join(name for name, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(render(row).replace("|", "\\|") for _, render in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def k_policy_lines(policy: Row) -> list[str]:
    """The deployable policy of one speculative arm: its k per level and the vLLM config."""
    ours = policy["specfleet"]
    assert isinstance(ours, dict)
    head = f"{ours['spec_name']} ({ours['sampling']}"
    head += f", {ours['prompt_class']})" if ours["prompt_class"] else ", all prompt classes)"
    if ours["refused"]:
        return [f"{head}: no policy ({ours['refused']})"]
    levels = "; ".join(f"c{c['level']}: k={c['k']} ({c['reason']})" for c in ours["levels"])
    config = policy.get("speculative_config")
    deploy = json.dumps(config, sort_keys=True) if config else "none: speculation adopted at no level"
    return [f"{head}: {levels}", f"  speculative_config: {deploy}"]


def summary_markdown(summary: SweepSummary) -> str:
    hardware = summary.cost_table[0]["hardware"] if summary.cost_table else None
    parts = [
        f"# Sweep {summary.sweep_id}\n\n",
        f"Config `{summary.config_name}`, fingerprint `{summary.fingerprint}`"
        + (f", {hardware}" if hardware else "") + ".\n",
        f"Cells: {summary.cells_complete}/{summary.cells_planned} complete ({summary.cells_ok} ok, "
        f"{summary.cells_invalid} invalid, {len(summary.failed_cells)} failed); "
        f"{summary.servers_started} servers started in this run.\n",
        "\n## Cost per million SLO-qualified tokens and decisions\n\n",
        markdown_table(summary.cost_table, COST_COLUMNS),
        "\n## Negative-result cells\n\n", markdown_table(summary.negative_cells, NEGATIVE_COLUMNS),
        "\n## k policy (specfleet rule, all prompt classes)\n\n```\n",
        *(line + "\n" for p in summary.k_policy if p["peer"] is None for line in k_policy_lines(p)),
        "```\n\n## Sweep overhead (this run's arms)\n\n", markdown_table(overhead_rows(summary), OVERHEAD_COLUMNS),
        "\n## Equivalence gates\n\n",
        *(f"- {arm}: {g.gate} {'passed' if g.passed else 'FAILED'}: {g.detail}\n"
          for arm, gates in summary.gates.items() for g in gates),
    ]
    if summary.notes:
        parts += ["\n## Notes\n\n", *(f"- {note}\n" for note in summary.notes)]
    if summary.failed_cells:
        parts += ["\n## Failed cells (resume to measure them)\n\n", *(f"- {f}\n" for f in summary.failed_cells)]
    return "".join(parts)


def publish_prefect_artifacts(summary: SweepSummary, markdown: str) -> None:
    """The cost table as a table artifact and the summary as markdown, on the flow run."""
    key = "".join(ch if ch.isalnum() else "-" for ch in summary.config_name.lower())
    create_table_artifact(table=summary.cost_table, key=f"{key}-cost-table",
                          description=f"Cost table of sweep {summary.sweep_id}")
    create_markdown_artifact(markdown=markdown, key=f"{key}-sweep-summary",
                             description=f"Summary of sweep {summary.sweep_id}")
