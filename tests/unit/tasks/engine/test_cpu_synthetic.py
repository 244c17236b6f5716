"""The CPU build's synthetic rejection branch (``tasks/engine/vllm_plugin/specfleet_cpu_synthetic.py``)
against a line-by-line port of vLLM's Triton kernels' loop, on random batches; and the installed build's
kernels wrapped so that vLLM's positional launch (``SYNTHETIC_MODE`` last) reaches it."""

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet_tasks.engine.vllm_plugin.specfleet_cpu_synthetic import (
    CPU_KERNELS_MODULE,
    GREEDY_KERNEL,
    RANDOM_KERNEL,
    accept_synthetic,
    register,
)

PLACEHOLDER = -1


def reference(counts: list[int], drafts: list[int], fallback: list[int], bonus: list[int], uniform: list[float],
              rates: list[float], rows: list[bool], width: int) -> list[list[int]]:
    """``rejection_greedy_sample_kernel``'s synthetic branch, one request at a time."""
    out = [[PLACEHOLDER] * width for _ in counts]
    start = 0
    for req, count in enumerate(counts):
        if rows[req]:
            rejected = False
            for pos in range(count):
                if not rejected:
                    accepted = uniform[start + pos] < rates[pos] and drafts[start + pos] >= 0
                    out[req][pos] = drafts[start + pos] if accepted else fallback[start + pos]
                    rejected = not accepted
            if not rejected:
                out[req][count] = bonus[req]
        start += count
    return out


@st.composite
def batches(draw: st.DrawFn) -> dict[str, object]:
    k = draw(st.integers(1, 5))
    counts = draw(st.lists(st.integers(0, k), min_size=1, max_size=8))
    tokens = sum(counts)
    token = st.integers(0, 3071)
    return {
        "k": k, "counts": counts,
        "drafts": draw(st.lists(st.one_of(token, st.just(-1)), min_size=tokens, max_size=tokens)),
        "fallback": draw(st.lists(token, min_size=tokens, max_size=tokens)),
        "bonus": draw(st.lists(token, min_size=len(counts), max_size=len(counts))),
        "uniform": draw(st.lists(st.floats(0.0, 0.999), min_size=tokens, max_size=tokens)),
        "rates": draw(st.lists(st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]), min_size=k, max_size=k)),
        "rows": draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts))),
    }


@settings(max_examples=300, deadline=None)
@given(batches())
def test_the_vectorised_branch_matches_the_kernels_loop(batch: dict) -> None:
    counts, width = batch["counts"], batch["k"] + 1
    out = torch.full((len(counts), width), PLACEHOLDER, dtype=torch.int32)
    accept_synthetic(out, torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32),
                     torch.tensor(batch["drafts"], dtype=torch.int32),
                     torch.tensor(batch["fallback"], dtype=torch.int64),
                     torch.tensor(batch["bonus"], dtype=torch.int64).reshape(-1, 1),
                     torch.tensor(batch["uniform"], dtype=torch.float64), torch.tensor(batch["rates"]),
                     torch.tensor(batch["rows"]))
    rates_as_stored = torch.tensor(batch["rates"]).tolist()  # float32, as vLLM holds them (0.3 is 0.30000001...)
    assert out.tolist() == reference(counts, batch["drafts"], batch["fallback"], batch["bonus"], batch["uniform"],
                                     rates_as_stored, batch["rows"], width)


def test_the_installed_cpu_kernels_take_a_positional_synthetic_launch() -> None:
    kernels = pytest.importorskip(CPU_KERNELS_MODULE)
    register()
    register()  # a second load (vLLM loads plugins once per process, several processes) wraps nothing twice
    greedy = getattr(kernels, GREEDY_KERNEL)
    assert greedy._specfleet_synthetic and not hasattr(greedy.__wrapped__, "_specfleet_synthetic")
    out = torch.full((2, 3), PLACEHOLDER, dtype=torch.int32)
    # two requests, k=2: the first accepts both drafts (bonus 9), the second rejects its first
    greedy(out, torch.tensor([2, 4], dtype=torch.int32), torch.tensor([5, 6, 7, 8], dtype=torch.int32),
           torch.tensor([50, 60, 70, 80]), torch.tensor([[9], [10]]), None, 2,
           torch.tensor([0.1, 0.2, 0.95, 0.1], dtype=torch.float64), torch.tensor([0.9, 0.5]), True)
    assert out.tolist() == [[5, 6, 9], [70, PLACEHOLDER, PLACEHOLDER]]
    random_kernel = getattr(importlib.import_module(CPU_KERNELS_MODULE), RANDOM_KERNEL)
    out = torch.full((1, 3), PLACEHOLDER, dtype=torch.int32)
    random_kernel(out, torch.tensor([2], dtype=torch.int32), torch.tensor([5, 6], dtype=torch.int32), None,
                  torch.zeros((2, 16)), torch.tensor([[9]]), torch.tensor([40, 41], dtype=torch.int32),
                  torch.tensor([0.1, 0.7], dtype=torch.float64), torch.tensor([False]), 2, 16, torch.tensor([1.0, 0.5]),
                  True, True)
    assert out.tolist() == [[5, 41, PLACEHOLDER]]


def test_a_build_whose_kernels_run_synthetic_mode_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = pytest.importorskip(CPU_KERNELS_MODULE)

    def capable(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,  # type: ignore[no-untyped-def]
                is_greedy, max_spec_len, uniform_probs=None, synthetic_conditional_rates=None, SYNTHETIC_MODE=False):  # noqa: N803
        """A later build's kernel with its own synthetic branch."""

    monkeypatch.setattr(kernels, GREEDY_KERNEL, capable)
    register()
    assert getattr(kernels, GREEDY_KERNEL) is capable
