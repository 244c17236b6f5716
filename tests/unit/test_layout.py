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


DECIDERS = ("specfleet/decisions.py", "specfleet/analysis.py", "specfleet/gates.py", "specfleet/quality_gates.py",
            "specfleet/kpolicy.py", "specfleet/mix_verdict.py", "specfleet/stats/noise.py",
            "specfleet/decision_rule.py", "specfleet/evidence.py", "specfleet/class_verdict.py", "specfleet/canary.py",
            "specfleet/stats/variance.py", "specfleet/stats/runs.py", "specfleet/monitor_basis.py",
            "specfleet/decision_table.py", "tasks/store/sweep.py",
            "tasks/report/views.py", "tasks/report/headline.py")
"""What makes or states a decision, verdict, gate, noise floor or k policy."""


def _module_path(name: str) -> Path | None:
    base = ROOT / name.replace(".", "/")
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _reaches(start: Path) -> set[str]:
    """Every project module ``start`` imports, directly or through others (packages' ``__init__`` included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        for name in names:
            parts = name.split(".")
            for module in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
                path = _module_path(module)
                if path is not None and module not in seen:
                    seen.add(module)
                    todo.append(path)
    return seen


def test_no_decision_reads_a_prediction() -> None:
    """Predicted figures never enter a decision: nothing that decides imports the performance model
    or the report's measured and predicted view, even through another module."""
    assert {"specfleet.perfmodel.predict", "tasks.report.predicted"} <= _reaches(ROOT / "tasks/report/content.py")
    for source in DECIDERS:
        reached = _reaches(ROOT / source)
        assert not {m for m in reached if m.startswith("specfleet.perfmodel") or m == "tasks.report.predicted"}, source
