"""The verdict at the traffic mix on synthetic sweeps: the point figures against hand-computed
cases (harmonic means, whole replicas), the checks one by one, k policies, and the traffic block's
errors. The intervals themselves are the decision rule's (tests/unit/specfleet/verdicts/test_decision_rule.py)."""

import re
from pathlib import Path

import pytest

from specfleet.contract import CellIdentity, SweepConfig, parse_sweep_config
from specfleet.errors import InputError
from specfleet.verdicts.traffic_mix import TrafficMix, cell_token_shares, effective_mix
from tests.support.mix_verdict import BASE, CAND, HAND, hand_config, traffic, verdict
from tests.support.synthetic_sweep import Sweep, bracketed, config

ROOT = Path(__file__).resolve().parents[4]
DEMO_WITH_TRAFFIC = (ROOT / "configs" / "demo-cpu.yaml").read_text()
DEMO = re.sub(r"\ntraffic:\n(  .*\n)+", "\n", DEMO_WITH_TRAFFIC)  # the tests add their own block


def usd_per_million(replicas: int, demand: float) -> float:
    return replicas * 1.0 * 1e6 / (3600 * demand)  # one accelerator per replica at 1 USD per hour


def test_two_classes_two_loads_by_hand() -> None:
    v = verdict(hand_config(), BASE, CAND)
    fleet = v.fleet
    assert fleet.baseline_tokens_per_s_per_replica == pytest.approx(200.0)
    assert fleet.candidate_tokens_per_s_per_replica == pytest.approx(320.0)
    assert (fleet.baseline_replicas, fleet.candidate_replicas) == (10, 7)
    assert fleet.baseline_cost_per_million_usd == pytest.approx(usd_per_million(10, 1999))
    assert fleet.candidate_cost_per_million_usd == pytest.approx(usd_per_million(7, 1999))
    assert fleet.saving_fraction == pytest.approx(0.3)
    assert fleet.speedup is not None and fleet.speedup.estimate == pytest.approx(1.6)
    assert v.per_class["code"].saving_fraction == pytest.approx(1 - 8 / 13)
    assert v.per_class["chat"].saving_fraction == pytest.approx(1 - 5 / 8)
    assert v.coverage == 1.0
    assert v.comparisons is not None and v.comparisons > 1
    assert f"(corrected for {v.comparisons} comparisons)" in v.headline


