"""Cell decisions on synthetic sweeps: the order of the tests, the cost figures and the intervals the
one rule reads, the negative-cell table, and the per-request samples they are made from."""

import numpy as np
import pytest

from specfleet.contract import CellIdentity, SweepConfig
from specfleet.errors import InputError
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.results import RequestRecord
from specfleet.stats import bootstrap as bs
from specfleet.stats.samples import CellSample
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.table import decision_rows, hardware_label
from tests.support.synthetic_sweep import Sweep, bracketed, config, history

CFG = config(loads=(4,))
CLASS_RATE = {"code": 100.0, "extraction": 140.0, "chat": 80.0}
END = {"code": 1.02, "extraction": 0.98, "chat": 1.01}
GREEDY = {"p0": [1, 2, 3], "p1": [4, 5, 6]}


def rate(ident: CellIdentity) -> float:
    return CLASS_RATE[ident.prompt_class]


def end(ident: CellIdentity) -> float:
    return rate(ident) * END[ident.prompt_class]


def demand(value: float) -> SweepConfig:
    return CFG.model_copy(update={"hardware": CFG.hardware.model_copy(update={"peak_demand_tokens_per_s": value})})


HISTORY = history(CFG, rate, end)


def decisions(k2: float = 2.1, k4: float = 1.0, cfg: SweepConfig | None = None,
              probes: dict[str, EquivalenceProbe] | None = None) -> list[Decision]:
    """Three classes at c4, the baseline bracketing draft-k2 (``k2`` times the baseline) and draft-k4,
    the noise pooled with four earlier sweeps' baselines (one sweep's three pairs alone leave it wide)."""
    cfg = cfg or demand(2000)
    sweep = bracketed(cfg, rate, end, {"draft-k2": lambda i: rate(i) * k2, "draft-k4": lambda i: rate(i) * k4})
    return sweep.analyse(probes, HISTORY).decisions


def one(ds: list[Decision], arm: str = "draft-k2", prompt_class: str = "code") -> Decision:
    return next(d for d in ds if (d.slice.arm, d.slice.prompt_class) == (arm, prompt_class))


def test_a_clear_win_is_adopted_with_whole_replica_cost_and_intervals() -> None:
    d = one(decisions())
    assert (d.verdict, d.reason_code) == ("adopt", "adopt")
    cost, interval, comparison = d.cost, d.interval, d.comparison
    assert cost is not None and interval is not None and comparison is not None
    base = np.exp(np.mean(np.log([100.0, 102.0])))  # the opening and closing runs' geometric mean
    assert comparison.baseline_qualified_tokens_per_s == pytest.approx(base, rel=1e-6)
    assert comparison.baseline_runs == 2 and comparison.candidate_runs == 1
    assert (cost.baseline_replicas, cost.candidate_replicas) == (20, 10)
    assert cost.saving_fraction == pytest.approx(0.5)
    assert interval.basis == "runs" and interval.sides == "two" and interval.confidence == 0.95
    assert interval.low is not None and interval.high is not None
    assert interval.low < 210.0 / base < interval.high
    corrected = comparison.qualified_tps_speedup_corrected
    assert corrected is not None and corrected.sides == "each" and corrected.comparisons == d.comparisons
    assert corrected.low is not None and interval.low is not None and corrected.low < interval.low
    assert cost.break_even_speedup is not None and cost.break_even_speedup == pytest.approx(20 / 19 * 100 / base,
                                                                                            rel=1e-9)
    assert cost.pessimistic_saving_fraction is not None and cost.pessimistic_saving_fraction > 0
    assert f"corrected for {d.comparisons} comparisons" in d.reason


def test_the_same_rate_is_inconclusive_not_a_reject() -> None:
    d = one(decisions(k2=1.0))
    corrected = d.comparison.qualified_tps_speedup_corrected if d.comparison else None
    assert d.cost is not None and d.cost.saving_fraction is not None and d.cost.saving_fraction <= 0
    assert corrected is not None and corrected.high is not None and d.cost.break_even_speedup is not None
    assert corrected.high > d.cost.break_even_speedup  # the interval reaches the break-even: no verdict on it
    assert (d.verdict, d.reason_code) == ("inconclusive", "within_noise")
    assert d.detection is not None and d.detection.to_decide is not None


