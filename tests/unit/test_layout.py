"""The layout's promises (issue 14): ``tasks/`` holds plain functions that tests call directly,
so Prefect is imported only by ``flows/`` (where the task wrappers live) and the CLI."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_only_flows_wrap_tasks_in_prefect() -> None:
    modules = sorted((ROOT / "tasks").rglob("*.py"))
    assert len(modules) > 40
    offenders = [str(p.relative_to(ROOT)) for p in modules
                 if any(name == "prefect" or name.startswith("prefect.") for name in _imports(p))]
    assert offenders == []


def test_no_test_calls_a_prefect_task_body() -> None:
    calls = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py"))
             if p.name != "test_layout.py" and ".fn(" in p.read_text(encoding="utf-8")]
    assert calls == []
