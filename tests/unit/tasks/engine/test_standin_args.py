"""The stand-in engine takes every server argument specfleet renders, as vLLM does: a flag it
refused would fail every orchestration test's server start, not the behaviour under test."""

from pathlib import Path

import pytest

from specfleet.contract import arm_plans, parse_sweep_config
from specfleet.contract.server_args import server_args
from specfleet_tasks.engine.standin import _parser

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("name", ["demo-cpu.yaml", "llama70b-h200.yaml", "llama70b-h200-nightly.yaml"])
def test_the_stand_in_parses_every_arm_of_every_shipped_config(name: str) -> None:
    config = parse_sweep_config((ROOT / "configs" / name).read_text(), name)
    for arm in arm_plans(config):
        args = server_args(config.engine, config.models.target, arm, {}, 8000, "m",
                           tensor_parallel_size=config.hardware.tensor_parallel_size)
        parsed = _parser().parse_args(args[args.index("--model"):])
        assert parsed.model == config.models.target.path and parsed.port == 8000, arm.name
        assert int(parsed.tensor_parallel_size) == config.hardware.tensor_parallel_size
