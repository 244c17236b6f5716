"""The performance model on a synthetic engine whose step time and acceptance are known
(``perf_engine``): the fit recovers them, and held-out cells are predicted from the rest."""

from collections.abc import Callable

import pytest

from specfleet.contract import CellIdentity, SweepConfig, parse_sweep_config
from specfleet.errors import InputError
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.predict import PredictionQuery, Predictor, predict
from specfleet.results import CellResult
from specfleet.results.cell import KVCacheInfo
from specfleet.results.records import RequestRecord
from tests.support.perf_engine import TrueLaw, engine_cell, run_engine

CONFIG = """
name: synthetic
models: {target: {path: /nowhere/target}, draft: {path: /nowhere/draft}}
engine: {max_num_seqs: 16}
arms:
  - {name: baseline, method: baseline}
  - {name: draft, method: draft_model, k: [1, 2, 4]}
load: {concurrency: [1, 2, 4, 8], requests_per_cell: 32}
prompt_classes: [{name: code, max_output_tokens: 40}]
slo: {ttft_ms: 1000, itl_ms: 1000}
hardware: {accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 1000}
"""
LAW = TrueLaw()
REACH = (0.9, 0.75, 0.6, 0.45)
"""True share of drafts whose accepted prefix reaches positions 1..4."""
PROMPTS = (40, 90, 60, 150, 30, 120)
OUTPUTS = (40, 28, 36, 24, 40, 32)
REQUESTS = 32
Sweep = tuple[SweepConfig, list[CellResult], dict[str, list[RequestRecord]]]


def _cell(arm: str, k: int | None, concurrency: int, seed: int) -> tuple[CellResult, list[RequestRecord]]:
    method = "baseline" if k is None else "draft_model"
    records, stats = run_engine(LAW.at(method, k or 0), concurrency, REQUESTS, PROMPTS, OUTPUTS, k=k or 0,
                                reach=REACH, seed=seed)
    ident = CellIdentity(arm=arm, method=method, k=k, load_mode="concurrency", load_value=float(concurrency),
                         prompt_class="code", sampling="greedy", repeat=0)
    key = f"{arm}-c{concurrency}"
    config = parse_sweep_config(CONFIG, "synthetic.yaml")
    return engine_cell(ident, key, records, stats, config.slo), records


@pytest.fixture(scope="module")
def sweep() -> Sweep:
    config = parse_sweep_config(CONFIG, "synthetic.yaml")
    cells, records = [], {}
    plan = [("baseline", None, c) for c in (1, 2, 4, 8)] + [(f"draft-k{k}", k, c) for k in (1, 2, 4) for c in (1, 4, 8)]
    for seed, (arm, k, c) in enumerate(plan):
        cell, recs = _cell(arm, k, c, seed)
        cells.append(cell)
        records[cell.key] = recs
    return config, cells, records


def _calibrate(sweep: Sweep, keep: Callable[[CellIdentity], bool] | None = None) -> Calibration:
    config, cells, records = sweep
    return calibrate("synthetic", config, cells, records, keep=keep, resamples=40)


def _measured(sweep: Sweep, arm: str, concurrency: int) -> CellResult:
    return next(c for c in sweep[1] if c.identity.arm == arm and c.identity.load_value == concurrency)


def test_the_fit_recovers_the_true_step_law(sweep: Sweep) -> None:
    law = _calibrate(sweep).law
    fitted = law.coefficients()
    assert law.dropped == ()
    for name, true in LAW.coefficients().items():
        assert fitted[name] == pytest.approx(true, rel=0.08, abs=0.004), name
    assert law.residual_rel < 0.02


def test_acceptance_recovers_the_true_reach(sweep: Sweep) -> None:
    profile = _calibrate(sweep).acceptance[("draft", "code", "greedy")]
    assert profile.measured_k == (1, 2, 4)
    assert profile.rate() == pytest.approx(1.0)
    for fitted, true in zip(profile.per_position(4), REACH, strict=True):
        assert fitted == pytest.approx(true, abs=0.04)
    assert profile.mean_acceptance_length(4) == pytest.approx(1 + sum(REACH), abs=0.1)


@pytest.mark.parametrize(("arm", "concurrency"), [("baseline", 4), ("draft-k2", 4), ("draft-k4", 8)])
def test_a_held_out_cell_is_predicted_from_the_others(sweep: Sweep, arm: str, concurrency: int) -> None:
    def keep(ident: CellIdentity) -> bool:
        return not (ident.arm == arm and ident.load_value == concurrency)

    cal = _calibrate(sweep, keep)
    k = None if arm == "baseline" else int(arm.rpartition("-k")[2])
    got = predict(cal, PredictionQuery(arm=arm.partition("-")[0], k=k, prompt_class="code", concurrency=concurrency))
    measured = _measured(sweep, arm, concurrency)
    assert got.predicted is True and not got.measured_cell and got.extrapolates == []
    assert measured.throughput.output_tokens_per_s is not None and measured.tpot_ms.p50 is not None
    assert got.output_tokens_per_s == pytest.approx(measured.throughput.output_tokens_per_s, rel=0.08)
    assert got.tpot_ms.p50 == pytest.approx(measured.tpot_ms.p50.value, rel=0.08)
    low, high = got.interval.output_tokens_per_s.low, got.interval.output_tokens_per_s.high
    assert low is not None and high is not None and low <= got.output_tokens_per_s <= high


