"""Every ``docs/*.md`` the code cites exists, with the section it names (issue 14: every
docstring reference resolves)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"""(docs/[\w./-]+\.md)(?:, ["']([^"']+)["'])?""")
SOURCES = sorted(path for package in ("specfleet", "tasks", "flows", "cli") for path in (ROOT / package).rglob("*.py"))
CITATIONS = sorted({
    (str(path.relative_to(ROOT)), doc, section)
    for path in SOURCES for doc, section in CITATION.findall(path.read_text(encoding="utf-8"))
})


def _headings(doc: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_the_code_cites_docs() -> None:
    assert len(CITATIONS) >= 6  # the pattern still finds the citations it checks


@pytest.mark.parametrize(("source", "doc", "section"), CITATIONS)
def test_cited_doc_and_section_exist(source: str, doc: str, section: str) -> None:
    path = ROOT / doc
    assert path.is_file(), f"{source} cites {doc}, which is not in the repository"
    assert not section or section in _headings(path), f"{source} cites {doc}, {section!r}: no such section"


# The README and docs/ (issue 14: the README is under 150 lines and every path it names exists).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
TOP_FOLDERS = ("specfleet", "tasks", "flows", "cli", "configs", "infra", "benchmarks", "tests", "docs", ".ci")
TOP_FILES = ("Makefile", "Dockerfile", "Dockerfile.cpu", "pyproject.toml", "README.md")
# A whole backticked span that is a repository path: a top-level folder and `/`, then segments of
# letters, digits, `.`, `_` and `-` only (so no URL, glob, placeholder or command line matches),
# optionally a test after `::`. Paths under results/ or ~/ are runtime paths, not the repository's.
_FOLDERS = "|".join(re.escape(folder) for folder in TOP_FOLDERS)
_FILES = "|".join(re.escape(name) for name in TOP_FILES)
REPO_PATH = re.compile(rf"`((?:{_FOLDERS})/(?:[\w.-]+(?:/[\w.-]+)*/?)?|{_FILES})(?:::(\w+))?`")
# A test module named without its folder, as the docs do after naming it once: `test_x.py::test_y`.
TEST_MODULE = re.compile(r"`(test_\w+\.py)(?:::(\w+))?`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)(?:, \"([^\"]+)\")?")
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|home|Users|root|tmp)/")


def _named(pattern: re.Pattern[str]) -> list[tuple[str, str, str]]:
    return sorted({
        (doc.name, match.group(1), match.group(2) or "")
        for doc in DOCS for match in pattern.finditer(doc.read_text(encoding="utf-8"))
    })


REPO_PATHS = _named(REPO_PATH)
TEST_MODULES = _named(TEST_MODULE)
LINKS = _named(LINK)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _defines_test(module: Path, test: str) -> bool:
    return re.search(rf"^(?:async )?def {re.escape(test)}\(", module.read_text(encoding="utf-8"), re.M) is not None


def test_readme_is_under_150_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move reference material into docs/"


def test_the_patterns_find_what_the_docs_name() -> None:
    # The checks below can fail only if the patterns still find the paths, tests and links.
    assert len(DOCS) >= 8
    assert len(REPO_PATHS) >= 100
    assert ("README.md", "tasks/engine/server.py", "") in REPO_PATHS
    assert len(TEST_MODULES) >= 10
    assert len({target for _, target, _ in LINKS}) >= 8
    for not_a_path in ("`s3://BUCKET/sweeps`", "`results/SWEEP_ID/equivalence/ARM.json`", "`tests/*.py`",
                       "`kubectl apply -f infra/ray/raycluster.yaml`", "`tasks/<stage>/`", "`specfleet`"):
        assert not REPO_PATH.search(not_a_path)


@pytest.mark.parametrize(("doc", "path", "test"), REPO_PATHS)
def test_every_path_the_docs_name_exists(doc: str, path: str, test: str) -> None:
    target = ROOT / path
    assert target.exists(), f"{doc} names `{path}`, which is not in the repository"
    assert not test or _defines_test(target, test), f"{doc} names {path}::{test}, which it does not define"


@pytest.mark.parametrize(("doc", "module", "test"), TEST_MODULES)
def test_every_test_module_the_docs_name_exists(doc: str, module: str, test: str) -> None:
    found = sorted((ROOT / "tests").rglob(module))
    assert found, f"{doc} names `{module}`, which is no test module"
    assert not test or any(_defines_test(path, test) for path in found), f"{doc} names {module}::{test}: no such test"


@pytest.mark.parametrize(("doc", "target", "section"), LINKS)
def test_every_link_between_the_docs_resolves(doc: str, target: str, section: str) -> None:
    if "://" in target or target.startswith("mailto:"):
        return
    source = next(path for path in DOCS if path.name == doc)
    file_part, _, anchor = target.partition("#")
    linked = (source.parent / file_part).resolve() if file_part else source
    assert linked.exists(), f"{doc} links to {target}, which is not in the repository"
    if anchor or section:
        headings = _headings(linked)
        assert not anchor or anchor in {_slug(h) for h in headings}, f"{doc} links to {target}: no such section"
        assert not section or section in headings, f"{doc} cites {target}, {section!r}: no such section"


def test_the_docs_name_no_machine_specific_path() -> None:
    found = [(doc.name, match.group(0)) for doc in DOCS for match in MACHINE_PATH.finditer(doc.read_text())]
    assert found == []


# The README and docs/ are a reference in the present tense: results live in benchmarks/results/ (rendered into
# docs/results.md), so no doc names a sweep id or an issue, and dates are kept to a handful.
SWEEP_ID = re.compile(r"\b[\w.-]+-\d{8}T\d{6}Z-[0-9a-f]{4}\b")
ISSUE = re.compile(r"\bissue \d+", re.IGNORECASE)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
MAX_DATES = 3
README_MAX_CHARS, README_MAX_LINE = 12_000, 400


def test_the_docs_name_no_sweep_id_issue_or_more_than_three_dates() -> None:
    texts = {doc.name: doc.read_text(encoding="utf-8") for doc in DOCS}
    assert SWEEP_ID.search("see `perfmodel-dense-wide-20261206T214928Z-e645`") and ISSUE.search("Issue 32:")
    assert {name: SWEEP_ID.findall(text) for name, text in texts.items() if SWEEP_ID.search(text)} == {}
    assert {name: ISSUE.findall(text) for name, text in texts.items() if ISSUE.search(text)} == {}
    dates = [(name, date) for name, text in texts.items() for date in DATE.findall(text)]
    assert len(dates) <= MAX_DATES, dates


def test_the_readme_is_short_with_short_lines() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= README_MAX_CHARS
    assert [line[:60] for line in readme.splitlines() if len(line) > README_MAX_LINE] == []
