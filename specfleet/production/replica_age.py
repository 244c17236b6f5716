"""Like with like: the canary's replicas' ages, and whether its noise estimate covers them.

The noise a canary's intervals carry comes from the sweep given with ``--from``: baseline cells on
server lives minutes old. In production the baseline is a long-running replica and the candidate
is freshly started, and server lives of different ages can differ by more than that noise (a
fresh twin once read 1.16x [1.08, 1.24] faster than a long-running baseline of the same
configuration, here). So the throughput and ITL claims are covered only when the two servers
compared are of like age: both ages read, and apart by at most the declared tolerance
(``--max-age-gap``). Otherwise they are shown but neither promote nor roll back. A fresh baseline
twin (``--baseline-twin``) measured beside the other two restores like with like: the candidate is
compared with the twin, and the long-running baseline against the twin is the age difference,
measured.

A replica's age is its server's time (the ``Date`` header of its ``/metrics`` answer) less its
process start (``process_start_time_seconds``), both on its own clock; without a ``Date`` header,
the client's clock stands in, and the age then assumes the two clocks agree (``clock``).
"""

from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet.contract.durations import format_duration
from specfleet.measure.telemetry import process_start_time_s

Replica = Literal["baseline", "candidate", "twin"]
DEFAULT_MAX_AGE_GAP_S = 1800
"""30 minutes: a sweep's baseline server lives, which its noise comes from, are minutes to tens of
minutes old when measured; two replicas further apart in age are beyond what that noise has seen."""
NO_START_TIME = ("its /metrics has no process_start_time_seconds (vLLM with several API servers runs "
                 "Prometheus in multiprocess mode, which drops the process metrics)")


class ReplicaAge(RecordModel):
    """How long one replica's server had been up when the canary started; None with the reason."""

    replica: Replica
    started_at_s: float | None = Field(description="Its process start, Unix seconds on its own clock.")
    age_s: float | None
    clock: Literal["replica", "client"] | None = Field(
        description="Whose 'now' the age is read against: the replica's (its Date header) or, without one, "
        "the client's (then the age assumes the two clocks agree).")
    note: str | None = Field(None, description="Why the age could not be read.")

    def describe(self) -> str:
        return f"{self.replica} up {age_text(self.age_s)}" if self.age_s is not None else (
            f"{self.replica}'s age unknown ({self.note})")


class AgeCoverage(RecordModel):
    """The replicas' ages, and whether the candidate's comparison is of like age (``covered``)."""

    ages: list[ReplicaAge]
    twin: bool = Field(description="A fresh baseline twin was measured: the candidate is compared with it, and "
                       "the long-running baseline against it is the age difference, measured.")
    age_gap_s: float | None = Field(description="The candidate's age against the replica it is compared with "
                                    "(the twin, else the baseline); None when an age is unknown.")
    max_age_gap_s: float = Field(description="The tolerance (--max-age-gap): replicas this close in age are "
                                 "taken as alike, as the sweep's noise estimate covers them.")
    covered: bool = Field(description="The throughput and ITL claims may promote or roll back.")
    reason: str | None = Field(description="Why they may not; None when covered.")


def age_text(seconds: float) -> str:
    """``3 d 2 h``, ``5 h 12 min``, ``11 min``, ``42 s``: a server's uptime as people say it."""
    whole = round(seconds)
    days, hours, minutes = whole // 86_400, whole % 86_400 // 3600, whole % 3600 // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{whole} s"


def replica_age(replica: Replica, metrics_text: str | None, date_header: str | None, client_now_s: float,
                why_no_metrics: str = "its /metrics could not be read") -> ReplicaAge:
    """The replica's age from one ``/metrics`` answer (its body and ``Date`` header), or None with why."""
    started = None if metrics_text is None else process_start_time_s(metrics_text)
    if started is None:
        return ReplicaAge(replica=replica, started_at_s=None, age_s=None, clock=None,
                          note=why_no_metrics if metrics_text is None else NO_START_TIME)
    now, clock = _server_now_s(date_header), "replica"
    if now is None:
        now, clock = client_now_s, "client"
    return ReplicaAge(replica=replica, started_at_s=started, age_s=max(now - started, 0.0), clock=clock)


def _server_now_s(date_header: str | None) -> float | None:
    if not date_header:
        return None
    try:
        return parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError):
        return None


def age_coverage(ages: Sequence[ReplicaAge], max_age_gap_s: float) -> AgeCoverage:
    """Covered when the candidate and the replica it is compared with (the twin where one was
    measured, else the baseline) both have an age, and those differ by at most ``max_age_gap_s``."""
    by_replica = {age.replica: age for age in ages}
    twin = "twin" in by_replica
    reference, candidate = by_replica["twin" if twin else "baseline"], by_replica["candidate"]
    unknown = [age for age in (reference, candidate) if age.age_s is None]
    gap = None if unknown or reference.age_s is None or candidate.age_s is None else abs(
        candidate.age_s - reference.age_s)
    reason = None
    if unknown:
        reason = (f"server ages unknown: {'; '.join(a.describe() for a in unknown)}; the sweep's noise covers "
                  "servers of like age, and whether these are cannot be told")
    elif gap is not None and gap > max_age_gap_s:
        reason = (f"server ages differ: {reference.describe()}, {candidate.describe()}, more than --max-age-gap "
                  f"{format_duration(int(max_age_gap_s))} apart; the sweep's noise covers servers of like age, "
                  "not this difference" + ("" if twin else " (a fresh --baseline-twin beside them would measure it)"))
    return AgeCoverage(ages=list(ages), twin=twin, age_gap_s=gap, max_age_gap_s=max_age_gap_s,
                       covered=reason is None, reason=reason)
