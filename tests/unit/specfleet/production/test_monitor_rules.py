"""The drift monitor's figures (``specfleet.production.monitor_basis``) and the Prometheus rules built from
them (``specfleet.production.prometheus_rules``). The rules are run by promtool and by a real Prometheus in
``tests/integration/test_monitor_promtool.py`` and ``test_monitor_prometheus.py``."""

import math

import pytest

from specfleet.production.monitor_basis import LoadBucket, MonitorBasis, decode_tokens_per_step, running_bounds
from specfleet.production.prometheus_rules import BELOW_BREAK_EVEN, DRIFT, AlertingRule, RecordingRule, prometheus_rules
from specfleet.production.traffic_estimate import nearest_level
from specfleet.results.records import RequestRecord
from tests.support.records import request_record


@pytest.mark.parametrize("levels", [[1, 4], [1, 2, 8, 32], [4]])
def test_a_running_mean_falls_in_the_bucket_of_its_nearest_level(levels: list[int]) -> None:
    """The same buckets as ``specfleet traffic`` snaps to: nearest on a log scale, ties to the lower."""
    bounds = running_bounds(levels)
    for value in [0.3, 0.5, 1.0, 1.5, 2.0, 2.01, 3.0, 4.0, 5.66, 6.0, 16.0, 40.0]:
        inside = [level for level, (low, high) in zip(levels, bounds, strict=True)
                  if (low is None or value > low) and (high is None or value <= high)]
        assert inside == [nearest_level(value, levels)], value


def _record(chunks: tuple[int, ...], ok: bool = True) -> RequestRecord:
    times = tuple(range(1, len(chunks) + 1))
    return request_record(0, times, chunks, prompt_id="p", finish_reason="length", error=None if ok else "boom")


def test_tokens_per_decode_step_leave_out_each_first_chunk_and_keep_the_last() -> None:
    """vLLM counts every decode step of a request, the one cut by max_tokens included, and its
    prefill step's token apart: (3 + 4 + 1) + (2 + 2) over 3 + 2 steps."""
    records = [_record((1, 3, 4, 1)), _record((1, 2, 2)), _record((1,)), _record((1, 9, 9), ok=False)]
    assert decode_tokens_per_step(records) == pytest.approx(12 / 5)
    assert decode_tokens_per_step([_record((1,))]) is None


def _bucket(level: int, low: float | None, high: float | None, break_even: float | None,
            tokens: float | None, noise: float | None) -> LoadBucket:
    return LoadBucket(concurrency=level, running_above=low, running_up_to=high, baseline_step_ms=None,
                      speculative_step_ms=None, break_even_tokens_per_step=break_even, tokens_per_step=tokens,
                      acceptance_length=None, noise_floor=noise,
                      drift_floor_tokens_per_step=None if tokens is None or noise is None else tokens * (1 - noise))


BASIS = MonitorBasis(
    sweep_id="s-1", arm="draft-k2", method="draft_model", k=2, sampling="greedy", adopted=True,
    rollback_command="python -m vllm.entrypoints.openai.api_server --model m",
    buckets=[_bucket(1, None, 2.0, 1.4, 2.0, 0.05), _bucket(4, 2.0, math.sqrt(32), 1.7, None, None),
             _bucket(8, math.sqrt(32), None, None, None, None)],
)


def _alerts(window_s: int = 600, model: str | None = None) -> list[AlertingRule]:
    [group] = prometheus_rules(BASIS, window_s, model).groups
    return [r for r in group.rules if isinstance(r, AlertingRule)]


def test_each_bucket_with_a_figure_gets_its_own_expression_and_none_without() -> None:
    alerts = _alerts()
    assert [(a.alert, a.labels["concurrency_bucket"]) for a in alerts] == [
        (BELOW_BREAK_EVEN, "1"), (DRIFT, "1"), (BELOW_BREAK_EVEN, "4")]
    below_1, drift_1, below_4 = alerts
    tokens = 'specfleet:tokens_per_step:rate10m{specfleet_sweep="s-1",specfleet_arm="draft-k2"}'
    running = 'specfleet:requests_running:avg10m{specfleet_sweep="s-1",specfleet_arm="draft-k2"}'
    assert below_1.expr == f"{tokens} < 1.4 and on (model_name, instance) ({running} <= 2)"
    assert drift_1.expr == f"{tokens} < 1.9 and on (model_name, instance) ({running} <= 2)"
    assert below_4.expr == f"{tokens} < 1.7 and on (model_name, instance) ({running} > 2 and {running} <= 5.657)"
    assert {a.for_ for a in alerts} == {"10m"}


def test_annotations_carry_the_sweep_the_arm_the_threshold_and_the_rollback() -> None:
    below_1, drift_1, _ = _alerts()
    for alert in (below_1, drift_1):
        assert alert.annotations["sweep_id"] == "s-1" and alert.annotations["arm"] == "draft-k2"
        assert alert.annotations["rollback"] == BASIS.rollback_command
        assert '{{ $value | printf "%.2f" }} tokens per decode step' in alert.annotations["description"]
    assert below_1.annotations["break_even_tokens_per_step"] == "1.40"
    assert drift_1.annotations["drift_floor_tokens_per_step"] == "1.90"
    assert "noise floor (5.0%)" in drift_1.annotations["description"]


def test_the_window_names_the_recording_rules_and_a_model_filters_every_selector() -> None:
    [group] = prometheus_rules(BASIS, 30, "llama 70b").groups
    records = [r for r in group.rules if isinstance(r, RecordingRule)]
    assert [r.record for r in records] == ["specfleet:acceptance_length:rate30s", "specfleet:tokens_per_step:rate30s",
                                           "specfleet:requests_running:avg30s"]
    for rule in records:
        assert "[30s]" in rule.expr
        assert rule.expr.count("vllm:") == rule.expr.count('{model_name="llama 70b"}') > 0
        assert rule.labels == {"specfleet_sweep": "s-1", "specfleet_arm": "draft-k2"}
    acceptance, tokens, _ = records
    assert acceptance.expr.startswith("1 + sum by (model_name, instance) (rate(vllm:spec_decode_num_accepted_tokens")
    # tokens per step: first tokens left out, only on servers that speculate
    assert "- sum by (model_name, instance) (rate(vllm:time_to_first_token_seconds_count" in tokens.expr
    assert tokens.expr.endswith('group by (model_name, instance) (vllm:spec_decode_num_drafts_total'
                                '{model_name="llama 70b"})')
    assert all(a.for_ == "30s" for a in _alerts(30))


def test_the_rule_file_dumps_for_as_prometheus_spells_it() -> None:
    dumped = prometheus_rules(BASIS).model_dump(mode="json", by_alias=True)
    alert = next(r for r in dumped["groups"][0]["rules"] if "alert" in r)
    assert alert["for"] == "10m" and "for_" not in alert
