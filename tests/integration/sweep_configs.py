"""Sweep configs for tests: the demo config cut down, with test servers' engine settings."""

from pathlib import Path

import yaml

from specfleet.contract.models import STANDIN_ENGINE_ENV, EngineSpec

ROOT = Path(__file__).resolve().parents[2]

# Servers in tests start in about half the time (docs/testing.md has the figures): eager (no
# torch.compile and its C++ build) and one engine process fewer (no separate worker process to
# import torch and vLLM again). What a test asserts does not depend on either; `make demo` and
# real sweeps keep vLLM's defaults.
TEST_ENGINE_ARGS = ["--enforce-eager"]
TEST_ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def fast_start(engine: EngineSpec) -> EngineSpec:
    """``engine`` with the test servers' arguments and environment added."""
    return engine.model_copy(update={"extra_args": [*engine.extra_args, *TEST_ENGINE_ARGS],
                                     "env": engine.env | TEST_ENGINE_ENV})


def standin_env(step_ms: float = 100.0, acceptance: float = 0.7) -> dict[str, str]:
    """The environment that starts a sweep's arms on the stand-in engine (``tasks/engine/standin.py``):
    for tests of orchestration, whose checks do not depend on what vLLM measures. A step of
    ``step_ms`` (100 ms by default) keeps every cell seconds long, the margin a test that acts
    while a cell runs (a signal, a killed node) has over its 0.2-0.3 s polls."""
    return {STANDIN_ENGINE_ENV: f"step_ms={step_ms:g},acceptance={acceptance:g}"}


BASELINE_ARM: dict[str, object] = {"name": "baseline", "method": "baseline"}
NGRAM_ARM = {"name": "ngram", "method": "ngram", "k": [3], "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def tiny_sweep_config(path: Path, name: str, arms: list[dict[str, object]], requests: int = 4,
                      warmup: int = 0, max_tokens: int = 16, concurrency: list[int] | None = None,
                      draft: Path | None = None, api_key_env: str | None = None, **sections: object) -> Path:
    """The demo config cut to one prompt class at concurrency 1 and greedy probes only (no
    stochastic one), on the small fixture target (the demo's wide one decodes about eight times
    slower here), and without the demo's traffic block (its classes and loads are cut), for
    sweeps in tests; ``sections`` replace whole top-level sections.
    Its servers start as test servers do (``TEST_ENGINE_ARGS``, ``TEST_ENGINE_ENV``)."""
    data = yaml.safe_load((ROOT / "configs" / "demo-cpu.yaml").read_text())
    data.pop("traffic", None)
    data["models"]["target"]["path"] = "fixture:target"
    data |= {"name": name, "arms": arms,
             "prompt_classes": [{"name": "code", "max_output_tokens": max_tokens}],
             "equivalence": {"prompt_class": "code", "prompts": 2, "greedy_max_tokens": 8}}
    data["load"] |= {"concurrency": concurrency or [1], "requests_per_cell": requests, "warmup_requests": warmup}
    data["engine"]["extra_args"] = list(TEST_ENGINE_ARGS)
    data["engine"]["env"] = data["engine"].get("env", {}) | TEST_ENGINE_ENV
    if draft is not None:
        data["models"]["draft"]["path"] = str(draft)
    if api_key_env is not None:
        data["engine"]["api_key_env"] = api_key_env
    data |= sections
    path.write_text(yaml.safe_dump(data))
    return path
