"""The fixture models load in vLLM CPU, and speculation on them is accepted and lossless under
greedy, on every bundled prompt class (chat through /v1/chat/completions), served the way a
sweep serves them: the session's idle baseline, draft_model k=3 and ngram k=3 servers.

``specfleet measure`` then measures one of those servers end to end, as a user measures a
replica started by hand."""

import asyncio
import json
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from specfleet.contract.prompts import PromptItem
from specfleet.measure.telemetry import parse_spec_decode_counters, spec_decode_delta
from specfleet_cli.main import app
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.arm.probes import greedy_probe
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.fixtures.build import build_fixtures
from specfleet_tasks.loadgen import ServerEndpoint
from specfleet_tasks.plan.prompt_sets import bundled_names, resolve_prompts
from tests.integration.idle_servers import IdleServers

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow]

PROMPTS_PER_CLASS = 2
MAX_TOKENS = 48


def test_second_build_reuses_the_cache(fixture_models: dict[str, str]) -> None:
    started = time.monotonic()
    again = build_fixtures()
    assert again.reused
    assert str(again.target) == fixture_models["fixture:target"]
    assert time.monotonic() - started < 30


def _bundled_prompts() -> list[PromptItem]:
    prompts = [item for name in bundled_names() for item in resolve_prompts(name)[:PROMPTS_PER_CLASS]]
    assert any(p.messages for p in prompts) and any(p.prompt for p in prompts)
    return prompts


def _greedy_with_counters(server: ArmServer) -> tuple[dict[str, list[int]], dict[str, float] | None]:
    """Greedy token ids per prompt id, and how far the server's spec-decode counters moved."""
    before = parse_spec_decode_counters(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    endpoint = ServerEndpoint(server.base_url, SERVED_MODEL_NAME)
    tokens = asyncio.run(greedy_probe(endpoint, _bundled_prompts(), MAX_TOKENS))
    after = parse_spec_decode_counters(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    if before is None or after is None:
        return tokens, None
    delta = spec_decode_delta(before, after)
    return tokens, {"drafted": delta.num_draft_tokens, "accepted": delta.num_accepted_tokens}


def test_speculation_is_accepted_and_greedy_outputs_match(idle_server: IdleServers) -> None:
    idle_server.start("baseline", "draft", "ngram")
    baseline, counters = _greedy_with_counters(idle_server("baseline"))
    assert counters is None  # the baseline exposes no spec-decode counters
    assert all(len(tokens) == MAX_TOKENS for tokens in baseline.values())
    for kind in ("draft", "ngram"):
        tokens, counters = _greedy_with_counters(idle_server(kind))
        assert counters is not None, kind
        print(f"{kind}: accepted {counters['accepted']:g}/{counters['drafted']:g} draft tokens", file=sys.stderr)
        assert counters["drafted"] > 0 and counters["accepted"] > 0, kind
        assert tokens == baseline, f"{kind}: greedy output differs from baseline"


def test_measure_reports_acceptance_of_a_running_speculative_server(idle_server: IdleServers) -> None:
    """``specfleet measure --json`` against the ngram server: every request completes with the
    token count asked for, and acceptance comes from the server's own counters."""
    server = idle_server("ngram")
    result = CliRunner().invoke(app, [
        "measure", "--endpoint", server.base_url, "--model", SERVED_MODEL_NAME, "--prompts", "code",
        "--concurrency", "2", "--requests", "6", "--warmup", "1", "--max-tokens", "24", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["completed"] == 6 and figures["failed"] == 0
    assert figures["tpot_ms"]["p50"] > 0 and figures["output_tokens_per_s"] > 0
    assert 0 < figures["acceptance_rate"] <= 1 and 1 < figures["mean_acceptance_length"] <= 4
    assert len(figures["acceptance_per_position"]) == 3
    assert figures["kv_cache"]["kv_cache_size_tokens"] > 0
