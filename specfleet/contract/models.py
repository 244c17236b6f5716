"""Models, engine and hardware sections of the benchmark contract (seed: "Benchmark contract")."""

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, ValidationInfo, field_validator

from specfleet.contract.base import ContractModel

SPECULATIVE_CONFIG_FLAGS = ("--speculative-config", "-sc")
"""vLLM's flag for speculation (dotted forms too: ``--speculative-config.method``): each arm sets its own."""
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
    target: ModelRef = Field(description="The model every arm serves: its outputs are what the sweep measures.")
    draft: ModelRef | None = Field(
        None, description="Default draft or speculator for arms that need one and name none."
    )


class EngineSpec(ContractModel):
    """How each arm's vLLM server is started. Version is detected at run time."""

    name: Literal["vllm"] = Field("vllm", description="The serving engine; vLLM is the one supported.")
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
    max_model_len: PositiveInt | None = Field(None, description="vLLM --max-model-len; unset: the model's own.")
    max_num_seqs: PositiveInt | None = Field(
        None, description="vLLM --max-num-seqs, the most sequences in one step; unset: vLLM's default (256).")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Fraction of device memory; on CPU, of host memory."
    )
    cpu_kvcache_space_gib: PositiveInt | None = Field(
        None, description="VLLM_CPU_KVCACHE_SPACE for the CPU build."
    )
    startup_timeout_s: PositiveFloat = Field(
        600.0, description="How long a server may take to answer /health before its arm fails with the server's own "
        "first error.")
    stop_grace_s: PositiveFloat = Field(
        20.0, description="Seconds a stopping server gets after SIGTERM before it is killed.")
    max_restarts: NonNegativeInt = Field(
        1, description="Restarts of an arm's server that died mid-sweep, for the arm's remaining cells."
    )

    @field_validator("extra_args")
    @classmethod
    def _no_speculation(cls, args: list[str]) -> list[str]:
        """Speculation in the engine's arguments would override every arm's, the baseline's too, and
        could turn on synthetic acceptance unlabelled."""
        for arg in args:
            flag = arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
            if flag in SPECULATIVE_CONFIG_FLAGS:
                raise ValueError(f"{arg.split('=', 1)[0]} would override every arm's speculation (the baseline's "
                                 "too): set speculation in arms")
        return args

    _no_standin = field_validator("env")(refuse_standin)


class HardwareSpec(ContractModel):
    """Hardware and money: the inputs of the whole-replica cost (seed: "Results template and calculator")."""

    accelerator: str = Field(min_length=1, description="e.g. 'NVIDIA H200' or 'cpu'.")
    accelerators_per_replica: PositiveInt = Field(
        1, description="Accelerators one serving replica occupies: what a replica costs per hour.")
    tensor_parallel_size: PositiveInt = Field(
        1, description="vLLM --tensor-parallel-size, at most accelerators_per_replica; each arm asks Ray for that "
        "many GPUs.")
    interconnect: str | None = Field(None, description="The accelerators' interconnect (e.g. NVLink), a label.")
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
        return _is_cpu(self.accelerator)

    @field_validator("tensor_parallel_size")
    @classmethod
    def _one_group_per_replica(cls, tp: int, info: ValidationInfo) -> int:
        """A replica is one tensor-parallel group: the server shards over ``tp`` accelerators
        (``--tensor-parallel-size``), Ray reserves that many and the cost charges
        ``accelerators_per_replica``, so on accelerators the two are the same number."""
        per_replica = info.data.get("accelerators_per_replica")
        if per_replica is None:
            return tp
        if tp > per_replica:
            raise ValueError(f"exceeds accelerators_per_replica {per_replica}")
        if tp != per_replica and not _is_cpu(info.data.get("accelerator")):
            raise ValueError(f"differs from accelerators_per_replica {per_replica}: a replica's server shards over "
                             "exactly the accelerators its cost charges (set both to the same number)")
        return tp

    @field_validator("accelerators_per_node")
    @classmethod
    def _groups_fill_the_node(cls, per_node: int | None, info: ValidationInfo) -> int | None:
        """Each arm takes one tensor-parallel group of a node; a group never spans nodes."""
        tp = info.data.get("tensor_parallel_size")
        if per_node is None or tp is None or _is_cpu(info.data.get("accelerator")):
            return per_node
        if tp > per_node:
            raise ValueError(f"fewer than tensor_parallel_size {tp}: an arm's server runs on one node")
        if per_node % tp:
            raise ValueError(f"not a multiple of tensor_parallel_size {tp}: the node's accelerators "
                             f"split into tensor-parallel groups of {tp}, one arm each")
        return per_node


def _is_cpu(accelerator: object) -> bool:
    return isinstance(accelerator, str) and accelerator.strip().lower() == "cpu"