def test_k_beyond_the_measured_range_extrapolates_and_says_so(sweep: Sweep) -> None:
    cal = _calibrate(sweep)
    got = predict(cal, PredictionQuery(arm="draft", k=6, prompt_class="code", concurrency=16))
    assert any(line.startswith("k 6 > largest measured 4") for line in got.extrapolates)
    assert "concurrency 16 > largest measured 8" in got.extrapolates
    assert got.mean_acceptance_length is not None and got.mean_acceptance_length > 1 + sum(REACH) - 0.1
    assert got.speedup is not None and got.interval.speedup is not None


def test_the_baseline_has_no_acceptance_and_no_speedup(sweep: Sweep) -> None:
    got = predict(_calibrate(sweep), PredictionQuery(arm="baseline", prompt_class="code", concurrency=2))
    assert got.mean_acceptance_length is None and got.speedup is None and got.k is None
    assert got.measured_cell and got.label.startswith("PREDICTED")
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "qualified_tokens_per_s",
                "mean_acceptance_length", "speedup", "interval", "calibrated_on", "extrapolates", "predicted"):
        assert key in got.model_dump()


def test_a_predictor_shares_the_baseline_and_predicts_what_predict_does(sweep: Sweep) -> None:
    cal = _calibrate(sweep)
    queries = [PredictionQuery(arm="draft", k=k, prompt_class="code", concurrency=c, requests=24)
               for c in (2, 4) for k in (1, 3)] + [PredictionQuery(arm="baseline", prompt_class="code", concurrency=2,
                                                                   requests=24)]
    predictor = Predictor(cal)
    assert [predictor.predict(q) for q in queries] == [predict(cal, q) for q in queries]


@pytest.mark.parametrize(("query", "message"), [
    (PredictionQuery(arm="eagle", prompt_class="code", concurrency=1), "--arm eagle: not an arm"),
    (PredictionQuery(arm="draft", prompt_class="code", concurrency=1), "give --k"),
    (PredictionQuery(arm="baseline", k=2, prompt_class="code", concurrency=1), "does not speculate"),
    (PredictionQuery(arm="draft", k=2, prompt_class="chat", concurrency=1), "--prompt-class chat"),
    (PredictionQuery(arm="draft", k=2, prompt_class="code", sampling="hot", concurrency=1), "--sampling hot"),
    (PredictionQuery(arm="draft", k=2, prompt_class="code"), "exactly one of"),
    (PredictionQuery(arm="draft-k2", k=3, prompt_class="code", concurrency=1), "disagree"),
])
def test_bad_queries_are_input_errors(sweep: Sweep, query: PredictionQuery, message: str) -> None:
    with pytest.raises(InputError, match=message):
        predict(_calibrate(sweep), query)


def test_no_usable_cell_is_an_input_error(sweep: Sweep) -> None:
    config, cells, records = sweep
    broken = [c.model_copy(update={"status": "invalid"}) for c in cells]
    with pytest.raises(InputError, match="no usable cell"):
        calibrate("synthetic", config, broken, records)


def test_the_kv_pool_comes_from_the_fitted_cells_only(sweep: Sweep) -> None:
    """A held-out cell is not an input: its KV pool must not reach the calibration (issue 32)."""
    config, cells, records = sweep
    sized = [c.model_copy(update={"kv_cache": KVCacheInfo(kv_cache_size_tokens=500 if c.identity.load_value == 8
                                                          else 4000)}) for c in cells]
    fitted = calibrate("synthetic", config, sized, records, keep=lambda i: i.load_value != 8, resamples=10)
    assert fitted.kv_tokens == {"baseline": 4000, "draft": 4000}
    every = calibrate("synthetic", config, sized, records, resamples=10)
    assert every.kv_tokens == {"baseline": 500, "draft": 500}


def test_missing_per_position_counters_give_no_acceptance_and_a_reason(sweep: Sweep) -> None:
    config, cells, records = sweep
    bare = [c.model_copy(update={"spec_decode": c.spec_decode.model_copy(update={"accepted_per_position": []})})
            if c.spec_decode is not None else c for c in cells]
    cal = calibrate("synthetic", config, bare, records, resamples=10)
    assert ("draft", "code", "greedy") not in cal.acceptance
    assert "per-position" in cal.acceptance_missing[("draft", "code", "greedy")]
    with pytest.raises(InputError, match="per-position"):
        predict(cal, PredictionQuery(arm="draft", k=2, prompt_class="code", concurrency=2))


@pytest.mark.parametrize("arm", ["baseline", "draft-k4"])
def test_a_cell_predicted_as_measured_is_nearer_the_cell_than_the_steady_state(sweep: Sweep, arm: str) -> None:
    """A measured cell of 32 requests at concurrency 8 starts from an idle engine and drains at a
    smaller batch: predicted as such cells it is nearer the measurement than one long run."""
    cal = _calibrate(sweep)
    measured = _measured(sweep, arm, 8).throughput.output_tokens_per_s
    assert measured is not None

    def error(cell_requests: int | None) -> float:
        got = predict(cal, PredictionQuery(arm=arm, prompt_class="code", concurrency=8, requests=256,
                                           cell_requests=cell_requests)).output_tokens_per_s
        assert got is not None
        return abs(got / measured - 1)

    assert error(REQUESTS) < error(None)
