"""The verdict at the traffic mix against hand-computed cases, and the traffic block's errors."""

import re
from pathlib import Path

import pytest

from specfleet.contract import SweepConfig, parse_sweep_config
from specfleet.decisions import Comparison, Decision, Slice, decide
from specfleet.errors import InputError
from specfleet.mix_verdict import arm_mix_verdict, mix_verdicts, policy_mix_verdict
from specfleet.stats import bootstrap as bs
from specfleet.stats.quality import GateResult
from specfleet.traffic import TrafficMix, cell_token_shares, effective_mix

ROOT = Path(__file__).resolve().parents[3]
DEMO_WITH_TRAFFIC = (ROOT / "configs" / "demo-cpu.yaml").read_text()
DEMO = re.sub(r"\ntraffic:\n(  .*\n)+", "\n", DEMO_WITH_TRAFFIC)  # the tests add their own block
PASS = [GateResult(gate="greedy_exact_match", passed=True, detail="6/6")]
QUALITY = GateResult(gate="quality", passed=True, detail="same scores")
USD_PER_REPLICA_HOUR = 1.0  # demo hardware: 1 accelerator per replica at 1 USD per hour


def config(traffic: str = "", demand: int = 2000) -> SweepConfig:
    text = DEMO.replace("peak_demand_tokens_per_s: 2000", f"peak_demand_tokens_per_s: {demand}")
    return parse_sweep_config(text + traffic, "sweep.yaml")


def traffic(classes: str, loads: str, basis: str = "tokens") -> str:
    return f"traffic:\n  share_basis: {basis}\n  prompt_classes: {{{classes}}}\n  concurrency: {{{loads}}}\n"


def decision(cfg: SweepConfig, pc: str, load: int, base: float, cand: float, low: float, high: float,
             noise: float | None = 0.01, arm: str = "draft-k2") -> Decision:
    """A real cell decision (decisions.decide) from hand-chosen throughputs and speedup interval."""
    where = Slice(arm=arm, method="draft_model", k=int(arm.rsplit("-k", 1)[1]), prompt_class=pc,
                  load_mode="concurrency", load_value=float(load), sampling="greedy")
    interval = bs.Interval(estimate=cand / base if base else 0.0, low=low, high=high, confidence=0.95,
                           basis="repeats", resamples=1000)
    comparison = Comparison(
        basis="repeats", baseline_runs=3, candidate_runs=3, baseline_qualified_tokens_per_s=base,
        candidate_qualified_tokens_per_s=cand, qualified_tps_speedup=interval if base else None,
        itl_statistic="per_chunk", slo_percentile=95.0, baseline_itl_ms=20.0, candidate_itl_ms=15.0,
        itl_speedup=None, candidate_ttft_ms=100.0, baseline_slo_holds=True, candidate_slo_holds=True,
        acceptance_rate=0.6, mean_acceptance_length=2.0, engine_version="0.32.0")
    return decide(where, comparison, cfg.hardware, noise, "test", PASS, QUALITY)


def usd_per_million(replicas: int, demand: float) -> float:
    return replicas * USD_PER_REPLICA_HOUR * 1e6 / (3600 * demand)


# Two classes x two loads, 25 % of tokens each; demand 2000 tokens/s.
#   cell          baseline  candidate  speedup [low, high]  noise
#   code  c1        100       200       2 [1.5, 2.5]        0.02
#   code  c4        400       400       1 [0.8, 1.25]       0.05
#   chat  c1        200       400       2 [1.5, 2.5]        0.03
#   chat  c4        400       400       1 [0.8, 1.25]       0.04
# baseline T = 1 / (0.25/100 + 0.25/400 + 0.25/200 + 0.25/400) = 200 -> ceil(2000/200) = 10 replicas
# candidate T = 1 / (0.25/200 + 0.25/400 + 0.25/400 + 0.25/400) = 320 -> ceil(6.25) = 7: saving 0.3
# low ends: 1 / (0.25/150 + 0.25/320 + 0.25/300 + 0.25/320) = 246.15 -> ceil(8.125) = 9: 0.1
# high ends: 1 / (0.25/250 + 0.25/500 + 0.25/500 + 0.25/500) = 400 -> 5: 0.5; noise max 0.05
# code alone: 160 -> 13 vs 266.7 -> 8, low 204.3 -> 10: 1 - 10/13; chat alone: 266.7 -> 8 vs 400 -> 5,
# low 309.7 -> 7: 1 - 7/8.
HAND = traffic("code: 0.5, chat: 0.5", "1: 0.5, 4: 0.5")


