"""The installed engine's self-checks (``specfleet.gates.engine_findings``), run before a CPU sweep in
a child process (importing vLLM is seconds) and cached per engine version, so an engine
upgrade runs them again and a fixed engine clears its finding by itself."""

import subprocess
import sys
from pathlib import Path
from typing import Literal

from specfleet.contract.fingerprint import Fingerprint
from specfleet.gates.engine_findings import (
    CPU_EXPAND,
    CPU_EXPAND_CODE,
    CPU_EXPAND_REPRODUCER,
    EngineCheck,
    cpu_expand_outcome,
)
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.store.results import atomic_write_text

CHECK_TIMEOUT_S = 300.0


def _run_cpu_expand() -> tuple[Literal["defect", "ok", "not_run"], str]:
    try:
        done = subprocess.run([sys.executable, "-c", CPU_EXPAND_CODE], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return "not_run", f"no answer within {CHECK_TIMEOUT_S:.0f} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return "not_run", f"the check exited {done.returncode}: {last[:200]}"
    return cpu_expand_outcome(done.stdout)


def engine_checks(fingerprint: Fingerprint, on_cpu: bool, cache_root: Path | None = None) -> list[EngineCheck]:
    """The checks that apply to this engine: the CPU expand on the CPU build of vLLM (a GPU
    build runs the Triton kernel, which this defect does not touch)."""
    if not on_cpu or not fingerprint.engine.startswith("vllm"):
        return []
    path = (cache_root or default_cache_root()) / "engine-checks" / \
        f"{CPU_EXPAND}-{fingerprint.engine}-{fingerprint.engine_version}.json"
    if path.is_file():
        return [EngineCheck.model_validate_json(path.read_text(encoding="utf-8"))]
    outcome, detail = _run_cpu_expand()
    check = EngineCheck(check=CPU_EXPAND, engine=fingerprint.engine, engine_version=fingerprint.engine_version,
                        outcome=outcome, detail=detail, reproducer=CPU_EXPAND_REPRODUCER)
    if outcome != "not_run":  # a check that could not run is tried again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, check.model_dump_json(indent=2))
    return [check]
