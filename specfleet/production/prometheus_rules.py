"""Prometheus recording and alerting rules for a speculative vLLM deployment, from a
``MonitorBasis`` (``specfleet.production.monitor_basis``): what ``specfleet monitor rules`` writes.

Recording rules, per served model and instance (summed over vLLM's engines), over ``window``:

- ``specfleet:acceptance_length:rate<window>``: ``1 + accepted / drafts`` from vLLM's spec-decode
  counters, the acceptance length conditional on drafting (for dashboards, and the sweep's
  ``mean_acceptance_length``);
- ``specfleet:tokens_per_step:rate<window>``: tokens per decode step over every step, from vLLM's
  generation-token counter less its first tokens (one time-to-first-token observation each) over
  its inter-token-latency observations (one per request per decode step). This is the figure the
  break-even is in; only servers exposing the spec-decode counters get it;
- ``specfleet:requests_running:avg<window>``: the mean of vLLM's running-requests gauge, which
  picks the load bucket.

Alerts, one expression per measured concurrency level (the bucket the mean running requests is
nearest on a log scale), each ``for`` the window: ``SpeculationBelowBreakEven`` when tokens per
step fall below the bucket's break-even, ``SpeculationAcceptanceDrift`` when they fall below the
sweep's own figure by more than its noise floor. Levels without the figure get no expression.
Annotations carry the sweep id, the arm, the threshold and the rollback (the speculation-off server).
"""

import json

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.durations import format_duration
from specfleet.production.monitor_basis import LoadBucket, MonitorBasis

DEFAULT_WINDOW_S = 600
"""Ten minutes: long enough that a few long completions do not swing the mean, short enough to page
within the hour; tests set seconds."""
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
FIRST_TOKENS = "vllm:time_to_first_token_seconds_count"
DECODE_STEPS = "vllm:inter_token_latency_seconds_count"
RUNNING = "vllm:num_requests_running"
BY = "sum by (model_name, instance)"
BELOW_BREAK_EVEN = "SpeculationBelowBreakEven"
DRIFT = "SpeculationAcceptanceDrift"
VALUE = '{{ $value | printf "%.2f" }}'
WHERE = "{{ $labels.model_name }} at {{ $labels.instance }}"


class RecordingRule(RecordModel):
    record: str
    expr: str
    labels: dict[str, str]


class AlertingRule(RecordModel):
    alert: str
    expr: str
    for_: str = Field(serialization_alias="for")
    labels: dict[str, str]
    annotations: dict[str, str]


class RuleGroup(RecordModel):
    name: str
    rules: list[RecordingRule | AlertingRule]


class RuleFile(RecordModel):
    """Prometheus' rule file format (``rule_files:``); dump with ``by_alias=True``."""

    groups: list[RuleGroup]


def record_names(window_s: int) -> tuple[str, str, str]:
    """Acceptance length, tokens per step, running requests: the recording rules' names."""
    w = format_duration(window_s)
    return f"specfleet:acceptance_length:rate{w}", f"specfleet:tokens_per_step:rate{w}", \
        f"specfleet:requests_running:avg{w}"


def _threshold(value: float) -> str:
    return f"{value:.4g}"


def _recording_rules(basis: MonitorBasis, window_s: int, model: str | None) -> list[RecordingRule]:
    w = format_duration(window_s)
    match = "" if model is None else "{model_name=" + json.dumps(model) + "}"

    def rate(metric: str) -> str:
        return f"{BY} (rate({metric}{match}[{w}]))"

    acceptance, tokens, running = record_names(window_s)
    labels = {"specfleet_sweep": basis.sweep_id, "specfleet_arm": basis.arm}
    speculative = f"group by (model_name, instance) ({DRAFTS}{match})"
    return [
        RecordingRule(record=acceptance, expr=f"1 + {rate(ACCEPTED)} / {rate(DRAFTS)}", labels=labels),
        RecordingRule(record=tokens, labels=labels, expr=(
            f"({rate(GENERATION_TOKENS)} - {rate(FIRST_TOKENS)}) / {rate(DECODE_STEPS)}"
            f" and on (model_name, instance) {speculative}")),
        RecordingRule(record=running, expr=f"{BY} (avg_over_time({RUNNING}{match}[{w}]))", labels=labels),
    ]


