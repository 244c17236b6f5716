"""The installed engine's ``SpeculativeConfig``: each field's JSON schema, the methods it names and
whether the ``suffix`` method's package is installed, read in a child process (importing vLLM is
seconds) once per engine version and cached, so an upgrade reads it again. An arm's
``speculative_extra`` is checked against it before any server starts (``specfleet_tasks.plan.engine_support``)."""

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from pydantic import Field

from specfleet.contract.base import RecordModel
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.store.results import atomic_write_text

READ_TIMEOUT_S = 300.0

_READER = r"""
import dataclasses, importlib.util, json, typing
from pydantic import TypeAdapter
from vllm.config import SpeculativeConfig

def schema(annotation):
    try:
        return TypeAdapter(annotation).json_schema()
    except Exception:
        return None  # a config object (ModelConfig, ...): not a value a config file can give

fields = {f.name: schema(f.type) for f in dataclasses.fields(SpeculativeConfig) if f.init}
method = typing.get_type_hints(SpeculativeConfig).get("method")
methods = sorted({a for arg in typing.get_args(method) for a in (typing.get_args(arg) or (arg,))
                  if isinstance(a, str)})
suffix = importlib.util.find_spec("arctic_inference") is not None
from vllm.triton_utils import HAS_TRITON
import inspect
from vllm.config import VllmConfig
v1 = inspect.getsource(VllmConfig._get_v1_model_runner_unsupported_features)
print(json.dumps({"fields": fields, "methods": methods, "suffix_installed": suffix,
                  "model_runner_v2": bool(HAS_TRITON),
                  "adaptive_verification_on_v1": "adaptive draft verification" not in v1}))
"""


class SpeculativeFields(RecordModel):
    """What the installed engine's ``speculative_config`` takes."""

    engine: str
    version: str | None
    fields: dict[str, dict[str, object] | None] = Field(
        description="Field name to its JSON schema; None where the field holds an object no config file gives.")
    methods: list[str] = Field(description="The method names its SpeculativeConfig accepts.")
    suffix_installed: bool = Field(description="Whether arctic-inference, which the suffix method needs, is installed.")
    model_runner_v2: bool = Field(description="Whether its Model Runner V2 can run here (it needs Triton with a "
                                  "backend for this machine).")
    adaptive_verification_on_v1: bool = Field(
        description="Whether its Model Runner V1 runs enable_adaptive_verification (vLLM 0.32's refuses it).")


class UnreadableEngine(Exception):
    """The engine's SpeculativeConfig could not be read (nothing is cached)."""


def _read(engine: str, version: str | None) -> SpeculativeFields:
    try:
        done = subprocess.run([sys.executable, "-c", _READER], capture_output=True, text=True,
                              timeout=READ_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, OSError) as err:
        raise UnreadableEngine(str(err)) from err
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise UnreadableEngine(tail[0])
    return SpeculativeFields(engine=engine, version=version, **json.loads(done.stdout.strip().splitlines()[-1]))


@cache
def speculative_fields(cache_root: Path | None = None) -> SpeculativeFields:
    """The installed engine's fields, from the cache when this engine version was read before."""
    engine, version = engine_distribution()
    path = (cache_root or default_cache_root()) / "engine-features" / f"speculative-config-{engine}-{version}.json"
    if version is not None and path.is_file():
        return SpeculativeFields.model_validate_json(path.read_text(encoding="utf-8"))
    found = _read(engine, version)
    if version is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, found.model_dump_json())
    return found
