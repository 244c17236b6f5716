"""A GPU arm's tensor-parallel group runs on one Ray node: a cluster without a node that holds it,
or with smaller nodes than the plan's layout, exits 2 naming the field before any server starts."""

from pathlib import Path

import pytest

from specfleet.contract import parse_sweep_config
from specfleet.errors import InputError
from specfleet_tasks.cluster.session import check_gpu_nodes

ROOT = Path(__file__).resolve().parents[4]
GPU = parse_sweep_config((ROOT / "configs" / "llama70b-h200.yaml").read_text(), "gpu")


def test_a_node_holding_the_layout_passes() -> None:
    check_gpu_nodes(GPU, [8.0, 0.0])


def test_gpus_spread_over_nodes_cannot_hold_a_tensor_parallel_group() -> None:
    with pytest.raises(InputError, match=r"^hardware.tensor_parallel_size 2: no Ray node has that many GPUs "
                                         r"\(the largest has 1;"):
        check_gpu_nodes(GPU, [1.0, 1.0, 1.0, 1.0])


def test_smaller_nodes_than_the_plan_assumes_name_accelerators_per_node() -> None:
    with pytest.raises(InputError, match=r"^hardware.accelerators_per_node 8: the largest Ray node has 4 GPUs"):
        check_gpu_nodes(GPU, [4.0, 4.0])
