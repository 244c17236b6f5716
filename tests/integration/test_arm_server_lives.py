"""A speculative arm over several server lives (``analysis.arm_server_lives``), end to end: the
sweep starts the arm's servers one after another, each opening with the previous life's first
own cell measured again, stores every cell with the server life that measured it, and decides
each of the arm's cells once, its check cell pooled with the cell it repeats.

What is checked is the orchestration of server lives, so the arms run on the stand-in engine
(``tasks/engine/standin.py``); the sweep reports to the session's Prefect server (the embedded one
that ``make demo`` starts costs each CLI process about 10 s, and its path is the sweep's whose
servers never start, in ``test_sweep_faults.py``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.services import PrefectServer
from tests.integration.sweep_configs import BASELINE_ARM, NGRAM_ARM, standin_env, tiny_sweep_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LIVES = 2


def test_an_arm_on_two_server_lives_measures_each_cell_once_plus_a_check_and_decides_each_once(
        tmp_path: Path, fixture_models: dict[str, str], prefect_api: PrefectServer) -> None:
    config = tiny_sweep_config(tmp_path / "lives.yaml", "it-arm-lives", [BASELINE_ARM, NGRAM_ARM],
                               concurrency=[1, 2], analysis={"bootstrap_resamples": 200, "arm_server_lives": LIVES})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_", "RAY_"))}
    env |= {k: v for k, v in prefect_api.env.items() if k.startswith("PREFECT_")} | standin_env(step_ms=20.0)
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, "-c", "from specfleet_cli.main import entry; entry()", "sweep",
                           str(config), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                           "--results-dir", str(results), "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (sweep_dir,) = results.glob("it-arm-lives-*")
    cells = [json.loads(p.read_text()) for p in (sweep_dir / "cells").glob("*.json")]
    ngram = [c for c in cells if c["identity"]["arm"] == "ngram-k3"]
    assert len(ngram) == 2 + LIVES  # c1 and c2 once, and one check per life
    lives = {c["server"] for c in ngram}
    assert len(lives) == LIVES and all(c["server"] for c in ngram)
    for check in (c for c in ngram if c["identity"]["replica_check"]):
        (twin,) = [c for c in ngram if not c["identity"]["replica_check"]
                   and c["identity"]["load_value"] == check["identity"]["load_value"]]
        assert twin["server"] != check["server"]  # the same cell on the other life
    assert {p.name for p in (sweep_dir / "logs").glob("ngram-k3*.log")} == {"ngram-k3.log", "ngram-k3-r1.log"}
    report = json.loads((sweep_dir / "summary.json").read_text())
    decided = sorted((d["slice"]["arm"], d["slice"]["load_value"]) for d in report["decisions"])
    assert decided == [("ngram-k3", 1.0), ("ngram-k3", 2.0)]
