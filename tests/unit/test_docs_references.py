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
