"""How long each of the canary's replicas has been up: one ``/metrics`` read per replica, before
anything is measured (``specfleet.production.replica_age`` says what is made of it)."""

import time
from collections.abc import Mapping

import httpx

from specfleet.production.replica_age import Replica, ReplicaAge, replica_age
from specfleet_tasks.loadgen import ServerEndpoint

AGE_READ_TIMEOUT_S = 10.0


def read_age(replica: Replica, endpoint: ServerEndpoint, timeout_s: float = AGE_READ_TIMEOUT_S) -> ReplicaAge:
    """The replica's age from its ``/metrics`` (its ``Date`` header as 'now'); None with why when
    it cannot be read."""
    try:
        with endpoint.client(timeout_s) as client:
            response = client.get("/metrics")
    except httpx.HTTPError as err:
        return replica_age(replica, None, None, time.time(), f"GET /metrics failed ({type(err).__name__})")
    client_now_s = time.time()
    if response.status_code != 200:
        return replica_age(replica, None, None, client_now_s, f"GET /metrics answered {response.status_code}")
    return replica_age(replica, response.text, response.headers.get("date"), client_now_s)


def read_ages(replicas: Mapping[Replica, ServerEndpoint]) -> list[ReplicaAge]:
    return [read_age(replica, endpoint) for replica, endpoint in replicas.items()]