def hand_decisions(cfg: SweepConfig) -> list[Decision]:
    return [decision(cfg, "code", 1, 100, 200, 1.5, 2.5, 0.02), decision(cfg, "code", 4, 400, 400, 0.8, 1.25, 0.05),
            decision(cfg, "chat", 1, 200, 400, 1.5, 2.5, 0.03), decision(cfg, "chat", 4, 400, 400, 0.8, 1.25, 0.04)]


def test_two_classes_two_loads_by_hand() -> None:
    cfg = config(HAND)
    verdict = arm_mix_verdict(hand_decisions(cfg), cfg, "draft-k2", "greedy")
    fleet = verdict.fleet
    assert fleet.baseline_tokens_per_s_per_replica == pytest.approx(200.0)
    assert fleet.candidate_tokens_per_s_per_replica == pytest.approx(320.0)
    assert (fleet.baseline_replicas, fleet.candidate_replicas) == (10, 7)
    assert fleet.baseline_cost_per_million_usd == pytest.approx(usd_per_million(10, 2000))
    assert fleet.candidate_cost_per_million_usd == pytest.approx(usd_per_million(7, 2000))
    assert fleet.saving_fraction == pytest.approx(0.3)
    assert fleet.pessimistic_saving_fraction == pytest.approx(0.1)
    assert fleet.optimistic_saving_fraction == pytest.approx(0.5)
    assert fleet.noise_floor == pytest.approx(0.05)
    assert verdict.per_class["code"].saving_fraction == pytest.approx(1 - 8 / 13)
    assert verdict.per_class["code"].pessimistic_saving_fraction == pytest.approx(1 - 10 / 13)
    assert verdict.per_class["chat"].pessimistic_saving_fraction == pytest.approx(1 - 7 / 8)
    assert verdict.coverage == 1.0 and verdict.passed
    assert verdict.headline.startswith("draft-k2 / greedy: entry gate passed: saving +30.0% [+10.0%, +50.0%]")
    assert "2 of 2 classes" in verdict.checks[2].detail  # fewer than three classes: every class


# One load, code and chat half the tokens each, demand 1000 tokens/s. Each cell saves a whole
# replica at its own demand: code 99 -> 100 tokens/s (11 -> 10), chat 199 -> 200 (6 -> 5). The
# fleet: 1 / (0.5/99 + 0.5/199) = 132.2 -> 8 and 1 / (0.5/100 + 0.5/200) = 133.3 -> 8: no saving.
EVERY_CELL_SAVES = traffic("code: 0.5, chat: 0.5", "1: 1.0")


def test_every_cell_saves_but_the_fleet_does_not() -> None:
    cfg = config(EVERY_CELL_SAVES, demand=1000)
    cells = [decision(cfg, "code", 1, 99, 100, 1.0102, 1.02), decision(cfg, "chat", 1, 199, 200, 1.0051, 1.02)]
    assert all(d.verdict == "adopt" and d.cost and d.cost.saving_fraction for d in cells)
    verdict = arm_mix_verdict(cells, cfg, "draft-k2", "greedy")
    assert (verdict.fleet.baseline_replicas, verdict.fleet.candidate_replicas) == (8, 8)
    assert verdict.fleet.saving_fraction == 0.0
    checks = {c.name: c.passed for c in verdict.checks}
    # The entry gate's saving check fails alone: each class saves beyond noise on its own.
    assert checks == {"saving_beyond_noise": False, "production_load_distribution": True, "prompt_classes": True}


