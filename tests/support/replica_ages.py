"""Replica ages for canary results built in tests."""

from specfleet.production.replica_age import DEFAULT_MAX_AGE_GAP_S, AgeCoverage, Replica, ReplicaAge, age_coverage


def aged(replica: Replica, age_s: float | None, note: str | None = None) -> ReplicaAge:
    """``replica`` up ``age_s`` seconds as its own clock read it (None: unknown, with ``note``)."""
    if age_s is None:
        return ReplicaAge(replica=replica, started_at_s=None, age_s=None, clock=None, note=note or "unknown")
    return ReplicaAge(replica=replica, started_at_s=1.8e9 - age_s, age_s=age_s, clock="replica")


def like_ages() -> AgeCoverage:
    """A baseline and a candidate both a minute old: covered."""
    return age_coverage([aged("baseline", 60.0), aged("candidate", 60.0)], DEFAULT_MAX_AGE_GAP_S)
