"""Like with like: a replica's age from its ``/metrics`` (its own clock where it sends a Date
header, never a made-up 0), and whether the canary's comparison is of like age: the candidate
against the baseline, or against the fresh twin where one was measured."""

from email.utils import formatdate

import pytest

from specfleet.measure.telemetry import process_start_time_s
from specfleet.production.replica_age import (
    DEFAULT_MAX_AGE_GAP_S,
    NO_START_TIME,
    age_coverage,
    age_text,
    replica_age,
)
from tests.support.replica_ages import aged

STARTED_S = 1_796_000_000.0
VLLM_METRICS = f"""# HELP python_info Python platform information
# TYPE python_info gauge
python_info{{implementation="CPython",major="3",minor="11",patchlevel="9",version="3.11.9"}} 1.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds {STARTED_S}
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} 0.0
"""
MULTIPROCESS_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""
DAYS_3_HOURS_2_S = 3 * 86_400 + 2 * 3600


def test_the_age_is_the_replicas_date_less_its_process_start() -> None:
    assert process_start_time_s(VLLM_METRICS) == STARTED_S
    date = formatdate(STARTED_S + 660, usegmt=True)  # the replica's clock: 11 minutes later
    age = replica_age("candidate", VLLM_METRICS, date, client_now_s=STARTED_S + 9_999)
    assert (age.age_s, age.clock, age.started_at_s, age.note) == (660.0, "replica", STARTED_S, None)
    assert age.describe() == "candidate up 11 min"


@pytest.mark.parametrize("date", [None, "", "yesterday"])
def test_without_a_date_header_the_clients_clock_stands_in_and_says_so(date: str | None) -> None:
    age = replica_age("baseline", VLLM_METRICS, date, client_now_s=STARTED_S + 42)
    assert (age.age_s, age.clock) == (42.0, "client")


def test_an_age_that_cannot_be_read_is_none_with_the_reason_never_zero() -> None:
    missing = replica_age("baseline", MULTIPROCESS_METRICS, formatdate(STARTED_S, usegmt=True), STARTED_S)
    assert (missing.age_s, missing.started_at_s, missing.clock, missing.note) == (None, None, None, NO_START_TIME)
    unread = replica_age("twin", None, None, STARTED_S, "GET /metrics answered 404")
    assert unread.age_s is None and unread.note == "GET /metrics answered 404"
    assert unread.describe() == "twin's age unknown (GET /metrics answered 404)"


@pytest.mark.parametrize(("seconds", "text"), [(42.4, "42 s"), (660, "11 min"), (5 * 3600 + 12 * 60, "5 h 12 min"),
                                               (DAYS_3_HOURS_2_S + 59, "3 d 2 h")])
def test_ages_read_as_people_say_them(seconds: float, text: str) -> None:
    assert age_text(seconds) == text


def test_replicas_apart_in_age_are_not_covered_and_say_by_how_much() -> None:
    apart = age_coverage([aged("baseline", DAYS_3_HOURS_2_S), aged("candidate", 660)], DEFAULT_MAX_AGE_GAP_S)
    assert not apart.covered and not apart.twin and apart.age_gap_s == DAYS_3_HOURS_2_S - 660
    assert apart.reason == ("server ages differ: baseline up 3 d 2 h, candidate up 11 min, more than --max-age-gap 30m "
                            "apart; the sweep's noise covers servers of like age, not this difference (a fresh "
                            "--baseline-twin beside them would measure it)")


def test_the_tolerance_is_inclusive_and_either_side_may_be_older() -> None:
    for base, cand in ((60, 1860), (1860, 60)):
        ages = [aged("baseline", base), aged("candidate", cand)]
        assert age_coverage(ages, 1800).covered and not age_coverage(ages, 1799).covered


def test_an_age_that_cannot_be_read_leaves_the_comparison_not_covered() -> None:
    unknown = age_coverage([aged("baseline", DAYS_3_HOURS_2_S), aged("candidate", None, NO_START_TIME)], 1800)
    assert not unknown.covered and unknown.age_gap_s is None
    assert unknown.reason is not None and unknown.reason.startswith(
        f"server ages unknown: candidate's age unknown ({NO_START_TIME})")


def test_with_a_twin_the_candidate_is_compared_with_the_twin() -> None:
    """The long-running baseline's age no longer matters; the twin's does."""
    fresh = age_coverage([aged("baseline", DAYS_3_HOURS_2_S), aged("candidate", 660), aged("twin", 720)], 1800)
    assert fresh.covered and fresh.twin and fresh.age_gap_s == 60 and fresh.reason is None
    old_twin = age_coverage([aged("baseline", 600), aged("candidate", 660), aged("twin", DAYS_3_HOURS_2_S)], 1800)
    assert not old_twin.covered and old_twin.reason is not None
    assert old_twin.reason.startswith("server ages differ: twin up 3 d 2 h, candidate up 11 min")
    assert "--baseline-twin beside them" not in old_twin.reason
    unknown_twin = age_coverage([aged("baseline", 600), aged("candidate", 660), aged("twin", None, "no answer")], 1800)
    assert not unknown_twin.covered and "twin's age unknown (no answer)" in (unknown_twin.reason or "")