# Demand 1000, code c1 100 -> 105 (10 -> 10 replicas), chat c1 400 -> 420 (3 -> 3): no cell saves.
# The fleet: 1 / (0.5/100 + 0.5/400) = 160 -> 7 and 168 -> 6; at the low end (1.045) 167.2 -> 6.
def test_no_cell_saves_but_the_fleet_saves_a_replica() -> None:
    cfg = config(EVERY_CELL_SAVES, demand=1000)
    cells = [decision(cfg, "code", 1, 100, 105, 1.045, 1.055, 0.02),
             decision(cfg, "chat", 1, 400, 420, 1.045, 1.055, 0.02)]
    assert all(d.verdict == "reject" and d.reason_code == "cost_not_lower" for d in cells)
    verdict = arm_mix_verdict(cells, cfg, "draft-k2", "greedy")
    assert (verdict.fleet.baseline_replicas, verdict.fleet.candidate_replicas) == (7, 6)
    assert verdict.fleet.saving_fraction == pytest.approx(1 / 7)
    assert verdict.fleet.pessimistic_saving_fraction == pytest.approx(1 / 7)
    assert verdict.checks[0].passed


def test_partial_coverage_names_cells_and_is_never_filled_in() -> None:
    cfg = config(HAND)
    unusable = Decision(slice=Slice(arm="draft-k2", method="draft_model", k=2, prompt_class="chat",
                                    load_mode="concurrency", load_value=1.0, sampling="greedy"),
                        verdict="reject", reason_code="candidate_not_usable", reason="no usable candidate cell",
                        comparison=None, cost=None, gates=[])
    verdict = arm_mix_verdict([*hand_decisions(cfg)[:2], unusable], cfg, "draft-k2", "greedy")
    left_out = {(c.prompt_class, c.load_value): c.reason for c in verdict.cells if not c.measured}
    assert left_out == {("chat", 1.0): "unusable: no usable candidate cell", ("chat", 4.0): "not measured"}
    assert verdict.coverage == pytest.approx(0.5)
    assert verdict.headline.startswith("PARTIAL (covers 50.0% of the mix): draft-k2 / greedy:")
    # Only the code cells count: exactly the code class alone.
    assert verdict.fleet.candidate_replicas == verdict.per_class["code"].candidate_replicas == 8
    assert verdict.per_class["chat"].saving_fraction is None
    assert verdict.per_class["chat"].reason == "no measured cell"


def test_an_unmeasured_load_fails_the_load_check_alone() -> None:
    cfg = config(HAND)
    verdict = arm_mix_verdict([hand_decisions(cfg)[i] for i in (0, 2)], cfg, "draft-k2", "greedy")
    checks = {c.name: c for c in verdict.checks}
    assert not checks["production_load_distribution"].passed
    assert checks["production_load_distribution"].detail == "no measured cell at c4"
    assert checks["saving_beyond_noise"].passed and checks["prompt_classes"].passed


def test_two_of_three_classes_fails_the_class_check_alone() -> None:
    cfg = config(traffic("code: 0.4, extraction: 0.3, chat: 0.3", "1: 1.0"), demand=1000)
    cells = [decision(cfg, "code", 1, 100, 200, 1.8, 2.2), decision(cfg, "extraction", 1, 100, 200, 1.8, 2.2),
             decision(cfg, "chat", 1, 100, 100, 0.9, 1.1)]
    verdict = arm_mix_verdict(cells, cfg, "draft-k2", "greedy")
    checks = {c.name: c for c in verdict.checks}
    assert checks["saving_beyond_noise"].passed and checks["production_load_distribution"].passed
    assert not checks["prompt_classes"].passed
    assert checks["prompt_classes"].detail == "2 of 3 classes beyond noise (code, extraction), 3 required"


