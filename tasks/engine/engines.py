"""The engine an arm's server runs: vLLM in every real run. A test of orchestration (retries, lost
nodes, deployments, signals, resume, budgets) may start its arms on the stand-in engine
(``tasks/engine/standin.py``) by setting ``STANDIN_ENGINE_ENV`` in the orchestrator's environment,
which Ray workers and CLI processes inherit; no config can select it (the contract refuses the
variable in ``engine.env`` and an arm's ``env``)."""

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from specfleet.contract.models import STANDIN_ENGINE_ENV
from specfleet.contract.server_args import SERVER_MODULE

STANDIN_DISTRIBUTION = "specfleet-standin"
"""The name results record for the stand-in engine, in place of vLLM's distribution."""


class ServerEngine(Protocol):
    """How an arm's server process is started: the command for vLLM's server arguments."""

    @property
    def label(self) -> str:
        """How messages name the server ("vLLM server")."""
        ...

    @property
    def module(self) -> str:
        """The Python module the server runs (what a start-up's import costs)."""
        ...

    def command(self, args: Sequence[str]) -> list[str]:
        """The server's command line for ``args`` (the arguments after vLLM's server module)."""
        ...


@dataclass(frozen=True)
class ModuleEngine:
    """A server run as ``python -m module ARGS`` with this interpreter."""

    module: str
    label: str

    def command(self, args: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", self.module, *args]


VLLM = ModuleEngine(SERVER_MODULE, "vLLM server")
STANDIN = ModuleEngine("specfleet_tasks.engine.standin", "stand-in engine (not vLLM)")


def standin_selected() -> bool:
    return bool(os.environ.get(STANDIN_ENGINE_ENV))


def arm_engine() -> ServerEngine:
    """vLLM, unless a test selected the stand-in for this process and its children."""
    return STANDIN if standin_selected() else VLLM
