"""The sweep's report: one object, each decision held once, read back from any format."""

import json
from pathlib import Path

import pytest

from specfleet.errors import InputError
from specfleet.report.sweep_report import REPORT_FORMAT, SweepReport, read_report
from specfleet.verdicts.table import DecisionRow
from specfleet_tasks.store.config import load_sweep_config

FORMAT_1 = Path(__file__).parents[2] / "tasks" / "store" / "data" / "demo-ce4142f"
"""A sweep folder as ce4142f wrote it: its ``summary.json`` is of format 1 (no ``format`` key)."""


def test_a_format_1_summary_reads_back_as_todays_report() -> None:
    """Format 1 stored each decision three times (decisions, cost_table, negative_cells) and no class
    verdicts: it reads back with its rows as views of its decisions, equal to the rows it stored, and
    its class verdicts made from them; written again, each decision is there once."""
    text = (FORMAT_1 / "summary.json").read_text()
    old = json.loads(text)
    assert "format" not in old and "class_verdicts" not in old and old["negative_cells"]
    config = load_sweep_config(FORMAT_1 / "demo-cpu.yaml")
    report = read_report(text, config)
    assert report.format == 1 and report.decisions and report.recomputed is None
    assert report.cost_table == [DecisionRow.model_validate(row) for row in old["cost_table"]]
    assert report.negative_cells == [DecisionRow.model_validate(row) for row in old["negative_cells"]]
    assert [v.label for v in report.class_verdicts] == [pc.name for pc in config.prompt_classes]
    written = report.model_dump(mode="json")
    assert not {"cost_table", "negative_cells", "recomputed"} & set(written)
    assert written["format"] == 1 and written["class_verdicts"]
    assert read_report(json.dumps(written), config) == report


def test_the_negative_cells_are_the_rejects_of_the_cost_table() -> None:
    """An inconclusive cell is no negative result: the view keeps the rejected rows alone."""
    old = json.loads((FORMAT_1 / "summary.json").read_text())
    report = read_report(json.dumps(old), load_sweep_config(FORMAT_1 / "demo-cpu.yaml"))
    undecided = report.decisions[0].model_copy(update={"verdict": "inconclusive"})
    mixed = report.model_copy(update={"decisions": [undecided, *report.decisions[1:]]})
    assert len(mixed.cost_table) == len(report.cost_table) and mixed.cost_table[0].verdict == "inconclusive"
    assert mixed.negative_cells == report.negative_cells[1:]


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": 99}', rf"summary.json: format: 99 was written by a newer specfleet; this one reads formats 1 to "
                       rf"{REPORT_FORMAT}"),
    ("[1, 2]", "summary.json: not a sweep report"),
    ("{", "summary.json: not JSON"),
])
def test_a_report_it_cannot_read_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_report(text, load_sweep_config(FORMAT_1 / "demo-cpu.yaml"))


def test_the_report_holds_each_decision_once() -> None:
    assert {"decisions", "class_verdicts", "format"} <= set(SweepReport.model_fields)
    assert not {"cost_table", "negative_cells"} & set(SweepReport.model_fields)
