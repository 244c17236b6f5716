"""Every text of a sweep's report renders the one ``SweepReport`` in the one section order
(``specfleet_tasks.report.sections``): the terminal, ``summary.md``, ``report.md`` and the HTML report."""

import html
import re

import pytest

from specfleet_cli.render import print_sweep_summary
from specfleet_tasks.report.content import build_content
from specfleet_tasks.report.html import render_html
from specfleet_tasks.report.markdown import BODIES_MD, render_markdown
from specfleet_tasks.report.sections import SECTIONS, report_sections
from specfleet_tasks.report.summary_md import BODIES, summary_markdown
from specfleet_tasks.report.terminal import LINES
from specfleet_tasks.store.sweep import StoredSweep
from tests.support.adopted_sweep import AdoptedSweep, adopted_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> AdoptedSweep:
    return adopted_sweep(tmp_path_factory.mktemp("sections"))


def _headers(text: str, titles: set[str], prefix: str) -> list[str]:
    """The section titles ``text`` shows as headers (lines ``prefix`` + title), in its order."""
    return [line.removeprefix(prefix) for line in text.splitlines() if line.removeprefix(prefix) in titles
            and line.startswith(prefix)]


def test_every_output_renders_every_section() -> None:
    assert set(LINES) == set(BODIES) == set(BODIES_MD) == set(SECTIONS)


def test_terminal_summary_md_and_report_md_show_the_same_sections_in_the_same_order(
        sweep: AdoptedSweep, capsys: pytest.CaptureFixture[str]) -> None:
    """One report, stored by the aggregate step, rendered three ways: the same section titles in the
    same order in each, and every class verdict (its verdict and reason) in each; the HTML report's
    sections of the report keep that order too, before its figures."""
    report = sweep.summary
    stored = StoredSweep(sweep.plan.store.dir)
    assert stored.report == report and report.class_verdicts
    print_sweep_summary(report, "mlflow ui")
    terminal = capsys.readouterr().out
    content = build_content(stored, 0.05, with_predicted=False)
    texts = {"terminal": terminal, "summary.md": summary_markdown(report),
             "report.md": render_markdown(content, "report.html")}
    sections = [s.title for s in report_sections(report)]
    assert len(sections) >= 12 and {"Verdict per prompt class", "Notes"} <= set(sections)
    titles = set(sections)
    assert _headers(texts["terminal"], titles, "") == sections
    assert _headers(texts["summary.md"], titles, "## ") == sections
    assert _headers(texts["report.md"], titles, "## ") == sections
    for name, text in texts.items():
        for v in report.class_verdicts:
            assert v.label in text and v.verdict in text and v.reason.replace("|", "/") in text, (name, v.label)
    page = html.unescape(render_html(content))
    shown = [h for h in re.findall(r"<h2>(.*?)</h2>", page) if h in titles]
    assert len(shown) >= 5 and shown == [title for title in sections if title in shown]
    assert page.index(shown[-1]) < page.index("Speedup against load")
    assert all(v.reason in page for v in report.class_verdicts)


def test_a_section_out_of_order_is_caught(sweep: AdoptedSweep) -> None:
    """The check above fails on a text whose sections run in another order."""
    report = sweep.summary
    sections = [s.title for s in report_sections(report)]
    text = summary_markdown(report)
    first, second = (f"## {title}\n" for title in sections[:2])
    swapped = text.replace(first, "@@").replace(second, first).replace("@@", second)
    assert _headers(swapped, set(sections), "## ") != sections
