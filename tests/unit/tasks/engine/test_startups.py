"""Server start-ups recorded on this machine (``specfleet_tasks.engine.startups``): the prior's start-up before
any sweep of a config exists, read per engine version and models, torn lines skipped."""

import json
from pathlib import Path

import pytest

from specfleet.contract import arm_plans
from specfleet.perfmodel.prior import CPU_DEFAULTS
from specfleet.planning.timing import PriorTiming
from specfleet_tasks.engine import startups
from specfleet_tasks.engine.engines import ModuleEngine
from specfleet_tasks.engine.startups import (
    KEEP,
    _import_path,
    _path,
    engine_import_s,
    record_startup,
    recorded_startups,
    startup_key,
    startup_note,
)
from specfleet_tasks.plan.estimate import prior_timing
from specfleet_tasks.store.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[4]
DEMO = ROOT / "configs" / "demo-cpu.yaml"


def test_start_ups_are_read_back_per_models_newest_first_kept(tmp_path: Path) -> None:
    for seconds in range(1, KEEP + 6):
        record_startup(("fixture:target",), float(seconds), tmp_path)
    record_startup(("fixture:target", "fixture:draft"), 99.0, tmp_path)
    with _path(tmp_path).open("a", encoding="utf-8") as out:
        out.write('{"models": ["fixture:target"], "startup_s": \n')  # a torn line
    assert recorded_startups(("fixture:target",), tmp_path) == tuple(float(s) for s in range(6, KEEP + 6))
    assert recorded_startups(("fixture:target", "fixture:draft"), tmp_path) == (99.0,)
    assert recorded_startups(("other",), tmp_path) == ()
    assert recorded_startups(("fixture:target",), tmp_path / "nowhere") == ()
    record_startup(("fixture:target",), 500.0, tmp_path)  # a start recorded later in the same process
    assert 500.0 not in recorded_startups(("fixture:target",), tmp_path)  # the plan's snapshot holds


def test_the_prior_counts_the_recorded_median_and_the_slowest_for_a_budget(tmp_path: Path) -> None:
    config = load_sweep_config(DEMO)
    base, draft = arm_plans(config)[:2]
    assert startup_key(config, base)[0] == "fixture:target-wide"
    assert startup_key(config, base)[1].startswith("settings:")
    assert startup_key(config, draft)[:2] == ("fixture:target-wide", "fixture:draft")
    eager = config.model_copy(update={"engine": config.engine.model_copy(update={"extra_args": ["--enforce-eager"]})})
    assert startup_key(eager, base) != startup_key(config, base)  # another start-up, recorded apart
    secret = config.model_copy(update={"engine": config.engine.model_copy(update={"env": {"HF_TOKEN": "hf_s3cr3t"}})})
    assert "hf_s3cr3t" not in "".join(startup_key(secret, base))
    default = prior_timing(config, DEMO.parent)
    timing = PriorTiming(target=default.target, drafts=default.drafts, roofline=default.roofline,
                         prompt_tokens_by_class=default.prompt_tokens_by_class,
                         recorded_startups_s={base.arm: [20.0, 24.0, 40.0]})
    assert timing.startup_s(base) == 24.0 and timing.startup_high_s(base) == 40.0
    assert timing.startup_s(draft) == timing.startup_high_s(draft) > 0  # nothing recorded: the stated default
    note = startup_note({base.arm: [20.0, 24.0, 40.0], draft.arm: []})
    assert note is not None and "recorded on this machine" in note and "(3 per arm, 24 s)" in note
    assert startup_note({}) is None


def test_with_nothing_recorded_the_prior_counts_the_hosts_import_time_and_a_budget_a_first_start() -> None:
    config = load_sweep_config(DEMO)
    base, draft = arm_plans(config)[:2]
    default = prior_timing(config, DEMO.parent)
    asked: list[int] = []

    def import_s() -> float:
        asked.append(1)
        return 9.5

    timing = PriorTiming(target=default.target, drafts=default.drafts, roofline=default.roofline,
                         prompt_tokens_by_class=default.prompt_tokens_by_class,
                         recorded_startups_s={base.arm: [20.0, 24.0, 40.0]}, engine_import=import_s)
    assert timing.startup_s(base) == 24.0 and timing.startup_estimate_note() is None and not asked
    estimate = timing.startup_s(draft)
    assert CPU_DEFAULTS.startup_per_import is not None
    assert estimate == pytest.approx(CPU_DEFAULTS.startup_per_import * 9.5, abs=1.0)  # plus the fixtures' load
    assert timing.startup_high_s(draft) == pytest.approx(CPU_DEFAULTS.first_start_ratio * estimate)
    note = timing.startup_estimate_note()
    assert note is not None and "9.5 s" in note and len(asked) == 1  # timed once


def test_the_import_is_timed_once_per_engine_version_and_a_failed_one_is_not_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startups, "arm_engine", lambda: ModuleEngine("specfleet_no_such_module", "no server"))
    assert engine_import_s(tmp_path) is None and not _import_path(tmp_path).exists()
    engine_import_s.cache_clear()
    monkeypatch.setattr(startups, "arm_engine", lambda: ModuleEngine("json", "json"))
    measured = engine_import_s(tmp_path)
    assert measured is not None and measured > 0
    assert json.loads(_import_path(tmp_path).read_text())["module"] == "json"
    _import_path(tmp_path).write_text(json.dumps({"import_s": 123.0}))
    engine_import_s.cache_clear()
    assert engine_import_s(tmp_path) == 123.0  # read back, not timed again
    engine_import_s.cache_clear()
