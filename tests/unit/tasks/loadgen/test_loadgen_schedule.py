"""The open-loop arrival schedule is fixed by its seed, so every arm gets the same one."""

import numpy as np

from specfleet_tasks.loadgen.drivers import poisson_offsets_ns


def test_poisson_schedule_is_seeded_and_starts_at_zero() -> None:
    offsets = poisson_offsets_ns(2000, rate_per_s=50.0, seed=3)
    assert offsets == poisson_offsets_ns(2000, rate_per_s=50.0, seed=3)
    assert offsets != poisson_offsets_ns(2000, rate_per_s=50.0, seed=4)
    assert offsets[0] == 0
    assert all(b >= a for a, b in zip(offsets, offsets[1:], strict=False))
    mean_gap_s = np.diff(offsets).mean() / 1e9
    assert abs(mean_gap_s - 1 / 50.0) < 0.002  # 2000 exponential gaps: within ~2 standard errors
    assert poisson_offsets_ns(0, rate_per_s=1.0, seed=0) == []
