"""k policy: specfleet's rule, the vllm#49163 peer rule on the same cells, and their comparison."""

import pytest

from specfleet.contract import CellIdentity, arm_plans
from specfleet.contract.policy import PolicySpec
from specfleet.errors import InputError
from specfleet.results.cell import CellResult
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.kpolicy import compare_policies, k_policy_reports, peer_k_policy, specfleet_k_policy
from specfleet.verdicts.policy_arm import derive_policies
from tests.support.synthetic_sweep import DRAFT, NGRAM, Sweep, config, history

CONFIG = config(classes=("code", "chat"), loads=(1, 4, 16), arms=(DRAFT, NGRAM))
CONFIG = CONFIG.model_copy(update={
    "load": CONFIG.load.model_copy(update={"repeats": 3}),
    "hardware": CONFIG.hardware.model_copy(update={"peak_demand_tokens_per_s": 1990})})
PLANS = arm_plans(CONFIG)
# qualified tok/s per (level, k) on code; k = 0 is the baseline. Demand is 1990 tok/s, so 100 -> 20 replicas.
GRID = {
    (1, 0): 100.0, (1, 2): 150.0, (1, 4): 180.0,
    (4, 0): 100.0, (4, 2): 150.0, (4, 4): 160.0,
    (16, 0): 100.0, (16, 2): 100.5, (16, 4): 90.0,
}
SLOW_ITL = {(4, 4)}  # misses the ITL SLO at p95: throughput alone would pick it


def _ident(level: int, k: int, repeat: int, phase: str = "main") -> CellIdentity:
    arm, method = ("baseline", "baseline") if k == 0 else (f"ngram-k{k}", "ngram") if k == 3 else (
        f"draft-k{k}", "draft_model")
    return CellIdentity(arm=arm, method=method, k=k or None, load_mode="concurrency", load_value=float(level),
                        prompt_class="code", sampling="greedy", repeat=repeat, phase=phase)  # type: ignore[arg-type]


def built(repeats: int = 3, spread: float = 1.0, grid: dict[tuple[int, int], float] = GRID) -> Sweep:
    """Each (level, k) of ``grid`` ``repeats`` times on one server per arm, and the baseline again
    at the end on another: a run-to-run estimate from both."""
    sweep = Sweep(CONFIG)
    for (level, k), tps in grid.items():
        for r in range(repeats):
            ident = _ident(level, k, r)
            slow = (level, k) in SLOW_ITL  # 3 of 47 gaps of every request 25 times as long: pooled p95 ITL misses
            sweep.add(ident, tps + spread * (r - 1), f"{ident.arm}/main", long_gaps=3 if slow else 0)
            if k == 0:
                sweep.add(_ident(level, 0, r, "baseline_end"), tps - spread * (r - 1), "baseline/end")
    return sweep


def sweep(repeats: int = 3, spread: float = 1.0, grid: dict[tuple[int, int], float] = GRID) -> list[CellResult]:
    return built(repeats, spread, grid).cells


HISTORY = history(CONFIG, lambda i: GRID[(int(i.load_value), 0)], lambda i: GRID[(int(i.load_value), 0)] * 1.01)
"""Four earlier sweeps' baselines: one sweep's two server lives say nothing of the server part."""


def decisions_for(s: Sweep) -> list[Decision]:
    return s.analyse(history=HISTORY).decisions


def failed_cell() -> CellResult:
    s = Sweep(CONFIG)
    return s.add(_ident(4, 2, 9), 150.0, "draft-k2/main", failed=1)


def without_rate(cell: CellResult) -> CellResult:
    throughput = cell.throughput.model_copy(update={"duration_s": 0.0, "qualified_tokens_per_s": None})
    return cell.model_copy(update={"throughput": throughput})


def test_specfleet_policy_and_config() -> None:
    policy = specfleet_k_policy(decisions_for(built()), PLANS, "draft", prompt_class="code", max_batch_size=64)
    assert [(c.level, c.k) for c in policy.levels] == [(1, 4), (4, 2), (16, 0)]
    assert policy.schedule == [(1, 1, 4), (2, 4, 2), (5, 64, 0)]
    assert policy.speculative_config() == {
        "method": "draft_model", "model": "fixture:draft", "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 4, 2], [5, 64, 0]],
    }


