"""The cost formula: cost per million SLO-qualified tokens on whole replicas, and the KV-cache
capacity that sets how many sequences a replica holds (seed: "Results template and calculator",
"Memory is paid twice").

Units: throughput in SLO-qualified output tokens per second, prices in USD per GPU-hour,
memory in GB = 1e9 bytes and KiB = 1024 bytes.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

from specfleet.contract.models import HardwareSpec
from specfleet.errors import InputError

GB_BYTES = 1_000_000_000
KIB_BYTES = 1024
SECONDS_PER_HOUR = 3600
TOKENS_PER_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class FleetCost:
    """Cost of serving ``served_tokens_per_s`` on whole replicas sized for peak demand."""

    replicas: int
    ideal_replicas: float
    gpus: int
    fleet_usd_per_hour: float
    capacity_tokens_per_s: float
    served_tokens_per_s: float
    cost_per_million_usd: float
    ideal_cost_per_million_usd: float


@dataclass(frozen=True, slots=True)
class KVCapacity:
    """Tokens the KV pool holds, with and without a draft's weights and per-token KV."""

    tokens: int
    tokens_with_draft: int | None
    capacity_loss: float | None


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"{name} must be a positive finite number (got {value!r})")


def _exact(value: float) -> Fraction:
    # The decimal the number reads as (str round-trips floats), so 20000 / 3125 is exactly 6.4
    # and an exact multiple never rounds up on binary noise.
    return Fraction(str(value))


def whole_replicas(demand_tokens_per_s: float, qualified_tokens_per_s_per_replica: float) -> int:
    """ceil(demand / per-replica throughput), computed on the decimal values exactly."""
    _positive("demand tokens per s", demand_tokens_per_s)
    _positive("qualified tokens per s per replica", qualified_tokens_per_s_per_replica)
    return math.ceil(_exact(demand_tokens_per_s) / _exact(qualified_tokens_per_s_per_replica))


def break_even_speedup(demand_tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    """The smallest speedup over the baseline that serves the demand on fewer whole replicas
    (replicas = ceil(demand / throughput)); infinite where the baseline needs one replica, so
    none can be saved. A hair above the exact ratio, so that the speedup itself saves."""
    replicas = whole_replicas(demand_tokens_per_s, baseline_tokens_per_s)
    if replicas <= 1:
        return math.inf
    return demand_tokens_per_s / ((replicas - 1) * baseline_tokens_per_s) * (1.0 + 1e-12)


def fleet_cost(
    gpus_per_replica: int,
    gpu_hour_usd: float,
    qualified_tokens_per_s_per_replica: float,
    demand_tokens_per_s: float,
    served_tokens_per_s: float | None = None,
) -> FleetCost:
    """The seed's calculator: replicas = ceil(demand / per-replica), fleet USD per hour =
    replicas x GPUs x price, cost per million = fleet USD per hour x 1e6 / (3600 x served).

    ``served`` defaults to demand. The ideal figure uses the unrounded replica count.
    Capacity is at least demand by construction, so served <= demand bounds both.
    """
    if not (isinstance(gpus_per_replica, int) and gpus_per_replica > 0):
        raise InputError(f"GPUs per replica must be a positive integer (got {gpus_per_replica!r})")
    _positive("GPU-hour price (USD)", gpu_hour_usd)
    replicas = whole_replicas(demand_tokens_per_s, qualified_tokens_per_s_per_replica)
    served = demand_tokens_per_s if served_tokens_per_s is None else served_tokens_per_s
    _positive("served tokens per s", served)
    if served > demand_tokens_per_s:
        raise InputError(
            f"served tokens per s {served!r} exceeds demand {demand_tokens_per_s!r} (and so capacity)"
        )
    ideal = demand_tokens_per_s / qualified_tokens_per_s_per_replica
    usd_per_replica_hour = gpus_per_replica * gpu_hour_usd
    per_served = TOKENS_PER_MILLION / (SECONDS_PER_HOUR * served)
    return FleetCost(
        replicas=replicas,
        ideal_replicas=ideal,
        gpus=replicas * gpus_per_replica,
        fleet_usd_per_hour=replicas * usd_per_replica_hour,
        capacity_tokens_per_s=float(replicas * qualified_tokens_per_s_per_replica),
        served_tokens_per_s=served,
        cost_per_million_usd=replicas * usd_per_replica_hour * per_served,
        ideal_cost_per_million_usd=ideal * usd_per_replica_hour * per_served,
    )


def hardware_fleet_cost(hardware: HardwareSpec, qualified_tokens_per_s_per_replica: float,
                        served_tokens_per_s: float | None = None) -> FleetCost:
    """``fleet_cost`` on the config's ``hardware`` block: its accelerators per replica, price per
    accelerator-hour and peak demand (the one adapter from the contract to the formula)."""
    return fleet_cost(hardware.accelerators_per_replica, hardware.accelerator_hour_usd,
                      qualified_tokens_per_s_per_replica, hardware.peak_demand_tokens_per_s, served_tokens_per_s)


def kv_tokens(kv_memory_gb: float, kib_per_token: float) -> int:
    """Whole tokens a KV pool of ``kv_memory_gb`` holds at ``kib_per_token``."""
    _positive("KV memory (GB)", kv_memory_gb)
    _positive("KiB per token", kib_per_token)
    return math.floor(_exact(kv_memory_gb) * GB_BYTES / (_exact(kib_per_token) * KIB_BYTES))


def kv_capacity(
    kv_memory_gb: float,
    kib_per_token: float,
    draft_weights_gb: float | None = None,
    kib_per_token_with_draft: float | None = None,
) -> KVCapacity:
    """Seed check: 65 GB at 320 KiB holds ~198,000 tokens; with a 2.5 GB draft, 62.5 GB at
    352 KiB holds ~173,000, a 12.6% loss. Without either draft input, no draft figures."""
    tokens = kv_tokens(kv_memory_gb, kib_per_token)
    if draft_weights_gb is None and kib_per_token_with_draft is None:
        return KVCapacity(tokens, None, None)
    weights = 0.0 if draft_weights_gb is None else draft_weights_gb
    if not (weights >= 0 and math.isfinite(weights)):
        raise InputError(f"draft weights (GB) must be >= 0 (got {draft_weights_gb!r})")
    if weights >= kv_memory_gb:
        raise InputError(f"draft weights {weights!r} GB leave no KV memory out of {kv_memory_gb!r} GB")
    per_token = kib_per_token if kib_per_token_with_draft is None else kib_per_token_with_draft
    remaining = float(_exact(kv_memory_gb) - _exact(weights))
    with_draft = kv_tokens(remaining, per_token)
    loss = 1.0 - (remaining / per_token) / (kv_memory_gb / kib_per_token)
    return KVCapacity(tokens, with_draft, loss)