def test_an_interval_wholly_below_the_break_even_is_shown_not_to_pay() -> None:
    d = one(decisions(k2=0.5))
    corrected = d.comparison.qualified_tps_speedup_corrected if d.comparison else None
    assert corrected is not None and corrected.high is not None and d.cost is not None
    assert d.cost.break_even_speedup is not None and corrected.high < d.cost.break_even_speedup
    assert (d.verdict, d.reason_code) == ("reject", "shown_not_to_pay") and "shown not to pay" in d.reason
    assert d.detection is not None and d.detection.to_decide is None


def test_a_saving_within_the_noise_is_inconclusive() -> None:
    d = one(decisions(k2=1.03, cfg=demand(1e9)))
    assert d.reason_code == "within_noise" and d.verdict == "inconclusive"
    assert d.cost is not None and d.cost.saving_fraction is not None and d.cost.saving_fraction > 0


def test_a_two_verdict_summary_reads_its_statistical_rejects_as_inconclusive() -> None:
    d = one(decisions(k2=1.03, cfg=demand(1e9)))
    old = d.model_dump(mode="json") | {"verdict": "reject"}
    old.pop("detection")
    assert Decision.model_validate(old).verdict == "inconclusive"
    gate = one(decisions(k2=0.5)).model_dump(mode="json") | {"verdict": "reject", "reason_code": "gate_failed"}
    assert Decision.model_validate(gate).verdict == "reject"


def test_a_missed_slo_is_rejected_and_no_gate_or_a_failed_one_too() -> None:
    tight = CFG.model_copy(update={"slo": CFG.slo.model_copy(update={"ttft_ms": 20.0})})
    sweep = Sweep(tight)
    sweep.arm("baseline", rate)
    sweep.arm("draft-k2", lambda i: rate(i) * 2, slow=3)  # 3 of 24 requests over the TTFT SLO: p95 misses it
    sweep.arm("draft-k4", rate)
    sweep.arm("baseline", end, phase="baseline_end")
    assert one(sweep.analyse().decisions).reason_code == "slo_missed"
    probes = {"baseline": EquivalenceProbe(arm="baseline", greedy=GREEDY, greedy_repeat=GREEDY),
              "draft-k2": EquivalenceProbe(arm="draft-k2", greedy=GREEDY | {"p0": [9, 9, 9]})}
    for k2 in (2.1, 1.0, 0.5):  # a failed gate rejects whatever the interval: above, across or below the break-even
        ds = decisions(k2=k2, probes=probes)
        assert (one(ds).verdict, one(ds).reason_code) == ("reject", "gate_failed")
        assert "greedy_exact_match" in one(ds).reason
    assert one(ds, "draft-k4").reason_code == "no_gate"  # no stored probe of draft-k4


def test_a_quality_gate_that_did_not_run_rejects_with_its_own_code_and_says_why() -> None:
    sweep = bracketed(demand(2000), rate, end, {"draft-k2": lambda i: rate(i) * 2, "draft-k4": rate})
    analysis = sweep.analyse(history=HISTORY)
    from specfleet.verdicts.analysis import analyse_sweep

    probes = {arm: EquivalenceProbe(arm=arm, greedy=GREEDY, greedy_repeat=GREEDY if arm == "baseline" else None)
              for arm in ("baseline", "draft-k2", "draft-k4")}
    without = analyse_sweep(sweep.config, sweep.cells, sweep.records, probes, {}, history=HISTORY)
    d = one(without.decisions)
    assert (d.verdict, d.reason_code) == ("reject", "quality_not_run")
    assert "not adopted, since a gate that did not run has not passed (were it to pass: whole-replica cost" \
        in d.reason
    assert one(analysis.decisions).reason_code == "adopt"


