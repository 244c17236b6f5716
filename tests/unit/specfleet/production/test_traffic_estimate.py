"""The traffic estimate against hand-computed cases: token shares are not time shares, levels snap
to the config's, counter resets, idle steps, and the printed block is a valid traffic block."""

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from specfleet.contract import TrafficSpec, parse_sweep_config
from specfleet.contract.durations import format_duration, parse_duration_s
from specfleet.contract.traffic import check_traffic
from specfleet.errors import InputError
from specfleet.production.traffic_estimate import (
    CLASSES_NOT_VISIBLE,
    Lengths,
    Series,
    ServerMetrics,
    counter_increases,
    estimate_traffic,
    level_steps,
    nearest_level,
    query_step_s,
    rounded_shares,
    scrape_interval_s,
    traffic_block,
)

ROOT = Path(__file__).resolve().parents[4]
T0 = 1_800_000_000.0
LENGTHS = Lengths(sum_increase=5000.0, count_increase=50.0, quantiles={0.5: 90.0, 0.9: 180.0, 0.99: None})


def replica(levels: Sequence[float], tokens: Sequence[float], instance: str = "a:8000",
            engine: str = "0") -> tuple[Series, Series]:
    """The gauge and counter of one engine for 1 s steps: ``levels[i]`` running and ``tokens[i]``
    generated during step i (the counter starts at 0 one step before the first reading)."""
    labels = {"instance": instance, "job": "vllm", "model_name": "m", "engine": engine}
    gauge = Series(labels | {"__name__": "vllm:num_requests_running"},
                   [(T0 + i + 1, level) for i, level in enumerate(levels)])
    total, counter = 0.0, [(T0, 0.0)]
    for i, n in enumerate(tokens):
        total += n
        counter.append((T0 + i + 1, total))
    return gauge, Series(labels | {"__name__": "vllm:generation_tokens_total"}, counter)


def metrics(*replicas: tuple[Series, Series], step_s: int = 1, scrape_s: float | None = 1.0,
            lengths: Lengths = LENGTHS) -> ServerMetrics:
    return ServerMetrics(source="http://prom:9090", model="m", window_s=300, step_s=step_s,
                         scrape_interval_s=scrape_s, running=[g for g, _ in replicas],
                         generated=[c for _, c in replicas], prompt_tokens=lengths, generation_tokens=lengths)


def test_token_shares_weight_each_level_by_the_tokens_served_there() -> None:
    # Half the time at 1 running (10 tokens/s), half at 4 (40 tokens/s): 100 vs 400 tokens.
    estimate = estimate_traffic(metrics(replica([1] * 10 + [4] * 10, [10] * 10 + [40] * 10)))
    assert estimate.concurrency == pytest.approx({1: 0.2, 4: 0.8})
    assert estimate.time_shares == pytest.approx({1: 0.5, 4: 0.5})
    assert estimate.share_basis == "tokens"


def test_levels_snap_to_the_nearest_config_level_on_a_log_scale() -> None:
    # 2 is as near 1 as 4 (to the lower), 3 and 5 go to 4, 12 to 16.
    assert [nearest_level(v, [1, 4, 16]) for v in (1, 2, 3, 5, 8, 12)] == [1, 1, 4, 4, 4, 16]
    levels = [1, 2, 3, 5, 12]
    tokens = [10, 10, 30, 50, 100]  # level 1: 20, level 4: 80, level 16: 100 of 200
    estimate = estimate_traffic(metrics(replica(levels, tokens)), levels=[1, 4, 16])
    assert estimate.concurrency == pytest.approx({1: 0.1, 4: 0.4, 16: 0.5})
    assert estimate.time_shares == pytest.approx({1: 0.4, 4: 0.4, 16: 0.2})
    assert any("2 -> 1, 3 -> 4, 5 -> 4, 12 -> 16" in note for note in estimate.notes)


