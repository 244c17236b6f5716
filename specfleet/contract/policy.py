"""The k policy as an arm of the sweep: measured on its own server, not composed from fixed-k cells."""

from typing import Literal

from pydantic import Field, StrictBool

from specfleet.contract.base import ContractModel


class PolicySpec(ContractModel):
    """After the fixed-k arms and before the closing baseline, start one server per speculative
    method with the k policy the sweep derived from them (vLLM's
    ``num_speculative_tokens_per_batch_size``) and measure it on every class and load of the
    traffic mix, decided on like any arm (docs/measurement.md, "The measured k policy")."""

    measure: StrictBool = Field(False, description="Measure the derived k policy on its own server.")
    rule: Literal["specfleet", "vllm#49163"] = Field(
        "specfleet", description="Whose all-classes policy is measured: specfleet's (a k only where every decision "
        "at its levels adopted it) or the peer rule of vLLM's proposed tuner (vllm-project/vllm#49163: median "
        "throughput less its MAD over at least three repeats per level and k, no cost, interval or gate), which the "
        "sweep then decides on like any arm.")
    peer_max_relative_mad: float = Field(
        0.1, gt=0.0, le=1.0, description="The peer rule's refusal: it derives no policy where a level and k's runs "
        "spread by more than this relative MAD (vllm#49163's default 0.1). On a small shared host three short runs "
        "can spread past it; raise it there rather than read a refusal as a result.")
    sampling: str | None = Field(
        None, description="The sampling whose policy is measured (a k policy is derived per sampling); unset: the "
        "first of the config's sampling list.")
