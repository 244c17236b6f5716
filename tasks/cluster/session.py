"""The Ray session: local Ray, or the cluster at ``RAY_ADDRESS``, and what each arm asks of it."""

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray

from specfleet.contract import SweepConfig
from specfleet.errors import InputError

ARM_RESOURCE = "specfleet_arm"
"""Custom resource, one per CPU node: CPU arms never share a machine's cores."""


@contextmanager
def ray_session(config: SweepConfig) -> Iterator[dict[str, Any]]:
    """Local Ray unless ``RAY_ADDRESS`` names a cluster; yields each arm's resource request
    and always shuts Ray down (its workers stop their servers on SIGTERM)."""
    quiet: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    if os.environ.get("RAY_ADDRESS"):
        _connect(quiet)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, resources={ARM_RESOURCE: 1} if config.hardware.on_cpu else None, **quiet)
    try:
        yield arm_resources(config)
    finally:
        ray.shutdown()


def _connect(options: dict[str, Any], attempts: int = 3, backoff_s: float = 5.0) -> None:
    """Join the cluster at ``RAY_ADDRESS``. Through the Ray client (``ray://``) the head starts a
    server process per driver, which can miss its start-up deadline on a loaded head: retry."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(**options)
            return
        except ConnectionAbortedError:
            if attempt == attempts:
                raise
            time.sleep(backoff_s * attempt)


def arm_resources(config: SweepConfig) -> dict[str, Any]:
    """GPU arms ask for their tensor-parallel degree; a CPU arm takes a whole node's cores."""
    if not config.hardware.on_cpu:
        gpus = config.hardware.tensor_parallel_size
        check_gpu_nodes(config, [node["Resources"].get("GPU", 0.0) for node in ray.nodes()  # type: ignore[no-untyped-call]
                                 if node["Alive"]])
        return {"num_gpus": gpus, "num_cpus": 1}
    cores = [node["Resources"].get("CPU", 1.0) for node in ray.nodes()  # type: ignore[no-untyped-call]
             if node["Alive"] and ARM_RESOURCE in node["Resources"]]
    if not cores:
        raise InputError(f"the Ray cluster has no {ARM_RESOURCE!r} resource: start each CPU node with "
                         f"--resources '{{\"{ARM_RESOURCE}\": 1}}'")
    return {"num_cpus": min(cores), "resources": {ARM_RESOURCE: 1}}


def check_gpu_nodes(config: SweepConfig, gpus_per_node: list[float]) -> None:
    """An arm's tensor-parallel group runs on one node (a Ray task's GPUs never span nodes): some
    node must hold ``hardware.tensor_parallel_size`` GPUs, and the nodes the plan's layout
    assumes (``hardware.accelerators_per_node``) must be there."""
    hw = config.hardware
    tp = hw.tensor_parallel_size
    fitting = [count for count in gpus_per_node if count >= tp]
    if not fitting:
        largest = max(gpus_per_node, default=0.0)
        raise InputError(f"hardware.tensor_parallel_size {tp}: no Ray node has that many GPUs (the largest has "
                         f"{largest:g}; hardware.accelerator is {hw.accelerator!r}; use 'cpu' for the CPU build)")
    if hw.accelerators_per_node is not None and max(fitting) < hw.accelerators_per_node:
        raise InputError(f"hardware.accelerators_per_node {hw.accelerators_per_node}: the largest Ray node has "
                         f"{max(fitting):g} GPUs, so fewer arms would run at once than the plan assumes")
