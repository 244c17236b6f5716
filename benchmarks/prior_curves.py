"""The cold-start prior's speedup against batch beside published curves whose setup it can express
(issue 32, "The prior against published curves"), whatever they show.

    .venv/bin/python -m benchmarks.prior_curves

Every figure the prior prints here is PREDICTED (``prior, not calibrated``). The prior knows no
acceptance: where a publication gives one (a mean acceptance length), the prior runs at the
constant per-position acceptance with that length; where it does not, the prior is pinned at the
curve's first point (the constant acceptance at which it reaches the published speedup there) and
the rest of the curve is the prior's. Published numbers are copied from the sources' text and
tables (never read off a plot); each source is named beside its curve. Sources found but not
expressible are listed at the end with why (docs/performance-model.md, "The prior against
published curves").
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from benchmarks.results_record import write_result
from specfleet.economics.theory import implied_alpha
from specfleet.perfmodel.architectures import KNOWN_CONFIGS
from specfleet.perfmodel.prior import (
    ACCELERATORS,
    GPU_DEFAULTS,
    PRIOR_LABEL,
    ModelShape,
    Roofline,
    acceptance_needed,
    batch_speedup,
    prior_step,
    shape_from_hf_config,
)

LLAMA2_VOCAB = 32000
CONFIGS: Mapping[str, Mapping[str, object]] = {
    **KNOWN_CONFIGS,
    # Llama 3 70B has the architecture fields of Llama 3.3 70B (KNOWN_CONFIGS)
    "meta-llama/Meta-Llama-3-70B-Instruct": KNOWN_CONFIGS["meta-llama/Llama-3.3-70B-Instruct"],
    "Qwen/Qwen3-8B": {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
                      "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "togethercomputer/LLaMA-2-7B-32K": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                                        "num_key_value_heads": 32, "intermediate_size": 11008,
                                        "vocab_size": LLAMA2_VOCAB, "tie_word_embeddings": False,
                                        "torch_dtype": "float16"},
    "TinyLlama/TinyLlama_v1.1": {"hidden_size": 2048, "num_hidden_layers": 22, "num_attention_heads": 32,
                                 "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": LLAMA2_VOCAB,
                                 "tie_word_embeddings": False, "torch_dtype": "float32"},
}
"""The ``config.json`` fields the prior reads (each model's config on Hugging Face)."""
KS = range(1, 11)


@dataclass(frozen=True)
class Curve:
    source: str
    setup: str
    accelerator: str
    tensor_parallel: int
    target: str
    method: str
    k: int
    context_tokens: float
    points: Sequence[tuple[float, float]]
    """(batch, published speedup); a relative figure is given as such in ``note``."""
    draft: str | None = None
    acceptance_length: float | None = None
    """Mean acceptance length from the publication (bonus token included), when it gives one."""
    note: str = ""


CURVES = (
    Curve("SpecDecode-Bench, 'Speculative Decoding: Performance or Illusion?' (arXiv 2601.11580; "
          "specdecode-bench.github.io): \"At batch size 1, EAGLE achieves up to 1.96x speedup on Llama-3-70B\"",
          "vLLM 0.10.1, EAGLE k=3, 4x H100 (TP4), ShareGPT-like, output 512", "nvidia h100", 4,
          "meta-llama/Meta-Llama-3-70B-Instruct", "eagle", 3, 1000.0, ((1, 1.96), (32, 1.96 * (1 - 0.140))),
          note="batch 32 is the text's relative figure: \"going from batch 1 to 32 reduces speedup ... by 14.0% "
               "on the 70B model\" (ShareGPT; the 1.96x is 'up to', dataset not named)"),
    Curve("SpecDecode-Bench (as above): \"going from batch 1 to 32 reduces speedup by 4.3% on the 8B model\"; "
          "\"By batch size 128, this drops to 1.21x for Llama-3.1-8B on GSM8K\"",
          "vLLM 0.10.1, EAGLE k=3, 1x H100", "nvidia h100", 1, "meta-llama/Llama-3.1-8B-Instruct", "eagle", 3,
          1000.0, ((128, 1.21),),
          note="only the batch-128 point is absolute; the prior's batch 1 to 32 drop is shown beside the 4.3 %"),
    Curve("SpecDecode-Bench (SGLang 0.5.9 part): chain EAGLE k=3 on Qwen3-8B/GSM8K 1.65x at batch 1, "
          "accepted length 2.25", "SGLang 0.5.9, chain EAGLE k=3, 1x H100 (TP1 assumed)", "nvidia h100", 1,
          "Qwen/Qwen3-8B", "eagle", 3, 1000.0, ((1, 1.65),), acceptance_length=2.25),
    Curve("MagicDec (arXiv 2408.11049; Infini-AI-Lab/MagicDec blog table, 8xA100)",
          "own PyTorch engine, TinyLlama-1.1B draft, prefill 8000, TP8; k 3, 3, 4 per row (k 3 here)",
          "nvidia a100", 8, "togethercomputer/LLaMA-2-7B-32K", "draft_model", 3, 8032.0,
          ((32, 1.29), (64, 1.57), (128, 1.66)), draft="TinyLlama/TinyLlama_v1.1",
          note="the draft keeps a StreamingLLM KV budget (sparse KV); the prior charges its full cache"),
    Curve("MagicDec (as above, 8xH100_SXM table)",
          "own PyTorch engine, TinyLlama-1.1B draft, prefill 8000, TP8; k 2, 3, 3 per row (k 3 here)",
          "nvidia h100", 8, "togethercomputer/LLaMA-2-7B-32K", "draft_model", 3, 8032.0,
          ((32, 1.32), (64, 1.48), (128, 1.64)), draft="TinyLlama/TinyLlama_v1.1",
          note="as above"),
    Curve("vLLM PR #16937 (developer measurement, H100, MT-Bench, batch 1): \"vanilla: 133\", \"EAGLE 3 ... K=2: "
          "220.21, speedup: 1.65x\"", "vLLM, EAGLE-3 k=2, 1x H100", "nvidia h100", 1,
          "meta-llama/Llama-3.1-8B-Instruct", "eagle3", 2, 1000.0, ((1, 1.65),)),
)
NOT_EXPRESSIBLE = (
    ("vLLM blog 2024-10-17, 'How Speculative Decoding Boosts vLLM Performance by up to 2.8x' (Llama3-70B, 4xH100, "
     "Qwama-0.5B draft 1.5x and ngram 2.8x at QPS 1, slowdowns at high QPS)", "k not stated, the high QPS not "
     "stated, the axis a request rate; the draft's config.json is not in the prior's table"),
    ("SGLang/LMSYS MTP on DeepSeek-V3 (H200)", "MoE with MLA attention, expert parallelism, disaggregated "
     "prefill; the two points are different clusters"),
    ("TensorRT-LLM tech blog 7, ngram (8x B200, Llama-4-Scout)", "B200 is not in the prior's accelerators; MoE"),
    ("vLLM blog, EAGLE 3.1 (GB200, Kimi-K2.6 NVFP4)", "GB200; MoE/MLA; NVFP4; k not stated"),
    ("Red Hat, speculative decoding for gpt-oss (H200)", "MoE with MXFP4 weights; per-point numbers not readable"),
    ("GPUStack, Qwen3-8B on H100", "the batch table mixes engine, FP8 and tree speculation"),
    ("EAGLE-3 paper (1.38x at batch 64 in SGLang)", "tree drafting by default, k not stated; the batch table was "
     "not readable"),
)


def _shape(name: str) -> ModelShape:
    cfg = CONFIGS[name]
    return shape_from_hf_config(cfg, str(cfg.get("torch_dtype", "bfloat16")), None, name)


def curve_rows(curve: Curve) -> tuple[str, list[tuple[float, float | None, float]]]:
    """How the prior's acceptance was set, and (batch, published speedup or None, the prior's) per batch."""
    accel = ACCELERATORS[curve.accelerator]
    target = _shape(curve.target)
    draft = _shape(curve.draft) if curve.draft else None
    hw = Roofline(accel.memory_bandwidth_gb_per_s, accel.peak_tflops(target.weight_bytes_per_param),
                  curve.tensor_parallel, GPU_DEFAULTS, accel.source)
    base = prior_step(target, None, "baseline", 0, hw)
    spec = prior_step(target, draft, curve.method, curve.k, hw)
    first_batch, first_speedup = curve.points[0]
    if curve.acceptance_length is not None:
        alpha = implied_alpha(curve.acceptance_length, curve.k)
        if alpha is None:
            return (f"the published acceptance length {curve.acceptance_length} exceeds k + 1 = {curve.k + 1}", [])
        how = f"acceptance from the publication (length {curve.acceptance_length})"
    else:
        found = acceptance_needed(base, {curve.k: spec}, first_speedup, curve.context_tokens, first_batch)
        if found is None:
            return (f"pinned at batch {first_batch:g}: above the prior's ceiling at k {curve.k}", [])
        alpha, how = found[1], f"pinned at batch {first_batch:g}"
    batches = sorted({1.0, 4.0, 16.0, 32.0, 64.0, 128.0, *(b for b, _ in curve.points)})
    published = dict(curve.points)
    rows = [(b, published.get(b), batch_speedup(base, spec, alpha, curve.k, curve.context_tokens, b)) for b in batches]
    return f"{how}: constant per-position acceptance {alpha:.3f}", rows


def main() -> None:
    print(f"{PRIOR_LABEL}: speedup against batch (decode steps at a steady batch), PREDICTED beside published")
    figures: dict[str, float | None] = {}
    for number, curve in enumerate(CURVES, start=1):
        how, rows = curve_rows(curve)
        print(f"\n{curve.setup}; {curve.target}" + (f" + {curve.draft}" if curve.draft else ""))
        print(f"source: {curve.source}")
        print(f"prior: {how}" + (f"; {curve.note}" if curve.note else ""))
        if rows:
            print("| batch | published | prior (PREDICTED) |\n| --- | --- | --- |")
            for batch, published, prior in rows:
                shown = "-" if published is None else f"{published:.2f}x"
                print(f"| {batch:g} | {shown} | {prior:.2f}x |")
                if published is not None:
                    figures |= {f"curve{number}_batch{batch:g}_published_x": published,
                                f"curve{number}_batch{batch:g}_prior_x": prior}
    print("\nnot expressible by the prior:")
    for source, why in NOT_EXPRESSIBLE:
        print(f"- {source}: {why}")
    write_result("prior_curves", "none: the prior's speedup against batch beside published curves it can express",
                 None, figures, note="curveN: the Nth curve of benchmarks/prior_curves.py's CURVES")


if __name__ == "__main__":
    main()
