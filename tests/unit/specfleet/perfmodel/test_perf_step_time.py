"""The step law's fit on rows drawn from a known law: recovery under noise, and what it drops."""

import numpy as np
import pytest

from specfleet.perfmodel.step_time import StepBatch, StepObservation, fit_step_law
from tests.support.perf_engine import TrueLaw

LAW = TrueLaw()


def _rows(ks: tuple[int, ...], noise: float, n: int = 1200, seed: int = 1) -> list[StepObservation]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        method = "baseline" if i % 3 == 0 else "draft_model"
        k = 0 if method == "baseline" else int(rng.choice(ks))
        b = float(rng.integers(1, 17))
        batch = StepBatch(method=method, k=k, decode_seqs=b, prefill_tokens=float(rng.integers(0, 400)),
                          context_tokens=b * float(rng.integers(50, 2000)), draft_tokens=b * k * rng.uniform(0.5, 1))
        true = LAW.at(method, k)(int(batch.decode_seqs), int(batch.prefill_tokens), int(batch.context_tokens),
                                 batch.draft_tokens)
        rows.append(StepObservation(batch, true * (1 + noise * rng.standard_normal()), gaps=40, group=f"cell{i % 12}"))
    return rows


def test_noisy_gaps_still_give_the_law_within_its_interval() -> None:
    law = fit_step_law(_rows((1, 2, 4), noise=0.05), np.random.default_rng(0), resamples=100)
    fitted = law.coefficients()
    for j, name in enumerate(law.names):
        low, high = np.percentile(law.replicates[:, j], [0.5, 99.5])
        true = LAW.coefficients()[name]
        assert low - 0.002 <= true <= high + 0.002, name
        assert fitted[name] == pytest.approx(true, rel=0.25, abs=0.005), name
    assert 0.03 < law.residual_rel < 0.07


def test_one_measured_k_cannot_tell_the_draft_pass_from_the_fixed_cost() -> None:
    law = fit_step_law(_rows((3,), noise=0.0), np.random.default_rng(0), resamples=10)
    assert law.dropped == ("draft_model:draft_pass",)
    fitted = law.coefficients()
    assert fitted["draft_model:step"] == pytest.approx(LAW.draft_step + 3 * LAW.draft_pass)
    # at the measured k the law is exact; elsewhere it has no per-pass cost (predict says so)
    assert law.linear("draft_model", 3)(4, 0, 800, 12) == pytest.approx(LAW.at("draft_model", 3)(4, 0, 800, 12))


def test_costs_are_never_negative() -> None:
    rows = [StepObservation(StepBatch("baseline", 0, float(b)), gap_ms=10.0 - 0.5 * b, gaps=10, group="c")
            for b in range(1, 9)]
    law = fit_step_law(rows, np.random.default_rng(0), resamples=5)
    assert all(c >= 0 for c in law.coefficients().values())
    assert (law.replicates >= 0).all()
