"""`specfleet traffic` against a real Prometheus scraping a real vLLM CPU server: a known load
pattern, driven by the project's own closed-loop client, comes back as token-weighted shares.

Concurrency 1 for 60 requests, then 8 for 240, 64 output tokens per request on average: about a
fifth of the tokens at 1 and four fifths at 8, in about as much time at each (the server serves
several times the tokens per second at 8). Between two requests the gauge reads below the
concurrency driven; the config's levels (1 and 8) take a 3 to 8, as they would a production
server's readings. At 4 (levels 1 and 4, a 2 snapping to 1) a loaded CI machine's dips to 2 moved
0.16 of the tokens to level 1; at 8 a reading under 3 needs six of the eight requests between two
of theirs at once. A step counted at the wrong level still moves one step's tokens (0.10 of them
once, with 19 steps on a loaded machine): about 30 steps keep that to 0.07. Requests of one length
would finish together and start again together, so the gauge would dip to 0 at every turn, as no
production server's does: the output lengths vary (40 to 88 tokens), so the requests in flight
drift apart.
"""

import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from specfleet.contract import SamplingSpec, TrafficSpec
from specfleet.contract.traffic import check_traffic
from specfleet_cli.main import app
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.loadgen import ClosedLoop, RequestSettings, ServerEndpoint, run_load
from specfleet_tasks.plan.prompt_sets import resolve_prompts
from specfleet_tasks.store.config import load_sweep_config
from tests.integration.idle_servers import SERVER_CONFIG, IdleServers
from tests.integration.services import prometheus_server

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

PHASES = ((1, 60), (8, 240))
"""(concurrency, requests), one after the other."""
OUTPUT_TOKENS = (40, 56, 72, 88)
"""Output tokens of the prompts in turn (``ignore_eos``: exactly these)."""
TOLERANCE = 0.1
COPY = "copy-of-the-served-model"
SCRAPE_WAIT_S = 30.0


def _config(path: Path) -> Path:
    """The test servers' config with load.concurrency [1, 4]: the levels the estimate snaps to."""
    data = yaml.safe_load(SERVER_CONFIG)
    data["load"]["concurrency"] = [level for level, _ in PHASES]
    path.write_text(yaml.safe_dump(data))
    return path


def _wait_for_a_scrape_after(url: str, time_s: float) -> None:
    """Until Prometheus holds a sample of the gauge taken after ``time_s``."""
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while time.monotonic() < deadline:
        result = httpx.get(f"{url}/api/v1/query", params={"query": "max(timestamp(vllm:num_requests_running))"},
                           timeout=5).json()["data"]["result"]
        if result and float(result[0]["value"][1]) > time_s:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus took no sample after the load within {SCRAPE_WAIT_S:g} s")


def test_a_known_load_pattern_comes_back_as_token_shares(idle_server: IdleServers, tmp_path: Path) -> None:
    server = idle_server("baseline")
    config = _config(tmp_path / "sweep.yaml")
    endpoint = ServerEndpoint(server.base_url, SERVED_MODEL_NAME)
    settings = RequestSettings(route="completions", max_tokens=max(OUTPUT_TOKENS), ignore_eos=True,
                               sampling=SamplingSpec(), timeout_s=120.0)
    prompts = [replace(item, max_tokens=OUTPUT_TOKENS[i % len(OUTPUT_TOKENS)])
               for i, item in enumerate(resolve_prompts("code"))]
    tokens: dict[int, int] = {}
    seconds: dict[int, float] = {}
    runner = CliRunner()
    with prometheus_server(tmp_path / "prometheus", f"127.0.0.1:{server.port}", copy_as_model=COPY) as url:
        for concurrency, requests in PHASES:
            started = time.monotonic()
            load = asyncio.run(run_load(endpoint, prompts, settings, ClosedLoop(concurrency),
                                        requests=requests, warmup_requests=0))
            seconds[concurrency] = time.monotonic() - started
            assert all(record.ok for record in load.records)
            tokens[concurrency] = sum(record.usage_completion_tokens or 0 for record in load.records)
        _wait_for_a_scrape_after(url, time.time())
        args = ["traffic", "--prometheus", url, "--since", "5m", "--config", str(config)]
        as_json = runner.invoke(app, [*args, "--model", SERVED_MODEL_NAME, "--json"])
        as_block = runner.invoke(app, [*args, "--model", SERVED_MODEL_NAME])
        several, unknown = runner.invoke(app, args), runner.invoke(app, [*args, "--model", "mistral"])
    assert as_json.exit_code == 0, as_json.output
    assert as_block.exit_code == 0, as_block.output
    found = json.loads(as_json.stdout)
    expected = {str(level): n / sum(tokens.values()) for level, n in tokens.items()}
    print(f"driven: {tokens} tokens in {seconds} s; expected token shares {expected}; found "
          f"{found['concurrency']}, time shares {found['time_shares']}; notes {found['notes']}", file=sys.stderr)
    assert set(found["concurrency"]) == set(expected) == set(found["time_shares"])
    for level, share in expected.items():
        assert found["concurrency"][level] == pytest.approx(share, abs=TOLERANCE), level
    # Each second at 8 served more tokens than a second at 1: 8 holds more of the tokens than of the time.
    (low, _), (high, _) = PHASES
    assert found["time_shares"][str(high)] < found["concurrency"][str(high)]
    assert found["time_shares"][str(low)] > found["concurrency"][str(low)]
    assert found["model"] == SERVED_MODEL_NAME and found["step_s"] == 1 and found["window_s"] == 300
    requests = sum(n for _, n in PHASES)
    assert found["mean_generation_tokens"] == pytest.approx(sum(tokens.values()) / requests, rel=0.05)
    assert found["mean_prompt_tokens"] is not None and found["mean_prompt_tokens"] > 0
    sweep = load_sweep_config(config)
    spec = TrafficSpec.model_validate(yaml.safe_load(as_block.stdout)["traffic"])
    check_traffic(spec, sweep.prompt_classes, sweep.load, sweep.sampling)
    assert "placeholders" in as_block.stderr + as_block.stdout
    # the same server scraped a second time under another model name: which one must be said
    models = ", ".join(sorted([COPY, SERVED_MODEL_NAME]))
    assert several.exit_code == 2 and unknown.exit_code == 2
    assert _error(several.stderr).endswith(f"several models in the last 5m ({models}): choose one with --model")
    assert _error(unknown.stderr) == (f"error: --model mistral: no samples of vllm:num_requests_running for it in "
                                      f"the last 5m (models seen: {models})")


def _error(stderr: str) -> str:
    [line] = [line for line in stderr.splitlines() if line.startswith("error:")]
    return line


def test_a_prometheus_that_scraped_no_vllm_says_so(tmp_path: Path) -> None:
    with prometheus_server(tmp_path / "prometheus", None) as url:
        result = CliRunner().invoke(app, ["traffic", "--prometheus", url, "--since", "30s"])
    assert result.exit_code == 2
    assert _error(result.stderr) == f"error: {url}: no samples of vllm:num_requests_running in the last 30s"
