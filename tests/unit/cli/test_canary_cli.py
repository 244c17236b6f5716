"""``specfleet canary`` runs through ``specfleet_flows.canary.run_and_publish`` (the probe flow's function
too): flags reach it, the verdict is one JSON object on stdout, notes go to stderr, and a
``rollback`` exits 4. The replicas, the measurements and MLflow are stubbed here; the real thing
is ``tests/integration/test_canary.py``."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import specfleet_flows.canary
from specfleet.contract import SLOSpec
from specfleet.production.canary import CanaryResult
from specfleet_cli.errors import ExitCode
from specfleet_cli.main import app
from specfleet_flows.canary import CanaryRun, run_and_publish
from specfleet_tasks.canary.context import CanaryLoad, SweepContext, standalone_context
from specfleet_tasks.loadgen import ServerEndpoint
from tests.support.replica_ages import like_ages

runner = CliRunner()


def _result(verdict: str) -> CanaryResult:
    return CanaryResult(verdict=verdict, reason=f"{verdict} because", noise_floor=None, noise_source="none",  # type: ignore[arg-type]
                        sweep_id=None, arm=None, rollback_server_args=["--model", "m"], classes=[],
                        age=like_ages())


@pytest.fixture
def called(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """``run_and_publish`` stubbed: what the CLI passed, and the verdict it hands back (``verdict``)."""
    seen: dict[str, Any] = {"verdict": "rollback"}

    def stub(baseline: str, candidate: str, prompts: Sequence[str], load: CanaryLoad, results_dir: Path,
             **options: Any) -> CanaryRun:
        seen.update(baseline=baseline, candidate=candidate, prompts=list(prompts), load=load,
                    results_dir=results_dir, **options)
        return CanaryRun(_result(seen["verdict"]), tmp_path / "canary-x", ["from setup", "from MLflow"])

    monkeypatch.setattr(specfleet_flows.canary, "run_and_publish", stub)
    return seen


def _canary(*extra: str) -> list[str]:
    return ["canary", "--baseline", "http://b:1", "--candidate", "http://c:2", "--prompts", "code", "--prompts",
            "chat", "--requests", "4", *extra]


def test_a_rollback_exits_4_with_the_verdict_on_stdout_and_the_notes_on_stderr(
        called: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_KEY", "k-123")
    result = runner.invoke(app, _canary("--rate", "2.5", "--api-key-env", "CANARY_KEY", "--tracking-uri", "sqlite:///t.db",
                                        "--insecure", "--json"))
    assert result.exit_code == ExitCode.ROLLBACK == 4, result.output
    printed = json.loads(result.stdout)
    assert (printed["verdict"], printed["rollback_server_args"]) == ("rollback", ["--model", "m"])
    assert result.stderr.splitlines() == ["note: from setup", "note: from MLflow"]
    assert called["load"] == CanaryLoad(None, 2.5, 4, 2, 64, 0.0) and called["prompts"] == ["code", "chat"]
    assert (called["api_key"], called["tracking"], called["insecure"]) == ("k-123", "sqlite:///t.db", True)
    assert (called["baseline_twin"], called["max_age_gap_s"]) == (None, 1800)  # no twin; 30 minutes


def test_a_twin_and_an_age_gap_reach_the_canary_and_a_bad_gap_exits_2(called: dict[str, Any]) -> None:
    called["verdict"] = "hold"
    result = runner.invoke(app, _canary("--concurrency", "1", "--baseline-twin", "http://t:3", "--max-age-gap", "2h"))
    assert result.exit_code == 0, result.output
    assert "ages: baseline up 1 min, candidate up 1 min (covered: --max-age-gap 30m)" in result.stdout
    assert (called["baseline_twin"], called["max_age_gap_s"]) == ("http://t:3", 7200)
    called.clear()
    result = runner.invoke(app, _canary("--concurrency", "1", "--max-age-gap", "soon"))
    assert result.exit_code == 2 and result.stderr.strip() == (
        "error: --max-age-gap: 'soon' is not a duration like 30s, 90m, 7h or 1d")
    assert "load" not in called


@pytest.mark.parametrize("verdict", ["promote", "hold"])
def test_promote_and_hold_exit_0(called: dict[str, Any], verdict: str) -> None:
    called["verdict"] = verdict
    result = runner.invoke(app, _canary("--concurrency", "2"))
    assert result.exit_code == 0, result.output
    kind = " (inconclusive)" if verdict == "hold" else ""  # a hold with nothing blocking it: more could decide it
    assert f"verdict: {verdict}{kind}: {verdict} because" in result.stdout


@pytest.mark.parametrize(("flags", "message"), [
    ((), "error: give exactly one of --concurrency or --rate"),
    (("--concurrency", "1", "--rate", "2"), "error: give exactly one of --concurrency or --rate"),
    (("--rate", "0"), "error: --rate must be positive (got 0.0)"),
])
def test_bad_load_flags_exit_2_before_the_canary_runs(called: dict[str, Any], flags: tuple[str, ...],
                                                      message: str) -> None:
    result = runner.invoke(app, _canary(*flags))
    assert (result.exit_code, result.stderr.strip()) == (2, message)
    assert "load" not in called


def test_the_orchestration_labels_the_load_and_orders_the_notes(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """What the CLI and the probe flow share: setup, measure, publish with the params, the event."""
    logged: dict[str, Mapping[str, str]] = {}
    context = standalone_context(SLOSpec(ttft_ms=1e9, itl_ms=1e9))
    context.notes.append("from setup")

    def setup(baseline: str, candidate: str, *args: object) -> tuple[dict[str, ServerEndpoint], SweepContext]:
        return {"baseline": ServerEndpoint.from_url(baseline, "m"),
                "candidate": ServerEndpoint.from_url(candidate, "m")}, context

    def publish(result: CanaryResult, canary_dir: Path, experiment: str, tracking: str | None,
                params: Mapping[str, str]) -> list[str]:
        logged.update(params=params)
        return ["from MLflow"]

    monkeypatch.setattr(specfleet_flows.canary, "canary_setup", setup)
    monkeypatch.setattr(specfleet_flows.canary, "run_canary",
                        lambda *args: (_result("rollback"), tmp_path / "canary-x"))
    monkeypatch.setattr(specfleet_flows.canary, "publish", publish)
    monkeypatch.setattr(specfleet_flows.canary, "read_ages", lambda replicas: like_ages().ages)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    for load, label in ((CanaryLoad(4, None, 8, 2, 64, 0.0), "c4"), (CanaryLoad(None, 2.5, 8, 2, 64, 0.0), "r2.5/s")):
        run = run_and_publish("http://ops:pw@b:1", "http://c:2", ["code"], load, tmp_path, insecure=True)
        assert logged["params"] == {"baseline": "http://b:1", "candidate": "http://c:2", "prompts": "code",
                                    "requests": "8", "load": label}  # the URLs' credentials never logged
        assert run.notes == ["from setup", "TLS certificates were not verified (--insecure)", "from MLflow",
                             "no PREFECT_API_URL: event specfleet.rollback.recommended not emitted"]
    assert context.notes == ["from setup"]  # the sweep's context is not written to
