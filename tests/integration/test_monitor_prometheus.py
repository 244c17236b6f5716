"""The drift alerts end to end: a real Prometheus loads the rules ``specfleet monitor rules`` writes
(``specfleet_tasks.monitor.rules.rules_yaml``) and scrapes the session's ngram k=3 vLLM CPU server; traffic of a
class the fixture target copies from its prompt (rag) keeps tokens per decode step high, then
traffic of one it does not (longform) brings them down, and ``SpeculationBelowBreakEven`` goes to
firing in Prometheus's own alerts API.

The thresholds are not a sweep's here: the break-even sits midway between the two classes' tokens
per step as the client measures them on the same server first, so the test checks the rules, the
metric names and the buckets against a real vLLM and a real Prometheus, not this CPU's economics
(what the figures mean is checked in the unit and promtool tests). Load runs at concurrency 2,
so the server's running requests stay in the bucket of level 1 of levels (1, 8); level 8's
thresholds sit above anything the server makes, so they fire only if the bucket is chosen wrongly.
Windows are seconds and Prometheus scrapes and evaluates every half second: in this test only.
"""

import asyncio
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from specfleet.contract import SamplingSpec
from specfleet.contract.prompts import PromptItem
from specfleet.contract.server_args import deployment_args
from specfleet.production.monitor_basis import LoadBucket, MonitorBasis, decode_tokens_per_step
from specfleet.production.prometheus_rules import BELOW_BREAK_EVEN, DRIFT, record_names
from specfleet.results.records import RequestRecord
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.loadgen import ClosedLoop, RequestSettings, ServerEndpoint, run_load
from specfleet_tasks.monitor.rules import rules_yaml, write_rules
from specfleet_tasks.plan.prompt_sets import resolve_prompts
from tests.integration.idle_servers import IdleServers, server_config
from tests.integration.services import prometheus_server

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

HIGH, LOW = "rag", "longform"
CONCURRENCY = 2
LEVELS = (1, 8)
OUTPUT_TOKENS = 48
CALIBRATION_REQUESTS = 12
WINDOW_S = 10
MIN_GAP = 0.2
"""Tokens per step the two classes must differ by for the test to mean anything (seen: about 0.5)."""
FIRING_WAIT_S = 120.0
SWEEP = "monitor-test"


def _prompts(name: str) -> list[PromptItem]:
    return [replace(item, max_tokens=OUTPUT_TOKENS) for item in resolve_prompts(name)]


SETTINGS = RequestSettings(route="completions", max_tokens=OUTPUT_TOKENS, ignore_eos=True, sampling=SamplingSpec(),
                           timeout_s=120.0)


class Traffic:
    """``start(name)``: the server gets that class at concurrency 2 from now until the next ``start``
    or ``stop`` (a closed loop in a thread, stopped after its requests in flight); ``records[name]``
    holds what the client received, once stopped."""

    def __init__(self, endpoint: ServerEndpoint) -> None:
        self.endpoint = endpoint
        self.records: dict[str, list[RequestRecord]] = {}
        self.running: list[tuple[threading.Event, threading.Thread]] = []

    def start(self, name: str) -> None:
        self.stop()
        event = threading.Event()

        def drive() -> None:
            load = asyncio.run(run_load(self.endpoint, _prompts(name), SETTINGS, ClosedLoop(CONCURRENCY),
                                        requests=100_000, warmup_requests=0, stop_when=lambda _: event.is_set()))
            self.records[name] = load.records

        thread = threading.Thread(target=drive, name=f"traffic-{name}", daemon=True)
        self.running.append((event, thread))
        thread.start()

    def stop(self) -> None:
        for event, thread in self.running:
            event.set()
            thread.join(timeout=120)
        self.running.clear()


@pytest.fixture
def traffic(idle_server: IdleServers) -> Iterator[Traffic]:
    driver = Traffic(ServerEndpoint(idle_server("ngram").base_url, SERVED_MODEL_NAME))
    yield driver
    driver.stop()
    failed = [r.error for records in driver.records.values() for r in records if r.error is not None]
    assert not failed, failed[:3]


def _tokens_per_step(server_url: str, name: str) -> float:
    load = asyncio.run(run_load(ServerEndpoint(server_url, SERVED_MODEL_NAME), _prompts(name), SETTINGS,
                                ClosedLoop(CONCURRENCY), requests=CALIBRATION_REQUESTS, warmup_requests=0))
    assert all(r.ok for r in load.records)
    found = decode_tokens_per_step(load.records)
    assert found is not None
    return found


def _basis(high: float, low: float) -> MonitorBasis:
    middle = (high + low) / 2
    cut = math.sqrt(LEVELS[0] * LEVELS[1])
    above = high + 1.0  # level 8: fires on anything this server makes, were it the bucket

    def bucket(level: int, low_bound: float | None, high_bound: float | None, threshold: float) -> LoadBucket:
        measured = high if level == LEVELS[0] else above
        return LoadBucket(concurrency=level, running_above=low_bound, running_up_to=high_bound, baseline_step_ms=None,
                          speculative_step_ms=None, break_even_tokens_per_step=threshold, tokens_per_step=measured,
                          acceptance_length=None, noise_floor=1.0 - threshold / measured,
                          drift_floor_tokens_per_step=threshold)

    rollback = deployment_args(server_config(), {}, SERVED_MODEL_NAME).command()
    return MonitorBasis(sweep_id=SWEEP, arm="ngram-k3", method="ngram", k=3, sampling="greedy", adopted=False,
                        buckets=[bucket(LEVELS[0], None, cut, middle), bucket(LEVELS[1], cut, None, above)],
                        rollback_command=rollback)


