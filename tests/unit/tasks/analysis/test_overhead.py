"""The sweep-overhead rows: measured phases add up, and an arm whose Ray task died shows no
figures (n/a), never zeros."""

from pathlib import Path

import pytest

from specfleet.results import ArmTiming
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.cluster.stage import ArmReport
from specfleet_tasks.plan.sweep_plan import plan_sweep
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.report.tables import OVERHEAD_COLUMNS
from tests.support.sweep_data import write_config


def test_overhead_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path)
    plan = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results")
    timed = ArmTiming(startup_s=40.0, probe_s=2.0, warmup_s=3.0, measured_s=10.0, wall_s=60.0, server_starts=1)
    reports = [ArmReport(arm="baseline", phase="main", cells=[], error=None, timing=timed),
               ArmReport(arm="draft-k2", phase="main", cells=[], error="Ray task failed: node died", timing=None)]
    summary = aggregate(plan, reports)
    measured, lost = summary.arms
    assert measured.timing is not None and measured.timing.idle_s == pytest.approx(5.0)
    assert measured.measured_fraction == pytest.approx(10 / 60)
    assert lost.timing is None and lost.measured_fraction is None
    rendered = {name: render(lost) for name, render in OVERHEAD_COLUMNS}
    assert rendered["start s"] == rendered["wall s"] == rendered["measured"] == "n/a"
    assert "| baseline | main | 0 | 40.0 | 2.0 | 3.0 | 10.0 | 5.0 | 60.0 | 17% | 0 |" in summary_markdown(summary)
