"""The layout's promises (issue 14): ``tasks/`` holds plain functions that tests call directly,
so Prefect is imported only by ``flows/`` (where the task wrappers live) and the CLI."""

import ast
from functools import cache
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


DECIDERS = ("specfleet/verdicts/cell.py", "specfleet/verdicts/analysis.py", "specfleet/gates/equivalence.py",
            "specfleet/gates/quality.py", "specfleet/verdicts/kpolicy.py", "specfleet/verdicts/mix.py",
            "specfleet/stats/noise.py", "specfleet/verdicts/rule.py", "specfleet/verdicts/evidence.py",
            "specfleet/verdicts/prompt_class.py", "specfleet/production/canary.py", "specfleet/stats/variance.py",
            "specfleet/stats/runs.py", "specfleet/production/monitor_basis.py", "specfleet/verdicts/table.py",
            "tasks/store/sweep.py", "tasks/report/views.py", "tasks/report/headline.py")
"""What makes or states a decision, verdict, gate, noise floor or k policy."""


def _module_path(name: str) -> Path | None:
    base = ROOT / name.replace(".", "/")
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


@cache
def _project_imports(path: Path) -> frozenset[tuple[str, Path]]:
    """The project modules ``path`` names in its imports (each prefix of a dotted name), with their files:
    parsed once per file, however many deciders reach it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    found = set()
    for name in names:
        parts = name.split(".")
        for module in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            module_path = _module_path(module)
            if module_path is not None:
                found.add((module, module_path))
    return frozenset(found)


def _reaches(start: Path) -> set[str]:
    """Every project module ``start`` imports, directly or through others (packages' ``__init__`` included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for module, path in _project_imports(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(path)
    return seen


def test_no_decision_reads_a_prediction() -> None:
    """Predicted figures never enter a decision: nothing that decides imports the performance model
    or the report's measured and predicted view, even through another module. The model's labelled
    output type (``specfleet.perfmodel.prediction``), which the report carries for the cells a budget
    left out, is no part of the model, and the package's ``__init__`` imports nothing."""
    predicted = "specfleet_tasks.report.predicted"
    assert {"specfleet.perfmodel.predict", predicted} <= _reaches(ROOT / "tasks/report/content.py")
    for typed in ("specfleet/perfmodel/__init__.py", "specfleet/perfmodel/prediction.py"):
        assert {m for m in _reaches(ROOT / typed) if m.startswith("specfleet.perfmodel.")} <= {
            "specfleet.perfmodel.prediction"}, typed
    for source in DECIDERS:
        reached = _reaches(ROOT / source) - {"specfleet.perfmodel", "specfleet.perfmodel.prediction"}
        assert not {m for m in reached if m.startswith("specfleet.perfmodel") or m == predicted}, source


def _test_imports(path: Path, source: str | None = None) -> list[str]:
    """What a module under tests/ must not import: another test module (a ``test_*`` module
    anywhere on the dotted path), or, outside tests/unit, anything from tests.unit."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    package = list(path.relative_to(ROOT).parent.parts)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    outside_unit = path.relative_to(ROOT).parts[:2] != ("tests", "unit")
    return sorted(name for name in names if name.split(".")[0] == "tests" and (
        any(part.startswith("test_") for part in name.split("."))
        or (outside_unit and (name == "tests.unit" or name.startswith("tests.unit.")))))


def test_test_modules_share_helpers_only_through_tests_support() -> None:
    """No module under tests/ imports a ``test_*`` module, and tests/integration and tests/support
    import nothing from tests/unit: what test modules share lives in tests/support/."""
    integration, unit = ROOT / "tests/integration/test_x.py", ROOT / "tests/unit/tasks/test_x.py"
    assert _test_imports(integration, "from tests.unit.tasks.sweep_data import records") == [
        "tests.unit.tasks.sweep_data", "tests.unit.tasks.sweep_data.records"]
    assert _test_imports(unit, "from tests.unit.tasks.sweep_data import records") == []
    assert _test_imports(unit, "from tests.unit.tasks import test_loadgen_sse") == [
        "tests.unit.tasks.test_loadgen_sse"]
    assert _test_imports(unit, "from .test_loadgen_sse import CHAT_STREAM") == [
        "tests.unit.tasks.test_loadgen_sse", "tests.unit.tasks.test_loadgen_sse.CHAT_STREAM"]
    assert _test_imports(unit, "import tests.unit.specfleet.test_variance") == ["tests.unit.specfleet.test_variance"]
    modules = sorted((ROOT / "tests").rglob("*.py"))
    assert len(modules) > 100
    offenders = {str(p.relative_to(ROOT)): found for p in modules if (found := _test_imports(p))}
    assert offenders == {}


def test_unit_tests_mirror_the_packages() -> None:
    """tests/unit/specfleet/X/ and tests/unit/tasks/X/ test the package specfleet/X/ or tasks/X/; no test
    module sits loose beside them, so where a package's tests are is never a question."""
    for top in ("specfleet", "tasks"):
        tests = ROOT / "tests" / "unit" / top
        assert sorted(p.name for p in tests.glob("test_*.py")) == []
        folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name not in {"__pycache__", "data"}}
        assert len(folders) >= 8
        assert {name for name in folders if not (ROOT / top / name / "__init__.py").is_file()} == set(), top