def _api(url: str, path: str, **params: str) -> Any:
    body = httpx.get(f"{url}/api/v1/{path}", params=params, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]


def _ours(url: str) -> list[dict[str, Any]]:
    return [a for a in _api(url, "alerts")["alerts"] if a["labels"].get("specfleet_sweep") == SWEEP]


def _value(url: str, record: str) -> float | None:
    result = _api(url, "query", query=f'{record}{{specfleet_sweep="{SWEEP}"}}')["result"]
    return float(result[0]["value"][1]) if result else None


def _poll(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.5)


def test_the_break_even_alert_fires_when_acceptance_falls(idle_server: IdleServers, traffic: Traffic,
                                                          tmp_path: Path) -> None:
    server = idle_server("ngram")
    high, low = _tokens_per_step(server.base_url, HIGH), _tokens_per_step(server.base_url, LOW)
    assert high - low >= MIN_GAP, f"{HIGH} {high:.2f} vs {LOW} {low:.2f} tokens per step: too close to tell apart"
    basis = _basis(high, low)
    rules = tmp_path / "rules.yml"
    write_rules(rules, rules_yaml(basis, WINDOW_S, SERVED_MODEL_NAME, []))
    acceptance, tokens, running = record_names(WINDOW_S)
    seen: dict[str, list[float]] = {"high": [], "low": []}
    with prometheus_server(tmp_path / "prometheus", f"127.0.0.1:{server.port}", rules=rules) as url:
        traffic.start(HIGH)
        started = time.monotonic()
        _poll(lambda: _value(url, tokens) is not None, 30, "a tokens-per-step value")
        # The high class for a full window, then as long again (the alerts' ``for``): never firing, and
        # once the window holds only this class, never pending either.
        trace: list[tuple[float, float | None, list[str]]] = []
        while (elapsed := time.monotonic() - started) < 2.5 * WINDOW_S:
            value = _value(url, tokens)
            trace.append((round(elapsed, 1), value, [f"{a['labels']['alertname']} {a['state']}" for a in _ours(url)]))
            if value is not None and elapsed > 1.2 * WINDOW_S:
                seen["high"].append(value)
            time.sleep(0.5)
        print(f"while {HIGH}: {trace}", file=sys.stderr)
        assert not [t for t in trace if any("firing" in state for state in t[2])], trace
        assert not [t for t in trace if t[0] > 1.2 * WINDOW_S and t[2]], trace
        high_acceptance = _value(url, acceptance)
        traffic.start(LOW)
        switched = time.monotonic()

        def firing() -> bool:
            value = _value(url, tokens)
            if value is not None:
                seen["low"].append(value)
            states = {(a["labels"]["alertname"], a["state"]) for a in _ours(url)}
            return {(BELOW_BREAK_EVEN, "firing"), (DRIFT, "firing")} <= states

        _poll(firing, FIRING_WAIT_S, f"{BELOW_BREAK_EVEN} firing after {LOW} traffic")
        fired_after_s = time.monotonic() - switched
        alerts, low_acceptance, load = _ours(url), _value(url, acceptance), _value(url, running)
        health = {r["name"]: r["health"] for g in _api(url, "rules")["groups"] for r in g["rules"]}
    streamed = decode_tokens_per_step(traffic.records[HIGH])
    assert streamed is not None
    print(f"client tokens/step: {HIGH} {high:.3f} (during the {HIGH} phase {streamed:.3f}), {LOW} {low:.3f}; "
          f"Prometheus tokens/step while {HIGH}: "
          f"{min(seen['high']):.3f}-{max(seen['high']):.3f}, last while {LOW}: {seen['low'][-1]:.3f}; "
          f"1 + accepted/drafts: {high_acceptance} then {low_acceptance}; mean running {load}; "
          f"firing {fired_after_s:.1f} s after the switch", file=sys.stderr)
    assert set(health.values()) == {"ok"}, health
    # vLLM's counters, through the recording rule, agree with what the client's streams carried
    assert all(abs(value - streamed) <= 0.15 for value in seen["high"]), (streamed, seen["high"])
    assert seen["low"][-1] < basis.buckets[0].break_even_tokens_per_step  # type: ignore[operator]
    assert {a["labels"]["concurrency_bucket"] for a in alerts} == {"1"}, alerts
    below = next(a for a in alerts if a["labels"]["alertname"] == BELOW_BREAK_EVEN)
    assert below["labels"]["model_name"] == SERVED_MODEL_NAME
    assert below["labels"]["instance"] == f"127.0.0.1:{server.port}"
    notes = below["annotations"]
    assert notes["sweep_id"] == SWEEP and notes["arm"] == "ngram-k3" and notes["rollback"] == basis.rollback_command
    assert notes["break_even_tokens_per_step"] == f"{basis.buckets[0].break_even_tokens_per_step:.2f}"
    assert notes["description"].startswith(f"{float(below['value']):.2f} tokens per decode step over the last 10s")
    assert "--speculative-config" not in notes["rollback"]