def test_a_counter_reset_counts_the_new_counter_from_zero() -> None:
    gauge = Series({"instance": "a"}, [(T0 + i, 2.0) for i in range(1, 5)])
    values = [500.0, 600.0, 700.0, 30.0, 130.0]  # restarted between the third and fourth reading
    counter = Series({"instance": "a"}, [(T0 + i, v) for i, v in enumerate(values)])
    assert list(counter_increases(counter).values()) == [100.0, 100.0, 30.0, 100.0]
    steps, unmatched = level_steps([gauge], [counter])
    assert sum(s.tokens for s in steps) == 330.0 and unmatched == 0


def test_idle_steps_are_left_out_and_said_so() -> None:
    # 20 tokens at 1 running, then 20 at 2. Step 3 reads 0 at its end, yet served 5 tokens: its
    # request finished before the reading, so it counts at the 2 read at its start. Step 4 reads
    # 0 at both ends and served 3 (a short request between readings); step 5 served nothing.
    estimate = estimate_traffic(metrics(replica([1, 2, 0, 0, 0, 2], [20, 20, 5, 3, 0, 20])))
    assert estimate.concurrency == pytest.approx({1: 20 / 65, 2: 45 / 65})
    assert estimate.time_shares == pytest.approx({1: 1 / 4, 2: 3 / 4})
    assert "2 of 6 steps were idle (no request running) and are left out, with the 3 output tokens counted in them" \
        in estimate.notes
    assert any(note.startswith("1 of 6 steps served tokens but read 0 at their end") for note in estimate.notes)


def test_engines_of_a_replica_add_up_and_replicas_stay_apart() -> None:
    # Replica a: two engines at 1 each (level 2), 10 tokens each per step. Replica b: level 1, 20 tokens per step.
    a0, a1 = replica([1, 1], [10, 10], engine="0"), replica([1, 1], [10, 10], engine="1")
    b = replica([1, 1], [20, 20], instance="b:8000")
    estimate = estimate_traffic(metrics(a0, a1, b))
    assert estimate.concurrency == pytest.approx({1: 0.5, 2: 0.5})
    assert estimate.time_shares == pytest.approx({1: 0.5, 2: 0.5})


def test_without_config_levels_under_one_percent_merge_into_their_nearest_neighbour() -> None:
    # Level 3 holds 5 of 1000 tokens: it joins 4 (log-nearer than 1), tokens and time alike.
    estimate = estimate_traffic(metrics(replica([1, 1, 3, 4, 4], [200, 200, 5, 295, 300])))
    assert estimate.concurrency == pytest.approx({1: 0.4, 4: 0.6})
    assert estimate.time_shares == pytest.approx({1: 0.4, 4: 0.6})
    assert any("3 -> 4" in note for note in estimate.notes)


def test_steps_without_a_gauge_reading_are_left_out() -> None:
    gauge, counter = replica([1, 1, 1], [10, 10, 10])
    gauge = Series(gauge.labels, gauge.points[:2])
    steps, unmatched = level_steps([gauge], [counter])
    assert [s.tokens for s in steps] == [10, 10] and unmatched == 10


def test_no_tokens_while_busy_is_bad_input() -> None:
    with pytest.raises(InputError, match="generated no output tokens while requests ran in the last 5m"):
        estimate_traffic(metrics(replica([0, 0, 0], [0, 0, 0])))


def test_lengths_are_null_with_a_reason_never_zero() -> None:
    absent = Lengths(sum_increase=None, count_increase=None, quantiles={0.5: None})
    none_finished = Lengths(sum_increase=0.0, count_increase=0.0, quantiles={0.5: None})
    estimate = estimate_traffic(metrics(replica([1], [10]), lengths=absent))
    assert estimate.mean_prompt_tokens is None and estimate.mean_generation_tokens is None
    assert "mean prompt tokens: the server exposes no vllm:request_prompt_tokens histogram" in estimate.notes
    estimate = estimate_traffic(metrics(replica([1], [10]), lengths=none_finished))
    assert estimate.mean_generation_tokens is None
    assert any("no request finished in the window" in note for note in estimate.notes)
    assert estimate_traffic(metrics(replica([1], [10]))).mean_prompt_tokens == 100.0


