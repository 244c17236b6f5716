"""Rich tables for people; ``--json`` output never goes through here."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from rich import box
from rich.console import Console
from rich.table import Table

from tasks.report.fmt import NA

if TYPE_CHECKING:
    from specfleet.summary import SweepSummary
    from tasks.report.tables import Column

console = Console()
Row = TypeVar("Row")
WIDE_COLUMNS = 160


def _fmt(value: object) -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def print_measurement(result: dict[str, object]) -> None:
    table = Table(title=f"cell: {result['status']}")
    table.add_column("series")
    for column in ("p50", "p95", "p99", "mean"):
        table.add_column(column, justify="right")
    for series in ("ttft_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms"):
        figures = result[series]
        assert isinstance(figures, dict)
        table.add_row(series, *(_fmt(figures[c]) for c in ("p50", "p95", "p99", "mean")))
    console.print(table)
    for name in ("completed", "failed", "output_tokens_per_s", "qualified_tokens_per_s", "acceptance_rate",
                 "mean_acceptance_length"):
        console.print(f"{name}: {_fmt(result[name])}")
    for reason in result["reasons"] or []:  # type: ignore[attr-defined]
        console.print(f"[yellow]note:[/yellow] {reason}")


def _rich_table(title: str, rows: Sequence[Row], columns: Sequence["Column[Row]"]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name, _ in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(render(row) for _, render in columns))
    return table


def print_sweep_summary(summary: "SweepSummary", tracking_uri: str) -> None:
    """Cost table, decisions, gates, negative-result cells, k policy; every figure from the stored cells."""
    from tasks.report.tables import COST_COLUMNS, NEGATIVE_COLUMNS, OVERHEAD_COLUMNS, gate_lines, k_policy_lines

    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)  # logs and CI: do not fold tables
    out.print(f"\nsweep id: {summary.sweep_id}  (fingerprint {summary.fingerprint})")
    out.print(f"cells: {summary.cells_complete}/{summary.cells_planned} complete ({summary.cells_ok} ok, "
              f"{summary.cells_invalid} invalid, {len(summary.failed_cells)} failed); "
              f"{summary.servers_started} servers started")
    if summary.cost_table:
        out.print(f"hardware: {summary.cost_table[0].hardware}")
    out.print(_rich_table("Cost per million SLO-qualified tokens", summary.cost_table, COST_COLUMNS))
    out.print("[bold]Decisions[/bold]")
    for row in summary.cost_table:
        colour = "green" if row.verdict == "adopt" else "red"
        out.print(f"  [{colour}]{row.verdict}[/{colour}] {row.method} k={row.k} "
                  f"{row.prompt_class} {row.load_mode}={row.load_value:g}: {row.reason}")
    out.print("[bold]Equivalence gates[/bold] (the held-out quality gate per prompt class and sampling mode)")
    for line in gate_lines(summary.gates, summary.quality):
        out.print(f"  {line}", markup=False, highlight=False)
    out.print(_rich_table("Negative-result cells", summary.negative_cells, NEGATIVE_COLUMNS))
    out.print("[bold]k policy[/bold] (specfleet rule, all prompt classes)")
    for policy in (p for p in summary.k_policy if p.peer is None):
        for line in k_policy_lines(policy):
            out.print(f"  {line}", markup=False)
    out.print(_rich_table("Sweep overhead (arms run now)", summary.arms, OVERHEAD_COLUMNS))
    for note in [*summary.notes, *summary.failed_cells]:
        out.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    out.print(f"results: {summary.results_dir}")
    out.print(f"MLflow UI: {mlflow_ui_hint(tracking_uri)}", markup=False)


def mlflow_ui_hint(tracking_uri: str) -> str:
    """A server is opened in a browser; a local store through ``mlflow ui`` on loopback."""
    from tasks.tracking.runs import shown_uri

    if tracking_uri.startswith(("http://", "https://")):
        return f"open {shown_uri(tracking_uri)}"
    return f"mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1"
