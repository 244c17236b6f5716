"""The client benchmark's arithmetic: CPU per token from a large run minus a small one, the
goal verdict, and ``specfleet measure --json`` read as the other clients' figures."""

import pytest

from benchmarks.client_capacity import Run, accuracy_verdict, cpu_us_per_token, measure_figures, verdict


def test_cpu_per_token_is_the_difference_of_two_runs() -> None:
    small = Run({"tokens": 32_768}, cpu_s=4.0)  # start-up plus one round
    large = Run({"tokens": 1_015_808}, cpu_s=4.0 + 983_040 * 5e-6)  # 5 µs more per extra token
    assert cpu_us_per_token(small, large) == pytest.approx(5.0)


def test_verdict_names_each_run_against_the_goal() -> None:
    assert verdict([4.0, 5.0], [9.0, 8.0]).startswith("met: measure / vLLM = 0.44, 0.62")
    assert verdict([4.0, 6.0], [9.0, 8.0]).startswith("missed in 1 of 2 runs: measure / vLLM = 0.44, 0.75")
    assert verdict([4.0, None], [9.0, 8.0]) == "not measured (a client failed)"


def test_accuracy_verdict_compares_the_median_size_of_the_errors_and_names_the_worse_runs() -> None:
    assert accuracy_verdict([0.5, -0.2, 0.5], [3.6, 0.6, -0.4]) == (
        "met: median |error| p99 0.50 ms against vLLM's 0.60 ms (worse in 1 of 3 runs, by up to 0.10 ms)")
    assert accuracy_verdict([0.5, -0.9], [0.1, 0.2]) == (
        "missed by 0.55 ms: median |error| p99 0.70 ms against vLLM's 0.15 ms (worse in 2 of 2 runs, by up to 0.70 ms)")
    assert accuracy_verdict([0.5, None], [3.6, 0.1]) == "not measured (a client failed)"


def _measure_json(reasons: list[str]) -> dict[str, object]:
    return {"status": "ok", "reasons": reasons, "completed": 256, "failed": 0, "output_tokens_per_s": 65_536.0,
            "itl_ms": {"p50": 5.0, "p95": 9.0, "p99": 12.5, "mean": 5.5}, "client_lag_p99_ms": 3.0}


def test_measure_json_becomes_tokens_duration_and_itl() -> None:
    figures = measure_figures(_measure_json(["client saturated: event-loop lag p99 80.0 ms > 50 ms"]), 128)
    assert figures == {"tokens": 32_768, "duration_s": 0.5, "itl_p50_ms": 5.0, "itl_p99_ms": 12.5,
                       "errors": 0.0, "loop_lag_p99_ms": 3.0}


def test_measure_json_with_broken_token_accounting_is_refused() -> None:
    with pytest.raises(ValueError, match="token accounting"):
        measure_figures(_measure_json(["token accounting: no final usage count in 3 of 256 requests"]), 128)