def test_a_cell_without_qualified_tokens_stops_the_mix_instead_of_being_dropped() -> None:
    cfg = config(EVERY_CELL_SAVES, demand=1000)
    cells = [decision(cfg, "code", 1, 100, 200, 1.8, 2.2), decision(cfg, "chat", 1, 100, 0.0, 0.0, 0.0)]
    verdict = arm_mix_verdict(cells, cfg, "draft-k2", "greedy")
    assert verdict.coverage == 1.0 and verdict.fleet.saving_fraction is None
    assert verdict.fleet.reason == "the speculative arm has no SLO-qualified tokens in a cell of the mix"
    assert not verdict.passed


def test_k_policy_takes_each_loads_k_and_the_baseline_at_k0() -> None:
    cfg = config(HAND)
    k4 = [decision(cfg, pc, load, 100, 100, 0.9, 1.1, arm="draft-k4") for pc in ("code", "chat") for load in (1, 4)]
    verdict = policy_mix_verdict([*hand_decisions(cfg), *k4], cfg, "draft", {1.0: 2, 4.0: 0}, "greedy")
    assert verdict.subject == "draft k policy (c1: k=2, c4: k=0)"
    assert {(c.prompt_class, c.load_value): c.k for c in verdict.cells} == {
        ("code", 1.0): 2, ("code", 4.0): 0, ("chat", 1.0): 2, ("chat", 4.0): 0}
    # k=2 at c1 as in the hand case; c4 is the baseline itself (400 tokens/s): the same 320 -> 7.
    # Low ends: c1 at 150 and 300, c4 exactly the baseline: 1 / (.25/150 + .25/400 + .25/300 + .25/400)
    # = 266.7 -> ceil(7.5) = 8 of 10 replicas.
    assert verdict.fleet.candidate_tokens_per_s_per_replica == pytest.approx(320.0)
    assert verdict.fleet.pessimistic_saving_fraction == pytest.approx(1 - 8 / 10)
    assert verdict.fleet.optimistic_saving_fraction == pytest.approx(1 - 6 / 10)  # 1/(.001+.000625+.0005+.000625)


def test_a_load_without_k_in_the_policy_is_not_measured() -> None:
    cfg = config(HAND)
    verdict = policy_mix_verdict(hand_decisions(cfg), cfg, "draft", {1.0: 2}, "greedy")
    assert verdict.coverage == pytest.approx(0.5)
    assert not verdict.checks[1].passed


def test_without_traffic_block_the_default_mix_says_so() -> None:
    cfg = config()
    mix = effective_mix(cfg)
    assert mix.default and mix.share_basis == "tokens"
    assert mix.class_shares == pytest.approx({"code": 1 / 3, "extraction": 1 / 3, "chat": 1 / 3})
    assert mix.load_shares == {1.0: 0.5, 4.0: 0.5}
    verdicts = mix_verdicts([], [], cfg)
    assert [v.subject for v in verdicts] == ["draft-k2", "draft-k4", "ngram-k3"]
    assert verdicts[0].headline.startswith("PARTIAL (covers 0.0% of the mix): ")
    assert verdicts[0].headline.endswith("(default mix: no traffic block)")
    assert verdicts[0].other_gates.detail == "no measured cell" and not verdicts[0].other_gates.passed


def test_a_gate_that_rejects_a_measured_cell_makes_the_verdict_not_adoptable() -> None:
    cfg = config(HAND)
    decisions = hand_decisions(cfg)
    where, comparison = decisions[0].slice, decisions[0].comparison
    assert comparison is not None
    failed = GateResult(gate="stochastic_distribution", passed=False, detail="distributions differ")
    decisions[0] = decide(where, comparison, cfg.hardware, 0.02, "test", [*PASS, failed], QUALITY)
    verdict = arm_mix_verdict(decisions, cfg, "draft-k2", "greedy")
    assert verdict.passed and not verdict.adoptable  # the entry gate weighs cost alone
    assert verdict.other_gates.detail == "1 of 4 measured cells rejected by gate_failed"
    assert [c.blocked_by for c in verdict.cells] == ["gate_failed", None, None, None]
    assert "entry gate passed, other gates FAILED: not adoptable" in verdict.headline
    assert arm_mix_verdict(hand_decisions(cfg), cfg, "draft-k2", "greedy").adoptable