def test_json_keys_levels_as_strings() -> None:
    dumped = estimate_traffic(metrics(replica([1, 4], [10, 40]))).model_dump(mode="json")
    assert set(dumped) == {"share_basis", "concurrency", "time_shares", "mean_prompt_tokens",
                           "mean_generation_tokens", "window_s", "step_s", "model", "notes"}
    assert dumped["concurrency"] == {"1": 0.2, "4": 0.8} and dumped["time_shares"] == {"1": 0.5, "4": 0.5}


def test_the_block_is_a_valid_traffic_block_once_classes_are_filled_in() -> None:
    observed = metrics(replica([1, 2, 3, 7], [100, 100, 100, 100]))
    text = traffic_block(estimate_traffic(observed), observed)
    assert f"# {CLASSES_NOT_VISIBLE}" in text and "#       1        0.250       0.250" in text
    block = yaml.safe_load(text)["traffic"]
    assert block["prompt_classes"] == {} and block["concurrency"] == {1: 0.25, 2: 0.25, 3: 0.25, 7: 0.25}
    spec = TrafficSpec.model_validate(block | {"prompt_classes": {"code": 0.5, "chat": 0.5}})
    assert spec.load_shares == {1.0: 0.25, 2.0: 0.25, 3.0: 0.25, 7.0: 0.25}


def test_with_a_config_the_block_lists_its_classes_and_levels_and_passes_its_checks() -> None:
    config = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo-cpu.yaml")
    observed = metrics(replica([1, 2, 3, 5], [10, 20, 30, 40]), step_s=60)
    estimate = estimate_traffic(observed, levels=config.load.concurrency)
    text = traffic_block(estimate, observed, [p.name for p in config.prompt_classes])
    assert "placeholders to replace" in text
    assert "60 s steps, coarser than the 1 s scrape interval" in text
    spec = TrafficSpec.model_validate(yaml.safe_load(text)["traffic"])
    check_traffic(spec, config.prompt_classes, config.load, config.sampling)
    assert set(spec.prompt_classes) == {p.name for p in config.prompt_classes}
    assert sum(spec.prompt_classes.values()) == pytest.approx(1.0, abs=1e-9)


def test_rounded_shares_sum_to_exactly_one() -> None:
    assert rounded_shares(dict.fromkeys("abcdefg", 1.0)) == {k: 0.143 if k in "abcdef" else 0.142 for k in "abcdefg"}
    assert sum(rounded_shares({1: 0.3333, 2: 0.3333, 4: 0.3334}).values()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("90m", 5400), ("7h", 25_200), ("1d", 86_400),
                                               ("2w", 1_209_600)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "0m", "1.5h", "1h30m", "-1d", "7days"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration like 30s, 90m, 7h or 1d"):
        parse_duration_s(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (30, 300, 5400, 86_400, 604_800, 90)] == ["30s", "5m", "90m", "1d", "1w", "90s"]


def test_the_step_fits_the_point_limit_and_the_scrape_interval() -> None:
    assert query_step_s(7 * 86_400, 15.0) == 55  # 604800 s in at most 11,000 points
    assert query_step_s(300, 0.5) == 1  # never under 1 s
    assert query_step_s(3600, 15.0) == 15  # never under the scrape interval
    assert query_step_s(3600, None) == 1
    assert scrape_interval_s([Series({}, [(0.0, 1.0), (15.0, 1.0), (30.0, 2.0), (60.0, 2.0)])]) == 15.0
    assert scrape_interval_s([Series({}, [(0.0, 1.0)])]) is None
