"""The client and drivers over an in-process transport: request bodies, order, warm-up, errors.

Timing is not tested here (the transport answers instantly); the lead's tests run real vLLM.
"""

import asyncio
import json

import httpx
import pytest

from specfleet.contract.workload import SamplingSpec
from specfleet.errors import InputError
from specfleet.prompts import PromptItem
from specfleet.results.records import RequestRecord
from tasks.loadgen import ClosedLoop, PoissonArrivals, RequestSettings, poisson_offsets_ns, run_load
from tests.unit.tasks.test_loadgen_sse import CHAT_STREAM, COMPLETION_STREAM

PROMPTS = [PromptItem(id=f"p{i}", prompt=f"prompt {i}", max_tokens=3 if i == 1 else None) for i in range(3)]
SETTINGS = RequestSettings(endpoint="completions", model="tiny", max_tokens=5, ignore_eos=True,
                           sampling=SamplingSpec(), timeout_s=5.0)


class Recorder:
    """Answers every request with a canned stream and remembers what was sent."""

    def __init__(self, stream: bytes = COMPLETION_STREAM, status: int = 200) -> None:
        self.stream, self.status = stream, status
        self.bodies: list[dict[str, object]] = []
        self.headers: list[httpx.Headers] = []

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.bodies.append(json.loads(request.content))
            self.headers.append(request.headers)
            return httpx.Response(self.status, content=self.stream)
        return httpx.MockTransport(handle)


def test_completion_body_and_record() -> None:
    recorder = Recorder()
    records = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, ClosedLoop(2), requests=2,
                                   warmup_requests=0, api_key="sk-secret", transport=recorder.transport()))
    assert recorder.bodies[0] == {
        "model": "tiny", "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": 5, "ignore_eos": True, "temperature": 0.0, "top_p": 1.0, "prompt": "prompt 0",
    }
    assert recorder.bodies[1]["max_tokens"] == 3  # the prompt's own cap is lower
    assert recorder.headers[0]["authorization"] == "Bearer sk-secret"
    first = records.records[0]
    assert (first.chunk_tokens, first.usage_completion_tokens, first.error) == ((1, 3, 1), 5, None)
    assert records.window_ns is not None
    assert records.duration_s >= 0


def test_sampled_requests_get_per_request_seeds_and_chat_messages() -> None:
    recorder = Recorder(CHAT_STREAM)
    prompts = [PromptItem(id="c", messages=[{"role": "user", "content": "hi"}])]
    settings = RequestSettings(endpoint="chat", model="tiny", max_tokens=4, ignore_eos=False,
                               sampling=SamplingSpec(name="t1", temperature=1.0, seed=10), timeout_s=5.0)
    result = asyncio.run(run_load("http://server", prompts, settings, ClosedLoop(1), requests=2,
                                  warmup_requests=0, transport=recorder.transport()))
    assert [b["seed"] for b in recorder.bodies] == [10, 11]
    assert recorder.bodies[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert result.records[0].text == "Hi there"


def test_warmup_is_not_recorded_and_prompts_cycle_in_order() -> None:
    recorder = Recorder()
    calls: list[int] = []

    async def before_measured() -> None:
        calls.append(len(recorder.bodies))

    result = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, ClosedLoop(2), requests=5,
                                  warmup_requests=2, before_measured=before_measured,
                                  transport=recorder.transport()))
    assert calls == [2]  # called once, after both warm-up requests
    assert [r.prompt_id for r in result.records] == ["p0", "p1", "p2", "p0", "p1"]
    assert [r.index for r in result.records] == [0, 1, 2, 3, 4]


def test_poisson_records_carry_their_schedule() -> None:
    result = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, PoissonArrivals(rate_per_s=200.0, seed=1),
                                  requests=4, warmup_requests=1, transport=Recorder().transport()))
    scheduled = [r.scheduled_ns for r in result.records]
    assert all(s is not None for s in scheduled)
    start = scheduled[0]
    assert [s - start for s in scheduled if s is not None and start is not None] == poisson_offsets_ns(4, 200.0, 1)


@pytest.mark.parametrize(
    ("recorder", "expected"),
    [
        (Recorder(status=500, stream=b'{"error": "engine dead"}'), 'HTTP 500: {"error": "engine dead"}'),
        (Recorder(stream=COMPLETION_STREAM.split(b"data: [DONE]")[0]), "stream ended without [DONE]"),
        (Recorder(stream=b"data: {not json\n\n"), "malformed stream event"),
    ],
)
def test_failures_become_records(recorder: Recorder, expected: str) -> None:
    result = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, ClosedLoop(1), requests=1,
                                  warmup_requests=0, transport=recorder.transport()))
    assert result.records[0].error is not None
    assert result.records[0].error.startswith(expected)


def test_timeout_becomes_a_record() -> None:
    async def stall(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, content=COMPLETION_STREAM)

    settings = RequestSettings(endpoint="completions", model="m", max_tokens=5, ignore_eos=True,
                               sampling=SamplingSpec(), timeout_s=0.05)
    result = asyncio.run(run_load("http://server", PROMPTS, settings, ClosedLoop(1), requests=1,
                                  warmup_requests=0, transport=httpx.MockTransport(stall)))
    assert result.records[0].error == "timed out after 0.05 s"


def test_prompts_must_suit_the_endpoint() -> None:
    chat = RequestSettings(endpoint="chat", model="m", max_tokens=1, ignore_eos=True,
                           sampling=SamplingSpec(), timeout_s=1.0)
    with pytest.raises(InputError, match="prompt 'p0' has no 'messages'"):
        asyncio.run(run_load("http://server", PROMPTS, chat, ClosedLoop(1), requests=1, warmup_requests=0,
                             transport=Recorder().transport()))


class StopAfter:
    """A ``stop_when`` that says stop at the n-th completed measured request."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def __call__(self, record: RequestRecord) -> bool:
        self.seen += 1
        return self.seen >= self.n


def test_closed_loop_stops_issuing_once_told_and_keeps_requests_in_flight() -> None:
    stop = StopAfter(3)
    result = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, ClosedLoop(1), requests=10,
                                  warmup_requests=1, stop_when=stop, transport=Recorder().transport()))
    assert [r.index for r in result.records] == [0, 1, 2]
    wide = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, ClosedLoop(4), requests=50,
                                warmup_requests=0, stop_when=StopAfter(3), transport=Recorder().transport()))
    assert 3 <= len(wide.records) <= 3 + 3  # the stopping completion, plus up to 3 in flight
    assert [r.index for r in wide.records] == list(range(len(wide.records)))
    assert all(r.ok for r in wide.records)


def test_open_loop_stops_issuing_once_told() -> None:
    result = asyncio.run(run_load("http://server", PROMPTS, SETTINGS, PoissonArrivals(rate_per_s=50.0, seed=1),
                                  requests=40, warmup_requests=0, stop_when=StopAfter(2),
                                  transport=Recorder().transport()))
    assert 2 <= len(result.records) < 40
    assert all(r.scheduled_ns is not None for r in result.records)
