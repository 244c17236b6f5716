"""A fixture build's progress in a log (stdout not a terminal): what it says, not when."""

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from tasks.fixtures import build
from tasks.fixtures import progress as build_progress
from tasks.fixtures.train import LrSchedule, ModelShape, TrainSchedule
from tasks.progress import JobProgress, duration, remaining_text

TINY = replace(
    build.Recipe(), per_class=12, vocab_size=400, max_positions=256,
    target=ModelShape(layers=1, hidden=64, intermediate=128), draft=ModelShape(layers=1, hidden=64, intermediate=64),
    plan=TrainSchedule(batch=2, seq_len=32, seed=3, target=LrSchedule(steps=6, lr=1e-3, warmup=2),
                       draft=LrSchedule(steps=3, lr=1e-3, warmup=1)),
)
TIMES = re.compile(r"\((\d+m)?\d+s elapsed, (about (\d+m)?\d+s left|time left not known yet|done)\)$")


def _log() -> tuple[Console, io.StringIO]:
    stream = io.StringIO()
    return Console(file=stream, width=200, highlight=False, soft_wrap=True), stream


def test_a_first_build_announces_itself_then_logs_every_training_step_with_elapsed_and_remaining_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_progress, "LOG_EVERY_S", 0.0)  # a line for every step, so content can be checked
    console, stream = _log()
    assert not console.is_terminal
    with build_progress.BuildDisplay(console) as display:
        paths = build.build_fixtures(tmp_path, progress=display, recipe=TINY)
    lines = stream.getvalue().splitlines()
    first_time = "fixtures: building the fixture models, once per machine: 6 training steps"
    assert lines[0] == f"{first_time} (cached under {tmp_path}/fixtures)"  # no estimate for a recipe not measured
    steps = [line for line in lines if line.startswith("fixtures: training step ")]
    assert [re.findall(r"step (\d+)/6,", line) for line in steps] == [[str(n)] for n in range(1, 7)]
    assert all(TIMES.search(line) for line in steps), steps
    assert "draft KL" not in steps[2] and "draft KL" in steps[3]  # the draft joins for the last 3 steps
    assert steps[0].endswith(" elapsed, time left not known yet)")  # one step gives no pace
    assert all(" left)" in line for line in steps[1:-1]) and steps[-1].endswith(" elapsed, done)")
    assert lines[-1] == f"fixtures: fixtures ready: {paths.target.parent}"
    assert (paths.target / "config.json").is_file() and (paths.draft / "model.safetensors").is_file()

    console, stream = _log()
    with build_progress.BuildDisplay(console) as display:
        again = build.build_fixtures(tmp_path, progress=display, recipe=TINY)
    assert again.reused and stream.getvalue() == ""  # a cached build says nothing


def test_a_log_shows_each_marked_line_and_a_status_line_with_the_remaining_time() -> None:
    console, stream = _log()
    with JobProgress("sweep", 4, "cells", predicted=True, console=console) as job:
        job.update(1, "baseline", 125.0, line="cell 1/4 finished: baseline / code / c1 / greedy / r0")
        job.update(2, "baseline", 0.0)
        status = job.status()
        job.update(4, "baseline (end)", 0.0)
        finished = job.status()
    assert stream.getvalue().startswith("cell 1/4 finished: baseline / code / c1 / greedy / r0 (")
    assert "predicted 2m05s left)" in stream.getvalue()
    assert status.startswith("sweep: baseline, 2/4 cells (") and status.endswith("overrunning its prediction)")
    assert finished.endswith(" elapsed, done)")


def test_durations_and_unknown_remaining_time_read_plainly() -> None:
    assert [duration(s) for s in (0.4, 59.6, 61, 3725)] == ["0s", "1m00s", "1m01s", "1h02m"]
    assert remaining_text(None, predicted=True) == "time left not known yet"
    assert remaining_text(30, predicted=False) == "about 30s left"


def test_a_sweep_the_plan_cannot_predict_shows_no_time_left_and_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from specfleet.errors import InputError
    from tasks.cluster import progress as cell_progress
    from tasks.plan.config import load_sweep_config

    def no_prior(_plan: object) -> None:
        raise InputError("hardware.accelerator 'tpu9': the plan's prior has no roofline for it")

    monkeypatch.setattr(cell_progress, "plan_timing", no_prior)
    config = load_sweep_config(Path(__file__).parents[3] / "configs" / "demo-cpu.yaml")
    plan = SimpleNamespace(work=[], pending_cells=3, config=config)
    with cell_progress.CellProgress(plan) as shown:  # type: ignore[arg-type]
        status = shown.job.status()
    assert "sweep: no predicted time left (hardware.accelerator 'tpu9': the plan's prior" in capsys.readouterr().out
    assert status.endswith("elapsed, time left not known yet)")
