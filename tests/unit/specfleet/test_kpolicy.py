"""k policy: specfleet's rule, the vllm#49163 peer rule on the same cells, and their comparison."""

import pytest

from specfleet.contract import arm_plans
from specfleet.decisions import Decision, decide_all
from specfleet.errors import InputError
from specfleet.kpolicy import compare_policies, k_policy_reports, peer_k_policy, specfleet_k_policy
from specfleet.results.cell import CellResult
from tests.unit.specfleet.test_decisions import CONFIG, PASS, make_cell, make_sample, passing_quality, without_rate

PLANS = arm_plans(CONFIG)
# qualified tok/s per (level, k); k = 0 is the baseline. Demand is 2000 tok/s, so 100 -> 20 replicas.
GRID = {
    (1, 0): 100.0, (1, 2): 150.0, (1, 4): 180.0,
    (4, 0): 100.0, (4, 2): 150.0, (4, 4): 160.0,
    (16, 0): 100.0, (16, 2): 100.5, (16, 4): 90.0,
}
SLOW_ITL = {(4, 4)}  # misses the ITL SLO: throughput alone would pick it


def sweep(repeats: int = 3, spread: float = 1.0, grid: dict[tuple[int, int], float] = GRID) -> list[CellResult]:
    cells = []
    for (level, k), tps in grid.items():
        arm = "baseline" if k == 0 else f"draft-k{k}"
        for r in range(repeats):
            cells.append(make_cell(arm, k or None, tps=tps + spread * (r - 1), load=level, repeat=r))
    return cells


def decisions_for(cells: list[CellResult]) -> list[Decision]:
    slow = [(int(c.identity.load_value), c.identity.k) in SLOW_ITL for c in cells]
    samples = {c.key: make_sample(c, seed=i, itl_ms=300.0 if slow[i] else 20.0) for i, c in enumerate(cells)}
    return decide_all(cells, samples, CONFIG, {"draft-k2": PASS, "draft-k4": PASS}, passing_quality(cells))


def test_specfleet_policy_and_config() -> None:
    policy = specfleet_k_policy(decisions_for(sweep()), PLANS, "draft", max_batch_size=64)
    assert [(c.level, c.k) for c in policy.levels] == [(1, 4), (4, 2), (16, 0)]
    assert policy.schedule == [(1, 1, 4), (2, 4, 2), (5, 64, 0)]
    assert policy.speculative_config() == {
        "method": "draft_model", "model": "fixture:draft", "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 4, 2], [5, 64, 0]],
    }


def test_no_adopted_k_means_no_speculation() -> None:
    losing = {key: (100.0 if key[1] == 0 else 95.0) for key in GRID}
    policy = specfleet_k_policy(decisions_for(sweep(grid=losing)), PLANS, "draft")
    assert policy.schedule == [(1, 16, 0)]
    assert policy.speculative_config() is None


def test_configured_buckets_need_the_k_adopted_at_every_level_inside() -> None:
    policy = specfleet_k_policy(decisions_for(sweep()), PLANS, "draft", bucket_starts=[1, 8])
    assert policy.schedule == [(1, 7, 2), (8, 16, 0)]


def test_unknown_arm_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no speculative arm"):
        specfleet_k_policy([], PLANS, "eagle")


def test_peer_rule_picks_conservative_throughput_and_stops_at_the_largest_batch() -> None:
    peer = peer_k_policy(sweep(), PLANS, "draft")
    assert peer.refused is None
    assert [(c.level, c.k) for c in peer.levels] == [(1, 4), (4, 4), (16, 0)]  # 100.5 vs 100 ties -> k 0
    assert peer.schedule == [(1, 15, 4), (16, 16, 0)]


@pytest.mark.parametrize(("cells", "why"), [
    (sweep(repeats=1), "at least 3 required"),
    (sweep(spread=25.0), "relative MAD"),
    ([c for c in sweep() if c.identity.load_value != 1], "must be 1"),
    ([*sweep(), make_cell("draft-k2", 2, load=4, repeat=9, failed=1)], "1 failed"),
    ([*sweep(), without_rate(make_cell("draft-k2", 2, load=4, repeat=9))], "no qualified tokens per s"),
])
def test_peer_rule_refuses_like_the_tool(cells: list[CellResult], why: str) -> None:
    peer = peer_k_policy(cells, PLANS, "draft")
    assert peer.refused is not None
    assert why in peer.refused
    assert peer.schedule == []


def test_comparison_says_where_and_why() -> None:
    cells = sweep()
    ours = specfleet_k_policy(decisions_for(cells), PLANS, "draft", max_batch_size=64)
    lines = compare_policies(ours, peer_k_policy(cells, PLANS, "draft"))
    assert lines[0].startswith("batch 4: specfleet k=2")
    assert "peer k=4" in lines[0]
    assert any(line.startswith("batch 2-3: specfleet k=2, peer k=4: not measured") for line in lines)
    assert any(line.startswith("batch 5-15: specfleet k=0, peer k=4") for line in lines)


def test_comparison_flags_the_peer_extrapolating() -> None:
    cells = sweep(grid={**GRID, (16, 2): 150.0})
    ours = specfleet_k_policy(decisions_for(cells), PLANS, "draft", max_batch_size=64)
    lines = compare_policies(ours, peer_k_policy(cells, PLANS, "draft"))
    assert any(line.startswith("batch 17-64: specfleet k=0, peer k=2: beyond") for line in lines)


def test_reports_cover_every_arm_class_and_sampling() -> None:
    cells = sweep(grid={**GRID, **{(level, 3): 90.0 for level in (1, 4, 16)}})
    cells = [c.model_copy(update={"identity": c.identity.model_copy(update={"arm": "ngram-k3", "method": "ngram"})})
             if c.identity.k == 3 else c for c in cells]
    reports = k_policy_reports(decisions_for(cells), cells, CONFIG)
    slices = [(r.specfleet.spec_name, r.specfleet.prompt_class) for r in reports]
    assert slices[:2] == [("draft", None), ("draft", "code")]
    assert len(reports) == 2 * (1 + len(CONFIG.prompt_classes))
    assert reports[0].peer is None
    assert reports[1].peer is not None
    assert reports[1].specfleet.schedule[-1] == (5, 16, 0)  # engine.max_num_seqs is 16
    other_class = reports[2]
    assert other_class.peer is not None
    assert other_class.peer.refused == "no measurements"
    assert other_class.specfleet.refused == "no concurrency-mode decisions"
    assert other_class.specfleet.speculative_config() is None


def test_comparison_reports_a_refusal() -> None:
    cells = sweep(repeats=1)
    ours = specfleet_k_policy(decisions_for(sweep()), PLANS, "draft")
    [line] = compare_policies(ours, peer_k_policy(cells, PLANS, "draft"))
    assert "peer rule: batch 1, k=0: 1 runs, at least 3 required" in line
