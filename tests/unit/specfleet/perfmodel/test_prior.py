"""The performance model's cold-start prior: architecture arithmetic against published figures,
the roofline's monotonic sanity, and the batch-1 acceptance inversion."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.perfmodel.architectures import KNOWN_CONFIGS
from specfleet.perfmodel.prior import (
    ACCELERATORS,
    CPU_DEFAULTS,
    GPU_DEFAULTS,
    Roofline,
    acceptance_needed,
    batch1_speedup,
    geometric_tokens_per_step,
    prior_startup_s,
    prior_step,
    shape_from_hf_config,
)

LLAMA70B = shape_from_hf_config(KNOWN_CONFIGS["meta-llama/Llama-3.3-70B-Instruct"], "bfloat16", "fp8", "70b")
LLAMA1B = shape_from_hf_config(KNOWN_CONFIGS["meta-llama/Llama-3.2-1B-Instruct"], "bfloat16", None, "1b")
H200 = ACCELERATORS["nvidia h200"]


def _hw(bandwidth: float = H200.memory_bandwidth_gb_per_s, tp: int = 1) -> Roofline:
    return Roofline(bandwidth, H200.peak_tflops(1.0), tp, GPU_DEFAULTS, "test")


@pytest.mark.parametrize(("name", "billions"), [
    ("meta-llama/Llama-3.3-70B-Instruct", 70.55), ("meta-llama/Llama-3.1-8B-Instruct", 8.03),
    ("meta-llama/Llama-3.2-3B-Instruct", 3.21), ("meta-llama/Llama-3.2-1B-Instruct", 1.24)])
def test_parameter_counts_match_the_published_sizes(name: str, billions: float) -> None:
    shape = shape_from_hf_config(KNOWN_CONFIGS[name], "bfloat16", None, name)
    assert shape.params / 1e9 == pytest.approx(billions, abs=0.01)


def test_kv_bytes_per_token_match_the_seeds_worked_example() -> None:
    """Seed, "KV cache arithmetic": 320 KiB per token for the 70B target, 32 KiB more with the 1B draft."""
    assert LLAMA70B.kv_bytes_per_token == 320 * 1024
    assert LLAMA1B.kv_bytes_per_token == 32 * 1024
    assert LLAMA70B.weight_bytes == pytest.approx(70.55e9, rel=1e-3)  # FP8: one byte per weight


@given(st.floats(500, 8000), st.floats(1.05, 4.0))
def test_more_bandwidth_never_makes_a_step_slower(bandwidth: float, factor: float) -> None:
    slow, fast = prior_step(LLAMA70B, LLAMA1B, "draft_model", 4, _hw(bandwidth)), \
        prior_step(LLAMA70B, LLAMA1B, "draft_model", 4, _hw(bandwidth * factor))
    assert fast(8, 100, 4000, 32) < slow(8, 100, 4000, 32)


@given(st.integers(1, 8), st.integers(1, 256), st.floats(0, 1e5))
def test_a_draft_model_step_costs_more_than_a_baseline_step(k: int, batch: int, context: float) -> None:
    base = prior_step(LLAMA70B, None, "baseline", 0, _hw())
    spec = prior_step(LLAMA70B, LLAMA1B, "draft_model", k, _hw())
    assert spec(batch, 0, context, batch * k) > base(batch, 0, context, 0)


@given(st.floats(0, 0.99), st.floats(0.001, 0.01), st.integers(1, 8))
def test_speedup_rises_with_acceptance(alpha: float, step: float, k: int) -> None:
    base = prior_step(LLAMA70B, None, "baseline", 0, _hw())
    spec = prior_step(LLAMA70B, LLAMA1B, "draft_model", k, _hw())
    assert batch1_speedup(base, spec, alpha + step, k, 500) > batch1_speedup(base, spec, alpha, k, 500)


def test_geometric_tokens_per_step_ends() -> None:
    assert geometric_tokens_per_step(0.0, 4) == 1.0
    assert geometric_tokens_per_step(1.0, 4) == 5.0
    assert geometric_tokens_per_step(0.5, 2) == pytest.approx(1.75)


def test_acceptance_needed_inverts_the_speedup() -> None:
    base = prior_step(LLAMA70B, None, "baseline", 0, _hw())
    steps = {k: prior_step(LLAMA70B, LLAMA1B, "draft_model", k, _hw()) for k in range(1, 9)}
    found = acceptance_needed(base, steps, 3.0, 500)
    assert found is not None
    k, alpha = found
    assert batch1_speedup(base, steps[k], alpha, k, 500) == pytest.approx(3.0, rel=1e-6)
    for other, spec in steps.items():  # no other k reaches 3.0 at a lower acceptance
        assert batch1_speedup(base, spec, alpha * 0.999, other, 500) < 3.0
    assert acceptance_needed(base, steps, 50.0, 500) is None  # above every k's ceiling


def test_tensor_parallelism_splits_the_weight_read() -> None:
    one, two = prior_step(LLAMA70B, None, "baseline", 0, _hw()), prior_step(LLAMA70B, None, "baseline", 0, _hw(tp=2))
    assert two.fixed_ms < one.fixed_ms
    assert two.per_context_token_ms == pytest.approx(one.per_context_token_ms / 2)


def test_auto_reads_the_checkpoints_dtype_and_an_unknown_width_is_named_not_guessed() -> None:
    cfg = KNOWN_CONFIGS["meta-llama/Llama-3.2-1B-Instruct"]
    assert shape_from_hf_config(cfg, "auto", None, "1b").weight_bytes_per_param == 2.0  # its torch_dtype
    assert shape_from_hf_config({**cfg, "torch_dtype": "float32"}, "auto", None, "1b").weight_bytes_per_param == 4.0
    with pytest.raises(ValueError, match="quantization 'mxfp4'"):
        shape_from_hf_config(cfg, "bfloat16", "mxfp4", "1b")
    with pytest.raises(ValueError, match="dtype 'auto'"):
        shape_from_hf_config({k: v for k, v in cfg.items() if k != "torch_dtype"}, "auto", None, "1b")


def test_a_cpu_start_up_scales_with_the_hosts_import_time_and_a_gpu_one_keeps_its_default() -> None:
    cpu = Roofline(20.0, 0.2, 1, CPU_DEFAULTS, "test")
    load_s = LLAMA1B.weight_bytes / (CPU_DEFAULTS.load_gb_per_s * 1e9)
    assert prior_startup_s([LLAMA1B], cpu) == pytest.approx(CPU_DEFAULTS.startup_fixed_s + load_s)
    assert CPU_DEFAULTS.startup_per_import is not None
    slow, fast = prior_startup_s([LLAMA1B], cpu, 12.0), prior_startup_s([LLAMA1B], cpu, 6.0)
    assert slow == pytest.approx(CPU_DEFAULTS.startup_per_import * 12.0 + load_s)
    assert slow - fast == pytest.approx(CPU_DEFAULTS.startup_per_import * 6.0)
    assert prior_startup_s([LLAMA1B], _hw(), 6.0) == prior_startup_s([LLAMA1B], _hw())  # not the serving host
