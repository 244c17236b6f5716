"""Comparisons, verdicts and the negative-cell table on synthetic cells with seeded samples."""

from pathlib import Path

import numpy as np
import pytest

from specfleet.contract import parse_sweep_config
from specfleet.contract.matrix import CellIdentity
from specfleet.decision_table import decision_rows, negative_cells
from specfleet.decisions import Decision, decide_all
from specfleet.errors import InputError
from specfleet.results.cell import CellResult, DistributionSummary, EnergyReading, SpecDecodeStats, Throughput
from specfleet.results.records import RequestRecord
from specfleet.stats import bootstrap as bs
from specfleet.stats.noise import baseline_noise, noise_for
from specfleet.stats.quality import GateResult, quality_not_run
from specfleet.stats.samples import CellSample

ROOT = Path(__file__).resolve().parents[3]
CONFIG = parse_sweep_config((ROOT / "configs" / "demo-cpu.yaml").read_text(), "demo-cpu.yaml")
EMPTY = DistributionSummary(count=0, mean=None, p50=None, p95=None, p99=None)
PASS = [GateResult(gate="greedy_exact_match", passed=True, detail="6/6")]
QUALITY_PASS = GateResult(gate="quality", passed=True, detail="code/greedy: candidate 0.600 vs baseline 0.600")
N_REQUESTS = 40


def make_cell(arm: str = "baseline", k: int | None = None, *, tps: float = 100.0, load: int = 4,
              prompt_class: str = "code", repeat: int = 0, phase: str = "main", status: str = "ok",
              failed: int = 0, acceptance: float = 0.6) -> CellResult:
    method = "baseline" if k is None else arm.rsplit("-k", 1)[0].replace("draft", "draft_model")
    ident = CellIdentity(arm=arm, method=method, k=k, load_mode="concurrency", load_value=load,
                         prompt_class=prompt_class, sampling="greedy", repeat=repeat,
                         phase=phase)  # type: ignore[arg-type]
    spec = None if k is None else SpecDecodeStats(
        num_drafts=1000, num_draft_tokens=1000 * k, num_accepted_tokens=int(1000 * k * acceptance),
        accepted_per_position=[], acceptance_rate=acceptance, mean_acceptance_length=1 + k * acceptance,
        acceptance_per_position=[])
    return CellResult(
        identity=ident, key=ident.key("test"), status=status,  # type: ignore[arg-type]
        reasons=[] if status == "ok" else ["too many errors"],
        requests_planned=N_REQUESTS, completed=N_REQUESTS - failed, failed=failed, slo_met=N_REQUESTS,
        ttft_ms=EMPTY, itl_per_chunk_ms=EMPTY, itl_per_token_ms=EMPTY, tpot_ms=EMPTY, e2e_ms=EMPTY,
        throughput=Throughput(duration_s=10.0, output_tokens=int(tps * 10), qualified_output_tokens=int(tps * 10),
                              output_tokens_per_s=tps, qualified_tokens_per_s=tps, request_goodput_per_s=4.0,
                              requests_per_s=4.0),
        spec_decode=spec, energy=EnergyReading(source="none", joules=None, reason="test"),
        engine_version="0.32.0",
    )


def without_rate(cell: CellResult) -> CellResult:
    """The cell as stored with a 0 s window: no qualified tokens per s figure."""
    throughput = cell.throughput.model_copy(update={"duration_s": 0.0, "qualified_tokens_per_s": None})
    return cell.model_copy(update={"throughput": throughput})


def make_sample(cell: CellResult, *, itl_ms: float = 20.0, ttft_ms: float = 100.0, seed: int = 0) -> CellSample:
    rng = np.random.default_rng(seed)
    return CellSample(
        cell=cell,
        qualified_tokens=np.full(N_REQUESTS, 48.0),
        durations_s=rng.uniform(0.95, 1.05, N_REQUESTS),
        ttft_ms=rng.uniform(0.8, 1.2, N_REQUESTS) * ttft_ms,
        itl_ms=tuple(rng.gamma(20.0, itl_ms / 20.0, 47) for _ in range(N_REQUESTS)),
    )


