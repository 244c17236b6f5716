"""Server lives: a baseline stage's cells split over identical servers (replicas), so the
accelerators the speculative arms use later do not idle while the baseline runs; and a
speculative arm's cells split over ``analysis.arm_server_lives`` servers one after another, so
no single server life's speed stands for the whole arm.

The cells are dealt round robin (each replica gets its share of every load, class and sampling
mode) over at most one replica per cell. With two or more replicas each one opens with a
cross-replica check: the previous replica's first cell measured again (``replica_check``), at
the same point of the stage on other accelerators. The check is a baseline cell like the
others on a server life of its own, so the run-to-run noise (``specfleet.stats.variance``,
whose server part it estimates) and the baseline a decision compares against
(``specfleet.verdicts.cell``) pool it with the repeats: replica-to-replica variation enters both, as
it already enters every comparison of a speculative arm on other accelerators.
"""

from collections.abc import Sequence
from typing import Literal

from specfleet.contract import ArmPlan, CellIdentity, SweepConfig

POLICY_OPENING_LIVES = 2
"""Server lives the opening baseline is split over at least, with ``policy.measure``."""


def replica_shares(cells: Sequence[CellIdentity], replicas: int) -> list[list[CellIdentity]]:
    """``cells`` over ``replicas`` servers, in the order each measures them: one list per
    replica, a check cell first where there are two or more."""
    count = max(1, min(replicas, len(cells)))
    shares = [list(cells[i::count]) for i in range(count)]
    if count == 1:
        return shares
    return [[shares[i - 1][0].model_copy(update={"replica_check": True}), *share] for i, share in enumerate(shares)]


def server_name(arm: str, replica: int) -> str:
    """What a replica's per-server files are named after: ``baseline``, ``baseline-r1``, ..."""
    return arm if replica == 0 else f"{arm}-r{replica}"


def slots(config: SweepConfig) -> tuple[int, int]:
    """(arms that run at once, accelerators held): one arm per node on CPU; on GPUs as many
    tensor-parallel groups as the node holds."""
    hw = config.hardware
    per_node = hw.accelerators_per_node or hw.tensor_parallel_size
    held = hw.nodes * per_node
    if hw.on_cpu:
        return hw.nodes, held
    return max(1, hw.nodes * (per_node // hw.tensor_parallel_size)), held


def baseline_replicas(config: SweepConfig, phase: Literal["main", "baseline_end"]) -> int:
    """Servers a baseline stage is split over: as many as arms run at once. With ``policy.measure``
    the opening baseline runs on at least two server lives (one after the other on a single node):
    the k policy is derived before the closing baseline, and without two server lives of one
    configuration no interval states a confidence (``specfleet.stats.variance``), so no k could be
    adopted and there would be no policy to measure. ``analysis.baseline_server_lives`` raises the
    opening's lives further."""
    replicas = slots(config)[0]
    if phase != "main":
        return replicas
    least = max(POLICY_OPENING_LIVES if config.measures_policy else 1, config.analysis.baseline_server_lives or 1)
    return max(least, replicas)


def server_lives(config: SweepConfig, arm: ArmPlan, phase: Literal["main", "baseline_end"]) -> int:
    """Servers an arm's stage is split over: the baseline's replicas, or a speculative arm's
    (and a measured k policy's) ``analysis.arm_server_lives``."""
    return baseline_replicas(config, phase) if arm.is_baseline else config.analysis.arm_server_lives


def arm_shares(config: SweepConfig, arm: ArmPlan, phase: Literal["main", "baseline_end"],
               cells: Sequence[CellIdentity]) -> list[list[CellIdentity]]:
    """``cells`` of one arm's stage over its server lives, in the order each measures them."""
    return replica_shares(cells, server_lives(config, arm, phase))