def test_the_pessimistic_saving_is_the_whole_replica_saving_at_the_corrected_low_end() -> None:
    v = verdict(hand_config(), BASE, CAND)
    interval = v.fleet.speedup_corrected
    assert interval is not None and interval.low is not None and interval.sides == "each"
    replicas = -(-1999 // (200.0 * interval.low))
    assert v.fleet.pessimistic_saving_fraction == pytest.approx(1 - replicas / 10)


# One load, code and chat half the tokens each, demand 1000 tokens/s. Each cell saves a whole
# replica at its own demand: code 99 -> 100 tokens/s (11 -> 10), chat 199 -> 200 (6 -> 5). The
# fleet: 1 / (0.5/99 + 0.5/199) = 132.2 -> 8 and 1 / (0.5/100 + 0.5/200) = 133.3 -> 8: no saving.
def test_every_cell_saves_but_the_fleet_does_not() -> None:
    cfg = hand_config(traffic("code: 0.5, chat: 0.5", "1: 1.0"), 1000, loads=(1,))
    v = verdict(cfg, {("code", 1.0): 99.0, ("chat", 1.0): 199.0}, {("code", 1.0): 100.0, ("chat", 1.0): 200.0})
    assert (v.fleet.baseline_replicas, v.fleet.candidate_replicas) == (8, 8)
    assert v.fleet.saving_fraction == 0.0
    assert v.per_class["code"].saving_fraction == pytest.approx(1 - 10 / 11)
    assert not next(c for c in v.checks if c.name == "saving_beyond_noise").passed


# Demand 1000, code c1 100 -> 105 (10 -> 10 replicas), chat c1 400 -> 420 (3 -> 3): no cell saves.
# The fleet: 1 / (0.5/100 + 0.5/400) = 160 -> 7 and 168 -> 6.
def test_no_cell_saves_but_the_fleet_saves_a_replica() -> None:
    cfg = hand_config(traffic("code: 0.5, chat: 0.5", "1: 1.0"), 1000, loads=(1,))
    sweep = bracketed(cfg, lambda i: {"code": 100.0, "chat": 400.0}[i.prompt_class],
                      lambda i: {"code": 100.0, "chat": 400.0}[i.prompt_class],
                      {"draft-k2": lambda i: {"code": 105.0, "chat": 420.0}[i.prompt_class],
                       "draft-k4": lambda i: {"code": 100.0, "chat": 400.0}[i.prompt_class]})
    analysis = sweep.analyse()
    assert {d.reason_code for d in analysis.decisions if d.slice.arm == "draft-k2"} == {"shown_not_to_pay"}
    v = next(v for v in analysis.mix if v.name == "draft-k2")
    assert (v.fleet.baseline_replicas, v.fleet.candidate_replicas) == (7, 6)
    assert v.fleet.saving_fraction == pytest.approx(1 / 7)


def test_partial_coverage_names_cells_is_never_filled_in_and_never_adoptable() -> None:
    cfg = hand_config()
    v = verdict(cfg, BASE, CAND, status={"draft-k2": lambda i: "invalid" if i.prompt_class == "chat" else "ok"})
    left_out = {(c.prompt_class, c.load_value): c.reason for c in v.cells if not c.measured}
    assert set(left_out) == {("chat", 1.0), ("chat", 4.0)}
    assert all(r is not None and r.startswith("unusable: no usable candidate cell") for r in left_out.values())
    assert v.coverage == pytest.approx(0.5)
    assert v.headline.startswith("PARTIAL (covers 50.0% of the mix): draft-k2 / greedy:")
    assert not v.adoptable
    assert v.fleet.candidate_replicas == v.per_class["code"].candidate_replicas == 8  # the code cells alone
    assert v.per_class["chat"].saving_fraction is None and v.per_class["chat"].reason == "no measured cell"
    coverage = next(c for c in v.checks if c.name == "coverage")
    assert not coverage.passed and "under analysis.min_coverage 100%" in coverage.detail


def test_min_coverage_admits_a_declared_share() -> None:
    cfg = hand_config(HAND + "")
    cfg = cfg.model_copy(update={"analysis": cfg.analysis.model_copy(update={"min_coverage": 0.5})})
    v = verdict(cfg, BASE, CAND, status={"draft-k2": lambda i: "invalid" if i.prompt_class == "chat" else "ok"})
    assert next(c for c in v.checks if c.name == "coverage").passed
    assert not v.adoptable  # the unusable candidate cells still count against the arm
    assert "candidate_not_usable" in v.other_gates.detail


def test_an_unmeasured_load_fails_the_load_check() -> None:
    cfg = hand_config()
    sweep = Sweep(cfg)
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)])
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)], phase="baseline_end")
    for ident in (i for i in _cells(cfg, "draft-k2") if i.load_value == 1.0):
        sweep.add(ident, CAND[(ident.prompt_class, ident.load_value)], "draft-k2/main")
    v = next(v for v in sweep.analyse().mix if v.name == "draft-k2")
    check = next(c for c in v.checks if c.name == "production_load_distribution")
    assert not check.passed and check.detail == "no measured cell at c4"
    assert [c.reason for c in v.cells if not c.measured] == ["not measured", "not measured"]


def _cells(cfg: SweepConfig, arm: str) -> list[CellIdentity]:
    from specfleet.contract import arm_plans
    from specfleet.contract.matrix import cell_identities

    return cell_identities(cfg, next(p for p in arm_plans(cfg) if p.arm == arm))


def test_the_seed_asks_for_three_classes_and_says_when_the_config_has_fewer() -> None:
    v = verdict(hand_config(), BASE, CAND)
    check = next(c for c in v.checks if c.name == "prompt_classes")
    assert not check.passed
    assert check.detail.endswith("3 required; the config has 2 prompt classes in its mix, fewer than the seed's 3")


def test_a_cell_without_qualified_tokens_stops_the_mix_instead_of_being_dropped() -> None:
    cfg = hand_config()
    tight = cfg.model_copy(update={"slo": cfg.slo.model_copy(update={"ttft_ms": 20.0})})
    sweep = Sweep(tight)
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)])
    sweep.arm("baseline", lambda i: BASE[(i.prompt_class, i.load_value)], phase="baseline_end")
    for ident in _cells(tight, "draft-k2"):
        none_meet = (ident.prompt_class, ident.load_value) == ("chat", 4.0)
        sweep.add(ident, CAND[(ident.prompt_class, ident.load_value)], "draft-k2/main", slow=24 if none_meet else 0)
    v = next(v for v in sweep.analyse().mix if v.name == "draft-k2")
    assert v.coverage == 1.0 and v.fleet.saving_fraction is None
    assert v.fleet.reason == (
        "the speculative arm or the baseline has no SLO-qualified tokens in a measured cell of the mix")
    assert not v.adoptable


