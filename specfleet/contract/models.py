"""Models, engine and hardware sections of the benchmark contract (seed: "Benchmark contract")."""

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from specfleet.contract.base import ContractModel

STANDIN_ENGINE_ENV = "SPECFLEET_STANDIN_ENGINE"
"""Set in the orchestrator's environment by a test of orchestration, it starts every arm on the
stand-in engine (``tasks/engine/standin.py``) instead of vLLM; no config may set it."""


def refuse_standin(env: dict[str, str]) -> dict[str, str]:
    """A config's server environment never selects the stand-in engine."""
    if STANDIN_ENGINE_ENV in env:
        raise ValueError(f"{STANDIN_ENGINE_ENV} selects the test-only stand-in engine; a config cannot set it")
    return env


class ModelRef(ContractModel):
    """A checkpoint by local path or hub id. Hashes are computed at run time, never typed in."""

    path: str = Field(min_length=1, description="Local directory or hub id.")
    revision: str | None = Field(None, description="Hub revision or commit.")
    tokenizer: str | None = Field(None, description="Tokenizer path; defaults to the model path.")
    quantization: str | None = Field(None, description="vLLM --quantization value, if any.")
    dtype: str = Field("auto", description="vLLM --dtype.")

    @property
    def tokenizer_path(self) -> str:
        return self.tokenizer or self.path


class ModelsSpec(ContractModel):
    target: ModelRef
    draft: ModelRef | None = Field(
        None, description="Default draft or speculator for arms that need one and name none."
    )


class EngineSpec(ContractModel):
    """How each arm's vLLM server is started. Version is detected at run time."""

    name: Literal["vllm"] = "vllm"
    host: str = Field("127.0.0.1", description="Bind address of arm servers.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key (never the key)."
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra server CLI arguments.")
    ca_bundle: str | None = Field(
        None, description="PEM CA bundle the sweep's clients verify the arm servers' certificates with, when "
        "extra_args makes them serve HTTPS (--ssl-certfile, --ssl-keyfile); unset: the system store."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra server environment.")
    max_model_len: PositiveInt | None = None
    max_num_seqs: PositiveInt | None = None
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Fraction of device memory; on CPU, of host memory."
    )
    cpu_kvcache_space_gib: PositiveInt | None = Field(
        None, description="VLLM_CPU_KVCACHE_SPACE for the CPU build."
    )
    startup_timeout_s: PositiveFloat = 600.0
    stop_grace_s: PositiveFloat = 20.0
    max_restarts: NonNegativeInt = Field(
        1, description="Restarts of an arm's server that died mid-sweep, for the arm's remaining cells."
    )

    _no_standin = field_validator("env")(refuse_standin)


class HardwareSpec(ContractModel):
    """Hardware and money: the inputs of the whole-replica cost (seed: "Results template and calculator")."""

    accelerator: str = Field(min_length=1, description="e.g. 'NVIDIA H200' or 'cpu'.")
    accelerators_per_replica: PositiveInt = 1
    tensor_parallel_size: PositiveInt = 1
    interconnect: str | None = None
    nodes: PositiveInt = Field(
        1, description="Nodes the sweep holds (the layout: the plan's, and the baseline replicas; not fingerprinted)."
    )
    accelerators_per_node: PositiveInt | None = Field(
        None, description="Accelerators per node; unset: one arm's worth (tensor_parallel_size). Sets with nodes how "
        "many arms and baseline replicas run at once. Not fingerprinted."
    )
    memory_bandwidth_gb_per_s: PositiveFloat | None = Field(
        None, description="The prior's memory bandwidth per accelerator; unset: the built-in table, or on "
        "cpu measured when planning."
    )
    peak_tflops: PositiveFloat | None = Field(
        None, description="The prior's dense peak per accelerator; unset: the built-in table, or measured on cpu."
    )
    accelerator_hour_usd: PositiveFloat = Field(description="Fully loaded price per accelerator-hour.")
    peak_demand_tokens_per_s: PositiveFloat = Field(
        description="Peak demand in SLO-qualified output tokens per second."
    )
    price_is_illustrative: bool = Field(
        False, description="True when the price is not the organization's real rate."
    )

    @property
    def on_cpu(self) -> bool:
        """The CPU build of vLLM: arms take whole nodes, the engine's CPU self-checks apply."""
        return self.accelerator.strip().lower() == "cpu"
