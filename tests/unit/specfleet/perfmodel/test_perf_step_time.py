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


def _narrow(rows: list[StepObservation], at_most: int, extra_ms: float) -> list[StepObservation]:
    """The same steps on a machine whose kernels take a slower path at ``at_most`` rows or fewer."""
    out = []
    for o in rows:
        b = o.batch
        narrow = b.decode_seqs + b.prefill_tokens + b.draft_tokens <= at_most
        out.append(StepObservation(b, o.gap_ms + (extra_ms if narrow else 0.0), o.gaps, o.group))
    return out


def _small(noise: float) -> list[StepObservation]:
    """Decode-only steps of 1-8 sequences, the draft arm at k 1-2: rows from 1 to 24."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(600):
        method = "baseline" if i % 2 == 0 else "draft_model"
        k = 0 if method == "baseline" else int(rng.choice((1, 2)))
        b = float(rng.integers(1, 9))
        batch = StepBatch(method=method, k=k, decode_seqs=b, context_tokens=b * float(rng.integers(50, 500)),
                          draft_tokens=b * k)
        true = LAW.at(method, k)(b, 0.0, batch.context_tokens, batch.draft_tokens)
        rows.append(StepObservation(batch, true * (1 + noise * rng.standard_normal()), gaps=40, group=f"cell{i % 12}"))
    return rows


def test_a_slower_kernel_path_at_few_rows_is_found_and_a_machine_without_one_keeps_the_plain_law() -> None:
    plain = fit_step_law(_small(0.03), np.random.default_rng(0), resamples=20)
    assert plain.narrow_below == 0.0 and "narrow_step" not in plain.names
    law = fit_step_law(_narrow(_small(0.03), at_most=2, extra_ms=6.0), np.random.default_rng(0), resamples=20)
    assert law.narrow_below == 2.5
    assert law.coefficients()["narrow_step"] + 2 * law.coefficients()["narrow_row"] == pytest.approx(6.0, abs=1.0)
    one, three = law.linear("baseline", 0)(1, 0, 200, 0), law.linear("baseline", 0)(3, 0, 600, 0)
    assert one > three  # a step of one sequence costs more than one of three, as measured on the AMD EPYC
    assert law.linear("baseline", 0).scaled(2.0)(1, 0, 200, 0) == pytest.approx(2 * one)