def passing_quality(cells: list[CellResult], gate: GateResult = QUALITY_PASS) -> dict[tuple[str, str, str], GateResult]:
    """``gate`` as the quality gate of every speculative (arm, prompt class, sampling) in ``cells``."""
    return {(c.identity.arm, c.identity.prompt_class, c.identity.sampling): gate for c in cells if c.identity.k}


def run(cells: list[CellResult], gates: list[GateResult] | None = None,
        itl_ms: dict[str, float] | None = None, quality: GateResult = QUALITY_PASS) -> list[Decision]:
    itl = itl_ms or {}
    samples = {c.key: make_sample(c, itl_ms=itl.get(c.identity.arm, 20.0), seed=i) for i, c in enumerate(cells)}
    arms = {c.identity.arm for c in cells if c.identity.k is not None}
    return decide_all(cells, samples, CONFIG, dict.fromkeys(arms, PASS if gates is None else gates),
                      passing_quality(cells, quality))


def baseline_pair(main: float = 100.0, end: float = 102.0, **kw: object) -> list[CellResult]:
    return [make_cell(tps=main, **kw), make_cell(tps=end, phase="baseline_end", **kw)]  # type: ignore[arg-type]


def test_clear_win_is_adopted_with_cost_and_interval() -> None:
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)])
    assert decision.verdict == "adopt"
    assert decision.reason_code == "adopt"
    cost, interval = decision.cost, decision.interval
    assert cost is not None
    assert interval is not None
    assert (cost.baseline_replicas, cost.candidate_replicas) == (20, 14)  # demand 2000 tok/s
    assert cost.saving_fraction == pytest.approx(0.3)
    assert cost.noise_floor == pytest.approx(2 / 101)
    assert interval.basis == "requests"
    assert interval.estimate == pytest.approx(1.5)
    assert interval.low is not None
    assert interval.high is not None
    assert interval.low < 1.5 < interval.high
    comparison = decision.comparison
    assert comparison is not None
    assert comparison.acceptance_rate == pytest.approx(0.6)
    assert comparison.mean_acceptance_length == pytest.approx(3.4)


def test_same_replicas_means_no_saving() -> None:
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, tps=103.0)])
    assert (decision.verdict, decision.reason_code) == ("reject", "cost_not_lower")


def test_saving_within_noise_is_rejected() -> None:
    [decision] = run([*baseline_pair(100.0, 110.0), make_cell("draft-k4", 4, tps=106.0)])
    assert decision.reason_code == "within_noise"
    assert decision.cost is not None
    assert decision.cost.saving_fraction == pytest.approx(0.05)


def test_missed_slo_is_rejected() -> None:
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)], itl_ms={"draft-k4": 300.0})
    assert decision.reason_code == "slo_missed"
    assert decision.comparison is not None
    assert decision.comparison.itl_speedup is not None
    assert decision.comparison.itl_speedup.estimate < 0.1


def test_failed_or_missing_gates_reject() -> None:
    cells = [*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)]
    failed = GateResult(gate="stochastic_distribution", passed=False, detail="p=0.001")
    assert run(cells, [*PASS, failed])[0].reason_code == "gate_failed"
    assert run(cells, [])[0].reason_code == "no_gate"


def test_a_failed_quality_gate_is_a_failed_gate() -> None:
    failed = GateResult(gate="quality", passed=False, detail="code/greedy: can be worse by more than tolerance 0.1")
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)], quality=failed)
    assert (decision.verdict, decision.reason_code) == ("reject", "gate_failed")
    assert decision.reason.startswith("quality: code/greedy") and decision.gates == [*PASS, failed]