def test_without_a_measured_twice_configuration_the_noise_is_unknown() -> None:
    sweep = Sweep(demand(2000))
    sweep.arm("baseline", rate)
    sweep.arm("draft-k2", lambda i: rate(i) * 2)
    sweep.arm("draft-k4", rate)
    d = one(sweep.analyse().decisions)
    assert d.reason_code == "no_noise_estimate" and "no configuration was measured twice" in d.reason
    assert d.interval is not None and d.interval.confidence is None and d.interval.basis == "none"
    assert d.interval.low is None and d.interval.high is None


def test_unusable_cells_are_rejected_with_their_reasons() -> None:
    sweep = bracketed(demand(2000), rate, end, {"draft-k2": lambda i: rate(i) * 2, "draft-k4": rate},
                      status={"draft-k2": lambda i: "invalid"})
    d = one(sweep.analyse().decisions)
    assert d.reason_code == "candidate_not_usable" and "client saturated" in d.reason and d.comparison is None
    only_end = Sweep(demand(2000))
    only_end.arm("baseline", rate, status=lambda i: "invalid")
    only_end.arm("draft-k2", lambda i: rate(i) * 2)
    only_end.arm("draft-k4", rate)
    only_end.arm("baseline", end, phase="baseline_end")
    assert one(only_end.analyse().decisions).comparison is not None  # the closing run is the baseline then
    none = Sweep(demand(2000))
    none.arm("baseline", rate, status=lambda i: "invalid")
    none.arm("draft-k2", lambda i: rate(i) * 2)
    none.arm("draft-k4", rate)
    assert one(none.analyse().decisions).reason_code == "baseline_not_usable"


def test_repeats_enter_both_arms_and_the_noise() -> None:
    cfg = demand(2000).model_copy(update={"load": CFG.load.model_copy(update={"repeats": 2})})
    d = one(decisions(cfg=cfg))
    assert d.comparison is not None and (d.comparison.baseline_runs, d.comparison.candidate_runs) == (4, 2)
    assert d.verdict == "adopt"


def test_decisions_are_reproducible() -> None:
    assert [d.model_dump() for d in decisions()] == [d.model_dump() for d in decisions()]


def test_a_usable_cell_needs_its_sample_and_its_rate() -> None:
    from specfleet.verdicts.analysis import decide_sweep

    sweep = bracketed(demand(2000), rate, end, {"draft-k2": lambda i: rate(i) * 2, "draft-k4": rate})
    with pytest.raises(InputError, match="no per-request sample"):
        decide_sweep(sweep.config, sweep.cells, {}, {}, {}, {})
    cell = sweep.cells[-1]
    broken = cell.model_copy(update={"throughput": cell.throughput.model_copy(update={"duration_s": 0.0,
                                                                                      "qualified_tokens_per_s": None})})
    samples = {c.key: CellSample.from_records(broken if c.key == cell.key else c, sweep.records[c.key], CFG.slo)
               for c in sweep.cells}
    with pytest.raises(InputError, match=r"baseline .*: no qualified tokens per s"):
        decide_sweep(sweep.config, [*sweep.cells[:-1], broken], samples, {}, {}, {})


def test_negative_cells_are_the_rejects_and_carry_the_same_detail() -> None:
    ds = decisions(k2=1.0, k4=0.5)
    rows = decision_rows(ds, CFG.engine.name, hardware_label(CFG))
    negative = [row for row in rows if row.verdict == "reject"]  # SweepReport.negative_cells
    assert len(rows) == 6 and {r.k for r in negative} == {4}  # draft-k2 is inconclusive: not a negative result
    assert {r.verdict for r in rows if r.k == 2} == {"inconclusive"}
    row = negative[0].model_dump(mode="json")
    assert row["reason_code"] == "shown_not_to_pay"
    assert row["engine"] == "vllm" and row["concurrency"] == 4 and row["method"] == "draft_model"
    assert "cpu" in str(row["hardware"])
    assert set(row) == set(rows[0].model_dump(mode="json"))


def test_every_decision_reads_the_pooled_noise_floor() -> None:
    ds = decisions()
    assert len({d.cost.noise_floor for d in ds if d.cost}) == 1
    assert all(d.cost and d.cost.noise_source.startswith("30 runs in 15 repeated groups on 10 server lives")
               and d.cost.noise_source.endswith("pooled with 4 earlier sweeps of this config and fingerprint")
               for d in ds)


