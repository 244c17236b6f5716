"""Rich tables for people; ``--json`` output never goes through here."""

from rich.console import Console
from rich.table import Table

console = Console()


def _fmt(value: object) -> str:
    if value is None:
        return "n/a"
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