def test_a_quality_gate_that_did_not_run_rejects_with_its_own_code_and_says_why() -> None:
    """A clear win is not adopted without its quality gate, and the reason names both."""
    not_run = quality_not_run("code/greedy: prompt class 'code' has no scored set")
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)], quality=not_run)
    assert (decision.verdict, decision.reason_code) == ("reject", "quality_not_run")
    assert decision.reason.startswith("quality gate not run: code/greedy: prompt class 'code' has no scored set")
    assert "not adopted, since a gate that did not run has not passed (were it to pass: whole-replica cost +30.0% " \
        "saving beyond noise" in decision.reason
    assert decision.gates[-1] == not_run and decision.cost is not None


def test_earlier_rejections_stand_whether_or_not_the_quality_gate_ran() -> None:
    cells = [*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)]
    not_run = quality_not_run("code/greedy: equivalence.quality_tolerance is unset")
    assert run(cells, itl_ms={"draft-k4": 300.0}, quality=not_run)[0].reason_code == "slo_missed"
    assert run(cells, [], quality=not_run)[0].reason_code == "no_gate"
    failed = GateResult(gate="stochastic_distribution", passed=False, detail="p=0.001")
    assert run(cells, [*PASS, failed], quality=not_run)[0].reason_code == "gate_failed"


def test_a_slice_without_a_quality_result_has_a_gate_that_did_not_run() -> None:
    cells = [*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)]
    samples = {c.key: make_sample(c, seed=i) for i, c in enumerate(cells)}
    [decision] = decide_all(cells, samples, CONFIG, {"draft-k4": PASS}, {})
    assert decision.reason_code == "quality_not_run"
    assert "quality gate not run: code/greedy: no quality gate result for draft-k4" in decision.reason


def test_without_a_repeated_baseline_the_noise_is_unknown() -> None:
    [decision] = run([make_cell(tps=100.0), make_cell("draft-k4", 4, tps=150.0)])
    assert decision.reason_code == "no_noise_estimate"


def test_unusable_cells_are_rejected_with_their_reasons() -> None:
    [decision] = run([make_cell(status="invalid"), make_cell("draft-k4", 4, tps=150.0)])
    assert decision.reason_code == "baseline_not_usable"
    assert "too many errors" in decision.reason
    [decision] = run([*baseline_pair(), make_cell("draft-k4", 4, status="failed")])
    assert decision.reason_code == "candidate_not_usable"
    assert decision.comparison is None


def test_repeats_are_resampled_when_both_arms_have_several() -> None:
    cells = [make_cell(tps=t, repeat=r) for r, t in enumerate((98.0, 100.0, 102.0))]
    cells += [make_cell("draft-k4", 4, tps=t, repeat=r) for r, t in enumerate((148.0, 150.0, 152.0))]
    [decision] = run(cells)
    assert decision.interval is not None
    assert decision.interval.basis == "repeats"
    assert decision.interval.estimate == pytest.approx(1.5)
    assert decision.verdict == "adopt"


def test_decisions_are_reproducible() -> None:
    cells = [*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)]
    assert run(cells)[0].model_dump() == run(cells)[0].model_dump()


def test_a_usable_cell_needs_its_sample() -> None:
    cells = [*baseline_pair(), make_cell("draft-k4", 4, tps=150.0)]
    with pytest.raises(InputError, match="no per-request sample"):
        decide_all(cells, {}, CONFIG, {}, {})


def test_a_usable_cell_without_a_rate_stops_the_comparison_instead_of_counting_zero() -> None:
    cells = [*baseline_pair(), without_rate(make_cell("draft-k4", 4, tps=150.0))]
    with pytest.raises(InputError, match="draft-k4 .*: no qualified tokens per s"):
        run(cells)


