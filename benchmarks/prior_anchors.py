"""The performance model's cold-start prior beside published anchors (issue 17), whatever they show.

    .venv/bin/python -m benchmarks.prior_anchors

NVIDIA measured Llama 3.3 70B (FP8, TensorRT-LLM) on one H200 at batch size 1 (seed ref. 2;
NVIDIA technical blog, "Boost Llama 3.3 70B Inference Throughput 3x with NVIDIA TensorRT-LLM
Speculative Decoding"): 51.14 output tokens/s without speculation, 181.74 / 161.53 / 134.38 with
1B / 3B / 8B draft models (3.55x / 3.16x / 2.63x). The prior knows no acceptance, so for each
draft it prints the speedup ceiling (every draft token accepted) and the smallest constant
per-position acceptance at which it reaches the published speedup, over k = 1..10. The
seed's worked KV example (65 GB for the cache, 1B FP16 draft loaded from it) is the last line.
"""

from benchmarks.results_record import write_result
from specfleet.perfmodel.architectures import KNOWN_CONFIGS
from specfleet.perfmodel.prior import (
    ACCELERATORS,
    GPU_DEFAULTS,
    PRIOR_LABEL,
    Roofline,
    acceptance_needed,
    batch1_speedup,
    prior_step,
    shape_from_hf_config,
)
from specfleet.stats.bootstrap import speedup_text

CONTEXT_TOKENS = 1000.0
"""Context attended per step in the comparison (the blog does not state its lengths)."""
PUBLISHED_BASELINE_TOKENS_PER_S = 51.14
DRAFTS = {"meta-llama/Llama-3.2-1B-Instruct": 3.55, "meta-llama/Llama-3.2-3B-Instruct": 3.16,
          "meta-llama/Llama-3.1-8B-Instruct": 2.63}
KS = range(1, 11)


def main() -> None:
    h200 = ACCELERATORS["nvidia h200"]
    target = shape_from_hf_config(KNOWN_CONFIGS["meta-llama/Llama-3.3-70B-Instruct"], "bfloat16", "fp8", "70B FP8")
    hw = Roofline(h200.memory_bandwidth_gb_per_s, h200.peak_tflops(1.0), 1, GPU_DEFAULTS, h200.source)
    base = prior_step(target, None, "baseline", 0, hw)
    base_tps = 1000.0 / base(1.0, 0.0, CONTEXT_TOKENS, 0.0)
    print(f"{PRIOR_LABEL}: Llama 3.3 70B FP8 on one H200, batch 1, {CONTEXT_TOKENS:.0f} tokens of context")
    print("| draft | published | prior: ceiling at k=4 / k=10 | prior: acceptance needed (k) |")
    print("| --- | --- | --- | --- |")
    print(f"| none | {PUBLISHED_BASELINE_TOKENS_PER_S} tok/s | {base_tps:.1f} tok/s | - |")
    figures: dict[str, float | None] = {"baseline_published_tokens_per_s": PUBLISHED_BASELINE_TOKENS_PER_S,
                                        "baseline_prior_tokens_per_s": base_tps}
    for name, published in DRAFTS.items():
        draft = shape_from_hf_config(KNOWN_CONFIGS[name], "bfloat16", None, name)
        steps = {k: prior_step(target, draft, "draft_model", k, hw) for k in KS}
        ceilings = " / ".join(speedup_text(batch1_speedup(base, steps[k], 1.0, k, CONTEXT_TOKENS)) for k in (4, 10))
        needed = acceptance_needed(base, steps, published, CONTEXT_TOKENS)
        need = "above the ceiling at every k" if needed is None else f"{needed[1]:.2f} (k={needed[0]})"
        short = name.split("/")[1]
        figures |= {f"{short}_published_x": published,
                    f"{short}_acceptance_needed": None if needed is None else needed[1]}
        figures |= {f"{short}_prior_ceiling_k{k}_x": batch1_speedup(base, steps[k], 1.0, k, CONTEXT_TOKENS)
                    for k in (4, 10)}
        print(f"| {name.split('/')[1]} | {published}x | {ceilings} | {need} |")
    draft = shape_from_hf_config(KNOWN_CONFIGS["meta-llama/Llama-3.2-1B-Instruct"], "bfloat16", None, "1B")
    alone = 65e9 / target.kv_bytes_per_token
    shared = (65e9 - draft.weight_bytes) / (target.kv_bytes_per_token + draft.kv_bytes_per_token)
    print(f"KV pool of 65 GB: {alone:,.0f} tokens; with the 1B draft: {shared:,.0f} tokens "
          f"({1 - shared / alone:.1%} fewer); the seed: about 198,000 and 173,000 (12.6%)")
    write_result("prior_anchors", "none: the cold-start prior beside NVIDIA's published Llama 3.3 70B FP8 figures "
                 "on one H200 at batch 1", None, figures)


if __name__ == "__main__":
    main()