FLOORS = {
    "specfleet": (("contract",), ("results",), ("measure",), ("stats", "economics"), ("gates", "perfmodel"),
                  ("verdicts",), ("planning", "production"), ("report",)),
    "tasks": (("store", "loadgen", "fixtures"), ("engine",), ("plan",), ("arm",), ("cluster", "monitor", "tracking"),
              ("analysis", "report", "canary")),
}
"""Each package's folders, lowest floor first: a folder imports only from the floors below its own;
the modules at the package's root (``specfleet/errors.py``, ``tasks/progress.py``) sit under them all."""

PACKAGES = {"specfleet": "specfleet", "tasks": "specfleet_tasks"}
"""The name each folder is imported by."""

def _floor(top: str, name: str) -> int:
    """The floor of ``top.name``: 0 for a root module, else 1 + its floor's index."""
    return next((i + 1 for i, folders in enumerate(FLOORS[top]) for folder in folders if folder == name), 0)


def _imports_up(path: Path, source: str | None = None) -> list[str]:
    """The imports of ``path`` (a module under specfleet/ or tasks/) that reach a folder of its own
    package on its own floor or above, other than its own folder."""
    top, *inner = path.relative_to(ROOT).parts
    own = inner[0] if len(inner) > 1 else None
    here = _floor(top, own) if own is not None else 0
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
              and node.level == 0}
    up = []
    for name in sorted(names):
        parts = name.split(".")
        if parts[0] != PACKAGES[top] or len(parts) < 2 or parts[1] == own or not (ROOT / top / parts[1]).is_dir():
            continue
        if _floor(top, parts[1]) >= here:
            up.append(name)
    return up


def test_imports_run_down_the_floors() -> None:
    """No module of specfleet/ or tasks/ imports from a folder on its own floor or a higher one
    (``FLOORS``), and every folder has a floor."""
    module = ROOT / "specfleet/results/records.py"
    assert _imports_up(module, "from specfleet.verdicts.cell import Decision") == ["specfleet.verdicts.cell"]
    assert _imports_up(module, "import specfleet.report.sweep_report") == ["specfleet.report.sweep_report"]
    assert _imports_up(module, "from specfleet.contract import SweepConfig\nfrom specfleet.results import cell") == []
    t = "specfleet_tasks"
    assert _imports_up(ROOT / "tasks/engine/features.py", f"from {t}.plan.versions import stack_versions") == [
        f"{t}.plan.versions"]
    assert _imports_up(ROOT / "tasks/store/sweep.py", f"from {t}.loadgen.http import x") == [f"{t}.loadgen.http"]
    assert _imports_up(ROOT / "tasks/progress.py", f"from {t}.store.results import x") == [f"{t}.store.results"]
    assert _imports_up(ROOT / "tasks/report/html.py", f"from {t}.progress import x\nfrom {t}.store import y") == []
    for top, floors in FLOORS.items():
        folders = {p.name for p in (ROOT / top).iterdir() if (p / "__init__.py").is_file()}
        assert folders == {name for floor in floors for name in floor}, top
        modules = sorted((ROOT / top).rglob("*.py"))
        assert len(modules) > 40
        offenders = {str(p.relative_to(ROOT)): found for p in modules if (found := _imports_up(p))}
        assert offenders == {}, top


GENERIC = {"tasks", "flows", "cli"}
"""The repository's folders, installed as ``specfleet_tasks``, ``specfleet_flows`` and ``specfleet_cli``."""


def _generic_imports(source: str) -> list[str]:
    tree = ast.parse(source)
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
              and not node.level]
    return sorted(name for name in names if name.split(".")[0] in GENERIC)


def test_code_imports_the_shell_by_its_installed_names() -> None:
    """Nothing imports ``tasks``, ``flows`` or ``cli``: under those names the code would run from the
    repository alone, and twice beside the installed ``specfleet_*`` modules."""
    assert _generic_imports("from tasks.engine import server\nimport flows.sweep") == ["flows.sweep", "tasks.engine"]
    assert _generic_imports("from specfleet_tasks.engine import server\nfrom . import tasks") == []
    for top in GENERIC:
        link = ROOT / f"specfleet_{top}"
        assert link.is_symlink() and link.resolve() == (ROOT / top).resolve(), link
    modules = [p for folder in ("specfleet", *sorted(GENERIC), "tests", "benchmarks", "infra")
               for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(modules) > 300
    offenders = {str(p.relative_to(ROOT)): found for p in modules
                 if (found := _generic_imports(p.read_text(encoding="utf-8")))}
    assert offenders == {}