def test_a_gate_that_rejects_a_measured_cell_makes_the_verdict_not_adoptable() -> None:
    from specfleet.gates.equivalence import EquivalenceProbe

    cfg = hand_config()
    sweep = bracketed(cfg, lambda i: BASE[(i.prompt_class, i.load_value)],
                      lambda i: BASE[(i.prompt_class, i.load_value)],
                      {"draft-k2": lambda i: CAND[(i.prompt_class, i.load_value)], "draft-k4": lambda i: 100.0})
    greedy = {"p0": [1, 2, 3], "p1": [4, 5, 6]}
    probes = {"baseline": EquivalenceProbe(arm="baseline", greedy=greedy, greedy_repeat=greedy),
              "draft-k2": EquivalenceProbe(arm="draft-k2", greedy=greedy | {"p0": [1, 2, 9]}),
              "draft-k4": EquivalenceProbe(arm="draft-k4", greedy=greedy)}
    v = next(v for v in sweep.analyse(probes).mix if v.name == "draft-k2")
    assert not v.other_gates.passed and not v.adoptable and v.verdict == "reject"  # whatever its interval
    assert v.model_dump(mode="json")["verdict"] == "reject" and v.headline.split(": ")[1].startswith("REJECT")
    assert v.other_gates.detail == "4 of 4 cells rejected by gate_failed"
    assert {c.blocked_by for c in v.cells} == {"gate_failed"}


def test_k_policy_serves_each_load_with_its_k_and_a_k0_load_with_the_baseline() -> None:
    cfg = hand_config()
    sweep = bracketed(cfg, lambda i: BASE[(i.prompt_class, i.load_value)],
                      lambda i: BASE[(i.prompt_class, i.load_value)],
                      {"draft-k2": lambda i: CAND[(i.prompt_class, i.load_value)] * (4.0 if i.load_value == 1 else 0.5),
                       "draft-k4": lambda i: BASE[(i.prompt_class, i.load_value)] * 0.5})
    analysis = sweep.analyse()
    policy = next(v for v in analysis.mix if v.name == "draft-k-policy")
    assert policy.subject == "draft k policy (c1: k=2, c4: k=0)"
    assert {(c.prompt_class, c.load_value): (c.k, c.measured) for c in policy.cells} == {
        ("code", 1.0): (2, True), ("code", 4.0): (0, True), ("chat", 1.0): (2, True), ("chat", 4.0): (0, True)}
    # c1 at 4x the hand case's candidate, c4 the baseline itself: 1 / (.25/800 + .25/400 + .25/1600 + .25/400)
    assert policy.fleet.candidate_tokens_per_s_per_replica == pytest.approx(1 / (.25 / 800 + .25 / 400 + .25 / 1600
                                                                                 + .25 / 400))
    assert policy.fleet.speedup is None  # chosen on the same data: only the corrected interval is shown
    assert policy.fleet.speedup_corrected is not None


def test_without_traffic_block_the_default_mix_says_so() -> None:
    cfg = config()
    mix = effective_mix(cfg)
    assert mix.default and mix.share_basis == "tokens"
    assert mix.class_shares == pytest.approx({"code": 1 / 3, "extraction": 1 / 3, "chat": 1 / 3})
    assert mix.load_shares == {1.0: 0.5, 4.0: 0.5}
    v = next(v for v in Sweep(cfg).analyse().mix if v.name == "draft-k2")
    assert v.headline.startswith("PARTIAL (covers 0.0% of the mix): ")
    assert v.headline.endswith("(default mix: no traffic block)")
    assert v.other_gates.detail == "no measured cell" and not v.other_gates.passed


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
    ("analysis: {min_coverage: 1.5}\n", "analysis.min_coverage: Input should be less than or equal to 1"),
    ("analysis: {error_control: holm}\n", "analysis.error_control: Input should be 'family_wise' or"),
])
def test_a_bad_traffic_or_analysis_block_names_the_field(block: str, expected: str) -> None:
    assert expected in _error(block)


def test_the_demo_and_the_h200_config_carry_an_illustrative_traffic_block() -> None:
    assert "traffic:" not in DEMO
    for name in ("demo-cpu.yaml", "llama70b-h200.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert "ILLUSTRATIVE traffic mix" in text
        assert not effective_mix(parse_sweep_config(text, name)).default


def test_shares_within_tolerance_validate() -> None:
    cfg = config(extra=traffic("code: 0.3333, extraction: 0.3333, chat: 0.3333", "1: 0.25, 4: 0.75"))
    assert sum(effective_mix(cfg).class_shares.values()) == pytest.approx(1.0)
    assert not effective_mix(cfg).default
