"""vLLM's Prometheus telemetry as typed figures (docs/measurement.md, "Speculative decoding telemetry").

Counters are labelled per engine; we sum over engines and take deltas over the measured
window. r (the telemetry fraction) is kept apart from the modelled alpha by name and type.
"""

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specfleet.results.cell import KVCacheInfo, SpecDecodeStats
from specfleet.results.records import pooled_acceptance_length

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
CACHE_INFO = "vllm:cache_config_info"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """One scrape of the spec-decode counters, summed over engines."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.append((sample.name, dict(sample.labels), float(sample.value)))
    return out


def parse_spec_decode_counters(text: str) -> SpecDecodeCounters | None:
    """The counters from a ``/metrics`` body, or None when the server exposes none."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    per_pos: dict[int, float] = {}
    seen = False
    for name, labels, value in _samples(text):
        base = name.removesuffix("_total")
        if base in totals:
            totals[base] += value
            seen = True
        elif base == ACCEPTED_PER_POS:
            position = int(labels.get("position", "0"))
            per_pos[position] = per_pos.get(position, 0.0) + value
    if not seen:
        return None
    return SpecDecodeCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED], per_pos)


def spec_decode_delta(before: SpecDecodeCounters, after: SpecDecodeCounters) -> SpecDecodeStats:
    """r = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts (bonus included);
    per-position acceptance = accepted_at_pos[i] / drafts."""
    drafts = int(round(after.drafts - before.drafts))
    draft_tokens = int(round(after.draft_tokens - before.draft_tokens))
    accepted = int(round(after.accepted_tokens - before.accepted_tokens))
    positions = sorted(set(after.accepted_per_pos) | set(before.accepted_per_pos))
    per_pos = [
        int(round(after.accepted_per_pos.get(p, 0.0) - before.accepted_per_pos.get(p, 0.0))) for p in positions
    ]
    return SpecDecodeStats(
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
        num_accepted_tokens=accepted,
        accepted_per_position=per_pos,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        mean_acceptance_length=pooled_acceptance_length(accepted, drafts),
        acceptance_per_position=[n / drafts for n in per_pos] if drafts > 0 else [],
    )


def requests_in_flight(text: str) -> int | None:
    """Requests the server is running or holding waiting (the gauges ``vllm:num_requests_running``
    and ``vllm:num_requests_waiting``, summed over engines); None when it exposes neither."""
    counts = [value for name, _, value in _samples(text) if name in (RUNNING, WAITING)]
    return int(round(sum(counts))) if counts else None


def parse_kv_cache_info(text: str) -> KVCacheInfo | None:
    """KV capacity from the labels of ``vllm:cache_config_info``; None when absent."""
    for name, labels, _ in _samples(text):
        if name == CACHE_INFO:
            return KVCacheInfo(
                kv_cache_size_tokens=_int(labels.get("kv_cache_size_tokens")),
                num_gpu_blocks=_int(labels.get("num_gpu_blocks")),
                block_size=_int(labels.get("block_size")),
                kv_cache_max_concurrency=_float(labels.get("kv_cache_max_concurrency")),
                kv_cache_memory_bytes=_int(labels.get("kv_cache_memory_bytes")),
            )
    return None


def _float(raw: str | None) -> float | None:
    try:
        return float(raw) if raw not in (None, "", "None") else None
    except ValueError:
        return None


def _int(raw: str | None) -> int | None:
    value = _float(raw)
    return int(value) if value is not None else None


PROCESS_START = "process_start_time_seconds"
"""Prometheus's process collector: the server process's start, Unix seconds."""


def process_start_time_s(text: str) -> float | None:
    """The server process's start from a ``/metrics`` body, or None when it exposes none (vLLM
    with several API servers: Prometheus's multiprocess mode has no process collector)."""
    return next((value for name, _, value in _samples(text) if name == PROCESS_START), None)