def test_no_adopted_k_means_no_speculation() -> None:
    losing = {key: (100.0 if key[1] == 0 else 95.0) for key in GRID}
    policy = specfleet_k_policy(decisions_for(built(grid=losing)), PLANS, "draft", prompt_class="code")
    assert policy.schedule == [(1, 16, 0)]
    assert policy.speculative_config() is None


def test_configured_buckets_need_the_k_adopted_at_every_level_inside() -> None:
    policy = specfleet_k_policy(decisions_for(built()), PLANS, "draft", prompt_class="code", bucket_starts=[1, 8])
    assert policy.schedule == [(1, 7, 2), (8, 16, 0)]


def test_unknown_arm_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no speculative arm"):
        specfleet_k_policy([], PLANS, "eagle")


def test_peer_rule_picks_conservative_throughput_and_stops_at_the_largest_batch() -> None:
    peer = peer_k_policy(sweep(), PLANS, "draft", prompt_class="code")
    assert peer.refused is None
    assert [(c.level, c.k) for c in peer.levels] == [(1, 4), (4, 4), (16, 0)]  # 100.5 vs 100 ties -> k 0
    assert peer.schedule == [(1, 15, 4), (16, 16, 0)]


@pytest.mark.parametrize(("cells", "why"), [
    (sweep(repeats=1), "at least 3 required"),
    (sweep(spread=25.0), "relative MAD"),
    ([c for c in sweep() if c.identity.load_value != 1], "must be 1"),
    ([*sweep(), failed_cell()], "1 failed"),
    ([*sweep(), without_rate(failed_cell())], "failed"),
])
def test_peer_rule_refuses_like_the_tool(cells: list[CellResult], why: str) -> None:
    peer = peer_k_policy(cells, PLANS, "draft", prompt_class="code")
    assert peer.refused is not None
    assert why in peer.refused
    assert peer.schedule == []


def test_a_measured_peer_policy_refuses_past_the_configured_spread_only() -> None:
    """policy.peer_max_relative_mad: runs spread by a relative MAD of 0.25 are refused at the
    tuner's default 0.1 and derived where the config allows 0.3."""
    cells = sweep(spread=25.0)

    def derived(**policy: object) -> str | None:
        config = CONFIG.model_copy(update={"policy": PolicySpec.model_validate(
            {"measure": True, "rule": "vllm#49163", **policy})})
        (draft,) = [p for p in derive_policies(config, [], cells, "s1").policies if p.spec_name == "draft"]
        return draft.reason

    assert "relative MAD 0.250 exceeds 0.100" in str(derived())
    assert derived(peer_max_relative_mad=0.3) is None


def test_comparison_says_where_and_why() -> None:
    s = built()
    ours = specfleet_k_policy(decisions_for(s), PLANS, "draft", prompt_class="code", max_batch_size=64)
    lines = compare_policies(ours, peer_k_policy(s.cells, PLANS, "draft", prompt_class="code"))
    assert lines[0].startswith("batch 4: specfleet k=2")
    assert "peer k=4" in lines[0]
    assert any(line.startswith("batch 2-3: specfleet k=2, peer k=4: not measured") for line in lines)
    assert any(line.startswith("batch 5-15: specfleet k=0, peer k=4") for line in lines)


def test_comparison_flags_the_peer_extrapolating() -> None:
    s = built(grid={**GRID, (16, 2): 150.0})
    ours = specfleet_k_policy(decisions_for(s), PLANS, "draft", prompt_class="code", max_batch_size=64)
    lines = compare_policies(ours, peer_k_policy(s.cells, PLANS, "draft", prompt_class="code"))
    assert any(line.startswith("batch 17-64: specfleet k=0, peer k=2: beyond") for line in lines)


def test_reports_cover_every_arm_class_and_sampling() -> None:
    s = built(grid={**GRID, **{(level, 3): 90.0 for level in (1, 4, 16)}})
    reports = k_policy_reports(decisions_for(s), s.cells, CONFIG)
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
    ours = specfleet_k_policy(decisions_for(built()), PLANS, "draft", prompt_class="code")
    [line] = compare_policies(ours, peer_k_policy(sweep(repeats=1), PLANS, "draft", prompt_class="code"))
    assert "peer rule: batch 1, k=0: 2 runs, at least 3 required" in line  # the opening and closing baseline