def test_mix_verdicts_add_each_arm_specs_all_class_k_policy() -> None:
    from specfleet.kpolicy import k_policy_reports

    cfg = config(HAND)
    decisions = hand_decisions(cfg)
    policies = k_policy_reports(decisions, [], cfg)
    verdicts = mix_verdicts(decisions, policies, cfg)
    policy = [v for v in verdicts if "k policy" in v.subject]
    assert [v.subject for v in policy] == ["draft k policy (c1: k=2, c4: k=0)"]
    assert [(c.prompt_class, c.load_value, c.k) for c in policy[0].cells] == [
        ("code", 1.0, 2), ("code", 4.0, 0), ("chat", 1.0, 2), ("chat", 4.0, 0)]


def test_request_shares_become_token_shares_by_tokens_per_request() -> None:
    mix = TrafficMix(share_basis="requests", class_shares={"code": 0.5, "chat": 0.5}, load_mode="concurrency",
                     load_shares={1.0: 1.0}, default=False, note="test")
    assert cell_token_shares(mix, {"code": 100, "chat": 300}) == pytest.approx({("code", 1.0): 0.25,
                                                                                  ("chat", 1.0): 0.75})
    with pytest.raises(InputError, match="tokens per request of chat"):
        cell_token_shares(mix, {"code": 100})


def _error(text: str) -> str:
    with pytest.raises(InputError) as caught:
        parse_sweep_config(DEMO + text, "sweep.yaml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("sweep.yaml:")
    return message


@pytest.mark.parametrize(("block", "expected"), [
    (traffic("code: 0.5, chat: 0.4", "1: 0.5, 4: 0.5"), "traffic: prompt_classes: shares sum to 0.9, not 1"),
    (traffic("code: 0.5, chat: 0.5", "1: 0.5, 4: 0.6"), "traffic: concurrency: shares sum to 1.1, not 1"),
    (traffic("code: 1.5, chat: -0.5", "1: 1.0"), "traffic.prompt_classes.chat: Input should be greater than or"),
    (traffic("code: 0.5, rag: 0.5", "1: 1.0"), "traffic: prompt_classes.rag: not a prompt class of the sweep"),
    (traffic("code: 0.5, chat: 0.5", "1: 0.5, 16: 0.5"), "traffic: concurrency.16: not a load of the sweep"),
    (traffic("code: 1.0", "1: 1.0", basis="bytes"), "traffic.share_basis: Input should be 'tokens' or 'requests'"),
    ("traffic:\n  share_basis: tokens\n  prompt_classes: {code: 1.0}\n  rates_per_s: {0.5: 1.0}\n",
     "traffic: rates_per_s.0.5: not a load of the sweep (load.rates_per_s: none)"),
    ("traffic:\n  share_basis: tokens\n  prompt_classes: {code: 1.0}\n",
     "traffic: give exactly one load distribution"),
])
def test_a_bad_traffic_block_names_the_field(block: str, expected: str) -> None:
    assert expected in _error(block)


def test_the_demo_and_the_h200_config_carry_an_illustrative_traffic_block() -> None:
    assert "traffic:" not in DEMO
    for name in ("demo-cpu.yaml", "llama70b-h200.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert "ILLUSTRATIVE traffic mix" in text
        assert not effective_mix(parse_sweep_config(text, name)).default


def test_shares_within_tolerance_validate() -> None:
    cfg = config(traffic("code: 0.3333, extraction: 0.3333, chat: 0.3333", "1: 0.25, 4: 0.75"))
    assert sum(effective_mix(cfg).class_shares.values()) == pytest.approx(1.0)
    assert not effective_mix(cfg).default