def _selector(name: str, basis: MonitorBasis) -> str:
    return f"{name}{{specfleet_sweep={json.dumps(basis.sweep_id)},specfleet_arm={json.dumps(basis.arm)}}}"


def _in_bucket(bucket: LoadBucket, running: str) -> str:
    """`` and on (...) (running within the bucket)``; empty for a sweep with one level."""
    bounds = [f"{running} > {_threshold(bucket.running_above)}" if bucket.running_above is not None else "",
              f"{running} <= {_threshold(bucket.running_up_to)}" if bucket.running_up_to is not None else ""]
    within = " and ".join(b for b in bounds if b)
    return f" and on (model_name, instance) ({within})" if within else ""


def _bucket_text(bucket: LoadBucket) -> str:
    low, high = bucket.running_above, bucket.running_up_to
    span = (f"above {low:.2f}" if high is None else f"at most {high:.2f}" if low is None
            else f"{low:.2f} to {high:.2f}")
    return f"concurrency {bucket.concurrency} (mean running requests {span})"


def _alerts(basis: MonitorBasis, bucket: LoadBucket, window_s: int) -> list[AlertingRule]:
    _, tokens, running = record_names(window_s)
    w = format_duration(window_s)
    live, within = _selector(tokens, basis), _in_bucket(bucket, _selector(running, basis))
    common = {"sweep_id": basis.sweep_id, "arm": basis.arm, "rollback": basis.rollback_command}
    labels = {"concurrency_bucket": str(bucket.concurrency)}
    measured = "" if bucket.tokens_per_step is None else f"; its cells made {bucket.tokens_per_step:.2f}"
    alerts = []
    if bucket.break_even_tokens_per_step is not None:
        be = bucket.break_even_tokens_per_step
        alerts.append(AlertingRule(
            alert=BELOW_BREAK_EVEN, expr=f"{live} < {_threshold(be)}{within}", for_=w,
            labels=labels | {"severity": "critical"}, annotations=common | {
                "break_even_tokens_per_step": f"{be:.2f}",
                "summary": f"Speculation ({basis.arm}) no longer pays on {WHERE}",
                "description": (
                    f"{VALUE} tokens per decode step over the last {w}, below the break-even {be:.2f} that sweep "
                    f"{basis.sweep_id} measured for {basis.arm} at {_bucket_text(bucket)}: a speculative step "
                    f"costs {be:.2f} baseline steps there{measured}. Roll back: restart the replica with "
                    f"speculation off (the rollback annotation)."),
            }))
    if bucket.drift_floor_tokens_per_step is not None and bucket.tokens_per_step is not None:
        floor, noise = bucket.drift_floor_tokens_per_step, bucket.noise_floor or 0.0
        alerts.append(AlertingRule(
            alert=DRIFT, expr=f"{live} < {_threshold(floor)}{within}", for_=w,
            labels=labels | {"severity": "warning"}, annotations=common | {
                "measured_tokens_per_step": f"{bucket.tokens_per_step:.2f}",
                "drift_floor_tokens_per_step": f"{floor:.2f}",
                "summary": f"Speculation ({basis.arm}) accepts less than its sweep measured on {WHERE}",
                "description": (
                    f"{VALUE} tokens per decode step over the last {w}, below the {bucket.tokens_per_step:.2f} "
                    f"that sweep {basis.sweep_id} measured for {basis.arm} at {_bucket_text(bucket)} by more "
                    f"than its noise floor ({noise:.1%}). The traffic or the drafter changed: revalidate "
                    f"(specfleet revalidate), and roll back if it stays below the break-even"
                    + ("" if bucket.break_even_tokens_per_step is None
                       else f" ({bucket.break_even_tokens_per_step:.2f})") + "."),
            }))
    return alerts


def prometheus_rules(basis: MonitorBasis, window_s: int = DEFAULT_WINDOW_S, model: str | None = None) -> RuleFile:
    """One rule group: the recording rules, then each bucket's alerts (``model``: only that served model)."""
    rules: list[RecordingRule | AlertingRule] = [*_recording_rules(basis, window_s, model)]
    for bucket in basis.buckets:
        rules += _alerts(basis, bucket, window_s)
    return RuleFile(groups=[RuleGroup(name=f"specfleet-{basis.sweep_id}-{basis.arm}", rules=rules)])
