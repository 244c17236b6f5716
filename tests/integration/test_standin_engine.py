"""The stand-in engine (``tasks/engine/standin.py``) started through the engine seam as an arm's
server is: it answers the surface specfleet reads, greedy text does not depend on the arm, its
counters agree with its per-request summaries, and what it records is labelled, never vLLM."""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specfleet.contract.prompts import PromptItem
from specfleet.measure.telemetry import parse_kv_cache_info, parse_spec_decode_counters
from specfleet_tasks.arm.probes import greedy_probe
from specfleet_tasks.canary.ages import read_age
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.engines import STANDIN_DISTRIBUTION, arm_engine
from specfleet_tasks.engine.features import engine_accepts_per_request_spec_metrics
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import ArmServer, ArmStartError
from specfleet_tasks.loadgen import run_async
from tests.integration.sweep_configs import standin_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MODEL = "specfleet-target"
SPEC = ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3}),
        "--per-request-spec-decode-metrics", "summary"]


@pytest.fixture(autouse=True)
def standin(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in standin_env(step_ms=2, acceptance=0.6).items():
        monkeypatch.setenv(name, value)


def _server(tmp_path: Path, *extra: str) -> ArmServer:
    port = free_port()
    args = ["--model", "fixture", "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), *extra]
    return ArmServer(args, {}, "127.0.0.1", port, tmp_path / f"{port}.log", 60, engine=arm_engine())


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ArmServer, ArmServer]]:
    with _server(tmp_path) as baseline, _server(tmp_path, *SPEC) as ngram:
        yield baseline, ngram


def test_it_is_selected_by_the_environment_and_labelled(servers: tuple[ArmServer, ArmServer]) -> None:
    assert engine_distribution()[0] == STANDIN_DISTRIBUTION
    assert all(s.startup_s is not None and s.startup_s < 30 for s in servers)  # vLLM's take 27-48 s here
    with servers[0].endpoint(MODEL).client(5) as client:
        assert client.get("/v1/models").json()["data"][0]["owned_by"] == STANDIN_DISTRIBUTION


def test_it_reports_its_start_as_vllm_does(servers: tuple[ArmServer, ArmServer]) -> None:
    """``process_start_time_seconds`` and a Date header: each replica's age on its own clock."""
    ages = [read_age("baseline", s.endpoint(MODEL)) for s in servers]
    assert all(a.clock == "replica" and a.age_s is not None and 0 <= a.age_s < 60 for a in ages), ages


def test_greedy_text_is_the_same_on_every_arm(servers: tuple[ArmServer, ArmServer]) -> None:
    prompts = [PromptItem(id="a", prompt="def f(x):"), PromptItem(id="b", messages=[{"role": "user", "content": "hi"}])]
    baseline, ngram = (run_async(greedy_probe(s.endpoint(MODEL), prompts, 12)) for s in servers)
    assert baseline == ngram and all(len(ids) == 12 for ids in baseline.values())


def test_counters_agree_with_the_per_request_summaries(servers: tuple[ArmServer, ArmServer]) -> None:
    baseline, ngram = servers
    with baseline.endpoint(MODEL).client(5) as client:
        metrics = client.get("/metrics").text
        assert parse_spec_decode_counters(metrics) is None and parse_kv_cache_info(metrics) is not None
    summaries = []
    with ngram.endpoint(MODEL).client(30) as client:
        assert client.post("/reset_prefix_cache").status_code == 200
        for prompt in ("one", "two", "three"):
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            with client.stream("POST", "/v1/completions", json=body) as response:
                events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
            assert events[-1]["usage"]["completion_tokens"] == 40
            summaries.append(events[-1]["metrics"]["speculative_decoding"])
        counters = parse_spec_decode_counters(client.get("/metrics").text)
    assert counters is not None
    assert counters.drafts == sum(s["num_spec_steps"] for s in summaries)
    assert counters.accepted_tokens == sum(s["num_accepted_draft_tokens"] for s in summaries)
    assert 0 < counters.accepted_tokens < counters.draft_tokens == 3 * counters.drafts


def test_the_flag_probe_and_an_unknown_flag_behave_as_vllm(tmp_path: Path) -> None:
    assert engine_accepts_per_request_spec_metrics(tmp_path)
    with pytest.raises(ArmStartError, match="stand-in engine .* exited with code 2") as failed:
        _server(tmp_path, "--no-such-flag").start()
    assert "unrecognized arguments: --no-such-flag" in str(failed.value)


def test_an_api_key_is_required_where_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    args = ["--model", "fixture", "--served-model-name", MODEL, "--port", str(port)]
    with ArmServer(args, {}, "127.0.0.1", port, tmp_path / "key.log", 60, api_key="k-1", engine=arm_engine()) as s:
        assert httpx.get(f"{s.base_url}/v1/models").status_code == 401
        with s.endpoint(MODEL).client(5) as client:
            assert client.get("/v1/models").status_code == 200