def test_a_replica_check_is_a_baseline_run_on_another_server() -> None:
    sweep = bracketed(demand(2000), rate, end, {"draft-k2": lambda i: rate(i) * 2, "draft-k4": rate})
    base = next(c for c in sweep.cells if c.identity.method == "baseline")
    check = base.identity.model_copy(update={"replica_check": True})
    sweep.add(check, rate(check) * 1.05, "baseline/main/r1")
    d = next(d for d in sweep.analyse().decisions if d.slice.arm == "draft-k2"
             and d.slice.prompt_class == base.identity.prompt_class)
    assert d.comparison is not None and d.comparison.baseline_runs == 3


def test_sample_from_records_counts_only_slo_met_tokens() -> None:
    ms = 1_000_000
    fast = RequestRecord(index=0, prompt_id="a", send_ns=0, chunk_ns=(100 * ms, 110 * ms, 120 * ms),
                         chunk_tokens=(1, 2, 1), end_ns=121 * ms, usage_completion_tokens=4)
    slow = RequestRecord(index=1, prompt_id="b", send_ns=0, chunk_ns=(100 * ms, 900 * ms),
                         chunk_tokens=(1, 1), end_ns=901 * ms, usage_completion_tokens=2)
    failed = RequestRecord(index=2, prompt_id="c", send_ns=0, error="timeout", end_ns=50 * ms)
    ident = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=4.0,
                         prompt_class="code", sampling="greedy", repeat=0)
    cell = Sweep(CFG).add(ident, 100.0, "baseline/main")
    sample = CellSample.from_records(cell, [fast, slow, failed], CFG.slo)
    assert sample.qualified_tokens.tolist() == [4.0, 0.0, 0.0]
    assert sample.durations_s == pytest.approx([0.121, 0.901, 0.05])
    assert sample.itl_ms[0].tolist() == [10.0, 10.0]
    assert sample.itl_ms[2].size == 0
    assert np.isnan(sample.ttft_ms[2])


def test_pooled_percentile_bootstrap_resamples_whole_requests() -> None:
    rng = np.random.default_rng(0)
    series = [np.full(10, 1.0), np.full(10, 100.0)]
    reps = bs.pooled_percentile_replicates(series, 50, rng, 200)
    assert set(np.unique(reps)) <= {1.0, 50.5, 100.0}


def test_an_interval_over_requests_alone_states_no_confidence() -> None:
    replicates = np.array([0.9, 1.0, 1.1, np.nan])
    assert bs.percentile_interval(1.0, replicates, 0.95, "requests").confidence is None
    assert bs.percentile_interval(1.0, replicates, 0.95, "items").confidence == 0.95
    assert bs.percentile_interval(1.0, np.array([np.nan, np.nan, 1.0]), 0.95, "items").low is None


def test_a_cell_measured_at_synthetic_acceptance_is_never_decided_on() -> None:
    """A calibration cell (``synthetic_acceptance``) adds no decision, policy or verdict; the notes count it."""
    sweep = bracketed(demand(2000), rate, end, {"draft-k2": lambda i: rate(i) * 2, "draft-k4": rate})
    before = sweep.analyse(history=HISTORY)
    cand = next(c for c in sweep.cells if c.identity.arm == "draft-k2")
    synthetic = cand.identity.model_copy(update={"synthetic": True, "arm": "draft-k2", "repeat": 1})
    sweep.add(synthetic, rate(synthetic) * 9.0, "draft-k2/synthetic")
    after = sweep.analyse(history=HISTORY)
    assert [(d.slice, d.verdict, d.reason_code) for d in after.decisions] == [
        (d.slice, d.verdict, d.reason_code) for d in before.decisions]
    same = one(after.decisions, prompt_class=synthetic.prompt_class).comparison
    assert same is not None and same.candidate_runs == 1  # the 9x synthetic run is not a candidate run
    assert after.synthetic_cells == [synthetic.label] and "SYNTHETIC" in synthetic.label
    assert any("synthetic acceptance" in note for note in after.notes)
