"""``cli/render.py`` formats what a command already has: it imports nothing that reads a store or
asks a server; the MLflow UI hint is looked up by the command (``specfleet_cli.sweep.mlflow_ui_hint``)."""

import ast
from pathlib import Path

from specfleet_cli.sweep import mlflow_ui_hint

RENDER = Path(__file__).resolve().parents[3] / "cli" / "render.py"
FORMATTING = ("rich", "typing", "pathlib", "specfleet.", "specfleet_tasks.report.fmt",
              "specfleet_tasks.report.headline", "specfleet_tasks.report.tables", "specfleet_tasks.report.terminal")
"""What rendering may import: the console, the pure core's types, and the report's line formatters."""


def test_render_imports_only_formatting() -> None:
    tree = ast.parse(RENDER.read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    outside = sorted(name for name in imported if not name.startswith(FORMATTING))
    assert imported and not outside, outside


def test_the_hint_for_a_local_store_without_the_experiment_names_mlflow_ui(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'none.db'}"  # no file: the store is not opened, so not created
    assert mlflow_ui_hint(uri, "exp") == f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1"
    assert not (tmp_path / "none.db").exists()