def test_negative_cells_carry_the_same_detail() -> None:
    decisions = run([*baseline_pair(), make_cell("draft-k4", 4, tps=150.0), make_cell("draft-k2", 2, tps=103.0)])
    rows = decision_rows(decisions, CONFIG)
    negative = negative_cells(decisions, CONFIG)
    assert len(rows) == 2
    assert [r.k for r in negative] == [2]
    row = negative[0].model_dump(mode="json")
    assert row["reason_code"] == "cost_not_lower"
    assert row["engine"] == "vllm"
    assert row["engine_version"] == "0.32.0"
    assert row["concurrency"] == 4
    assert row["prompt_class"] == "code"
    assert row["method"] == "draft_model"
    assert row["acceptance_rate"] == pytest.approx(0.6)
    assert "cpu" in str(row["hardware"])
    assert set(row) == set(rows[0].model_dump(mode="json"))


def test_noise_floor_per_configuration_and_sweep_fallback() -> None:
    cells = [*baseline_pair(100.0, 110.0), make_cell(tps=50.0, load=1)]
    floors = baseline_noise(cells)
    here, _ = noise_for(("code", "concurrency", 4.0, "greedy"), floors)
    there, source = noise_for(("code", "concurrency", 1.0, "greedy"), floors)
    assert here == pytest.approx(10 / 105)
    assert there == here
    assert "ran once" in source


def test_a_baseline_run_without_a_rate_is_left_out_of_the_noise_floor_and_named() -> None:
    cells = [*baseline_pair(100.0, 110.0), without_rate(make_cell(tps=100.0, repeat=1))]
    [floor] = baseline_noise(cells).values()
    assert floor.qualified_tokens_per_s == [100.0, 110.0]
    assert floor.relative_spread == pytest.approx(10 / 105)
    assert floor.left_out == [cells[2].identity.label]
    spread, source = noise_for(floor.key, {floor.key: floor})
    assert spread == pytest.approx(10 / 105)
    assert source.endswith(f"left out, no rate: {cells[2].identity.label}")


def as_replica_check(cell: CellResult) -> CellResult:
    """The cell measured again on another baseline replica (``specfleet.replicas``)."""
    ident = cell.identity.model_copy(update={"replica_check": True})
    return cell.model_copy(update={"identity": ident, "key": ident.key("test")})


def test_a_replica_check_cell_widens_the_noise_floor() -> None:
    check = as_replica_check(make_cell(tps=120.0))
    cells = [*baseline_pair(100.0, 110.0), check]
    [floor] = baseline_noise(cells).values()
    assert floor.runs[-1] == check.identity.label and check.identity.label.endswith("r0-check")
    assert floor.relative_spread == pytest.approx(20 / 110)


def test_a_replica_check_cell_is_pooled_with_the_baseline_like_a_repeat() -> None:
    cells = [*baseline_pair(100.0, 200.0), as_replica_check(make_cell(tps=110.0)), make_cell("draft-k4", 4, tps=150.0)]
    [decision] = run(cells)
    assert decision.comparison is not None
    assert decision.comparison.baseline_runs == 2  # the main run and its check; the end run feeds the noise only
    assert decision.comparison.baseline_qualified_tokens_per_s == pytest.approx(105.0)


def test_sample_from_records_counts_only_slo_met_tokens() -> None:
    ms = 1_000_000
    fast = RequestRecord(index=0, prompt_id="a", send_ns=0, chunk_ns=(100 * ms, 110 * ms, 120 * ms),
                         chunk_tokens=(1, 2, 1), end_ns=121 * ms, usage_completion_tokens=4)
    slow = RequestRecord(index=1, prompt_id="b", send_ns=0, chunk_ns=(100 * ms, 900 * ms),
                         chunk_tokens=(1, 1), end_ns=901 * ms, usage_completion_tokens=2)
    failed = RequestRecord(index=2, prompt_id="c", send_ns=0, error="timeout", end_ns=50 * ms)
    sample = CellSample.from_records(make_cell(), [fast, slow, failed], CONFIG.slo)
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


def test_ratio_interval_drops_zero_denominators() -> None:
    interval = bs.ratio_interval(2.0, np.array([2.0, 2.0, 4.0]), np.array([1.0, 0.0, 0.0]), 0.95, "requests")
    assert interval.low is None
    assert interval.high is None
