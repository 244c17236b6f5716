"""Acceptance per position, pooled from counters: hand-computed cases and monotonic sanity."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.perfmodel.acceptance import AcceptanceProfile, AcceptanceSample, NoAcceptance, Ratio, pool_acceptance
from specfleet.results import SpecDecodeStats


def _stats(drafts: int, reach: list[int], k: int) -> SpecDecodeStats:
    accepted = sum(reach)
    return SpecDecodeStats(num_drafts=drafts, num_draft_tokens=drafts * k, num_accepted_tokens=accepted,
                           accepted_per_position=reach, acceptance_rate=accepted / (drafts * k) if drafts else None,
                           mean_acceptance_length=1 + accepted / drafts if drafts else None,
                           acceptance_per_position=[n / drafts for n in reach] if drafts else [])


K2 = AcceptanceSample(k=2, stats=_stats(100, [80, 60], 2), decode_steps=200)
K4 = AcceptanceSample(k=4, stats=_stats(50, [45, 36, 27, 18], 4), decode_steps=100)


def test_counts_are_pooled_by_position_never_averaged() -> None:
    profile = pool_acceptance([K2, K4])
    assert isinstance(profile, AcceptanceProfile)
    # q1 = (80 + 45) / (100 + 50); q2 = (60 + 36) / (80 + 45); q3 = 27 / 36; q4 = 18 / 27 (only the k=4 cell)
    assert [r.value for r in profile.conditional] == pytest.approx([125 / 150, 96 / 125, 27 / 36, 18 / 27])
    a = profile.per_position(4)
    assert a == pytest.approx([125 / 150, 96 / 150, 96 / 150 * 27 / 36, 96 / 150 * 18 / 36])
    assert a[0] != pytest.approx((0.8 + 0.9) / 2)  # not the average of the cells' own a_1
    assert profile.measured_k == (2, 4)
    assert profile.rate() == pytest.approx(150 / 300)
    assert profile.mean_acceptance_length(2) == pytest.approx(1 + a[0] + a[1])
    assert profile.tokens_per_step(2) == pytest.approx(1 + 0.5 * (a[0] + a[1]))


def test_the_drafting_rate_is_each_measured_ks_own_and_pooled_elsewhere() -> None:
    # ngram drafts where an n-gram matches: 58 drafts in 490 steps at k=3, 40 in 200 at k=5
    k3 = AcceptanceSample(k=3, stats=_stats(58, [36, 14, 7], 3), decode_steps=490)
    k5 = AcceptanceSample(k=5, stats=_stats(40, [30, 20, 10, 5, 2], 5), decode_steps=200)
    profile = pool_acceptance([k3, k5])
    assert isinstance(profile, AcceptanceProfile)
    assert profile.rate(k=3) == pytest.approx(58 / 490) and profile.rate(k=5) == pytest.approx(40 / 200)
    assert profile.rate(k=4) == pytest.approx(98 / 690) and profile.rate() == pytest.approx(98 / 690)
    assert profile.tokens_per_step(3) == pytest.approx(1 + 58 / 490 * sum(profile.per_position(3)))
    assert profile.rate("low", 5) < 40 / 200 < profile.rate("high", 5)


def test_one_cell_gives_its_own_per_position_acceptance() -> None:
    profile = pool_acceptance([K4])
    assert isinstance(profile, AcceptanceProfile)
    assert profile.per_position(4) == pytest.approx([0.9, 0.72, 0.54, 0.36])
    assert profile.mean_acceptance_length(4) == pytest.approx(K4.stats.mean_acceptance_length)


def test_past_the_largest_measured_k_the_last_ratio_is_held_and_flagged() -> None:
    profile = pool_acceptance([K2, K4])
    assert isinstance(profile, AcceptanceProfile)
    assert not profile.extrapolates(4) and profile.extrapolates(5)
    a = profile.per_position(6)
    assert a[4] == pytest.approx(a[3] * 18 / 27) and a[5] == pytest.approx(a[4] * 18 / 27)


def test_a_method_that_drafts_in_some_steps_only() -> None:
    ngram = AcceptanceSample(k=3, stats=_stats(58, [36, 14, 7], 3), decode_steps=490)
    profile = pool_acceptance([ngram])
    assert isinstance(profile, AcceptanceProfile)
    assert profile.mean_acceptance_length(3) == pytest.approx(1 + 57 / 58)
    assert profile.tokens_per_step(3) == pytest.approx(1 + 58 / 490 * 57 / 58)


def test_no_drafts_no_profile() -> None:
    got = pool_acceptance([AcceptanceSample(k=2, stats=_stats(0, [0, 0], 2), decode_steps=10)])
    assert isinstance(got, NoAcceptance) and "no drafts" in got.reason


def _without_positions(stats: SpecDecodeStats) -> SpecDecodeStats:
    """The same totals from an engine that does not export the per-position counter."""
    return stats.model_copy(update={"accepted_per_position": [], "acceptance_per_position": []})


def test_totals_without_per_position_counters_are_no_profile_never_zero_acceptance() -> None:
    # 100 drafts of 4, 240 accepted: 3.4 tokens per drafting step, not 1.0 (issue 32)
    stats = _without_positions(_stats(100, [90, 70, 50, 30], 4))
    got = pool_acceptance([AcceptanceSample(k=4, stats=stats, decode_steps=100)])
    assert isinstance(got, NoAcceptance)
    assert "spec_decode_num_accepted_tokens_per_pos" in got.reason


def test_a_cell_without_per_position_counters_does_not_dilute_the_others() -> None:
    alone = pool_acceptance([K4])
    mixed = pool_acceptance([K4, AcceptanceSample(k=4, stats=_without_positions(K4.stats), decode_steps=100)])
    assert isinstance(alone, AcceptanceProfile) and isinstance(mixed, AcceptanceProfile)
    assert mixed.per_position(4) == pytest.approx(alone.per_position(4))


def test_no_decode_steps_is_no_drafting_rate_never_always_drafting() -> None:
    got = pool_acceptance([AcceptanceSample(k=2, stats=_stats(100, [80, 60], 2), decode_steps=0)])
    assert isinstance(got, NoAcceptance) and "drafting rate" in got.reason


@given(st.integers(0, 500), st.integers(1, 500))
def test_wilson_bounds_hold_the_ratio(hits: int, extra: int) -> None:
    ratio = Ratio(hits, hits + extra)
    assert 0.0 <= ratio.bound("low") <= ratio.value <= ratio.bound("high") <= 1.0


@given(st.lists(st.integers(0, 200), min_size=2, max_size=6), st.integers(0, 5), st.integers(1, 50))
def test_more_acceptance_never_lowers_tokens_per_step_within_the_measured_k(
        raw: list[int], position: int, more: int) -> None:
    reach = sorted(raw, reverse=True)
    drafts = reach[0] + 50
    position = position % len(reach)
    raised = list(reach)
    raised[position] = min(raised[position] + more, drafts if position == 0 else raised[position - 1])
    k = len(reach)
    before = pool_acceptance([AcceptanceSample(k=k, stats=_stats(drafts, reach, k), decode_steps=drafts)])
    after = pool_acceptance([AcceptanceSample(k=k, stats=_stats(drafts, raised, k), decode_steps=drafts)])
    assert isinstance(before, AcceptanceProfile) and isinstance(after, AcceptanceProfile)
    for j in range(1, k + 1):
        assert after.tokens_per_step(j) >= before.tokens_per_step(j) - 1e-12
