"""The baseline stages split over replicas in the sweep plan (``plan_sweep``): on a node where
R tensor-parallel arms fit at once, each baseline stage is R servers that owe every baseline
cell once between them plus one check cell each; the probes run on the first; the keys of the
other cells are the one-server plan's; each replica logs to its own file. No engine, no Ray:
``plan_sweep`` starts neither."""

from collections import Counter
from pathlib import Path

import pytest

from specfleet.contract import ArmPlan, SweepConfig, cell_identities
from specfleet_tasks.arm import lifecycle
from specfleet_tasks.engine.server import ArmServer, ArmStartError
from specfleet_tasks.plan.sweep_plan import ArmWork, Phase, SweepPlan, plan_sweep
from tests.support.sweep_data import load, records, store_cell, write_config

CPU = "hardware: {accelerator: cpu, "
SIX_CELLS = "load: {concurrency: [1, 2, 4], requests_per_cell: 4, repeats: 2}"


def _config(tmp_path: Path, hardware: str) -> Path:
    """The unit config with six baseline cells per phase on ``hardware`` (the layout fields)."""
    path = write_config(tmp_path)
    text = path.read_text().replace("load: {concurrency: [1], requests_per_cell: 4}", SIX_CELLS)
    path.write_text(text.replace(CPU, f"hardware: {{{hardware}, "))
    return path


def _plan(tmp_path: Path, resume: str | None = None) -> SweepPlan:
    return plan_sweep(tmp_path / "sweep.yaml", resume, tmp_path / "results")


def _baseline(plan: SweepPlan, phase: Phase) -> list[ArmWork]:
    return [w for w in plan.work if w.arm.is_baseline and w.phase == phase]


GPU = "accelerator: NVIDIA H200, tensor_parallel_size: 2, accelerators_per_replica: 2"
LAYOUTS = [
    (f"{GPU}, accelerators_per_node: 4", 2),
    (f"{GPU}, accelerators_per_node: 8", 4),
    (f"{GPU}, accelerators_per_node: 4, nodes: 2", 4),
    ("accelerator: cpu, nodes: 2", 2),
]


@pytest.mark.parametrize(("hardware", "replicas"), LAYOUTS)
def test_each_baseline_stage_is_r_replicas_owing_every_cell_once_plus_r_checks(
        tmp_path: Path, hardware: str, replicas: int) -> None:
    config = load(_config(tmp_path, hardware))
    plan = _plan(tmp_path)
    assert [len(work) for _, work in plan.stages()] == [replicas, 1, replicas]
    phases: tuple[Phase, ...] = ("main", "baseline_end")
    for phase in phases:
        work = _baseline(plan, phase)
        assert [w.replica for w in work] == list(range(replicas))
        owed = [ident for w in work for ident, _ in w.cells]
        wanted = cell_identities(config, work[0].arm, phase)
        assert Counter(i for i in owed if not i.replica_check) == Counter(wanted)
        assert sum(i.replica_check for i in owed) == replicas
        for i, w in enumerate(work):  # opens with the previous replica's first cell, measured again
            check, first_own = w.cells[0][0], work[i - 1].cells[1][0]
            assert check.replica_check and check == first_own.model_copy(update={"replica_check": True})
    assert [(w.probe, w.quality_probe) for w in _baseline(plan, "main")] == [(True, False)] + [(False, False)] * (
        replicas - 1)
    assert not any(w.probe for w in _baseline(plan, "baseline_end"))
    assert len(plan.cells) == plan.pending_cells == 6 + 6 + 6 + 2 * replicas


def test_a_speculative_arm_over_three_server_lives_owes_its_cells_once_plus_a_check_on_each_later_life(
        tmp_path: Path) -> None:
    """``analysis.arm_server_lives: 3`` on one CPU node: the speculative arm's stage is three servers
    one after another, each opening with the previous one's first own cell measured again (as a
    baseline stage's replicas do); the probes run on the first; the baseline stages keep their one
    server."""
    path = _config(tmp_path, "accelerator: cpu")
    path.write_text(path.read_text().replace("analysis: {", "analysis: {arm_server_lives: 3, "))
    config = load(path)
    plan = _plan(tmp_path)
    assert [len(work) for _, work in plan.stages()] == [1, 3, 1]
    (_, arms), = [(label, work) for label, work in plan.stages() if label == "speculative arms"]
    assert [w.replica for w in arms] == [0, 1, 2] and [w.probe for w in arms] == [True, False, False]
    owed = [ident for w in arms for ident, _ in w.cells]
    assert Counter(i for i in owed if not i.replica_check) == Counter(cell_identities(config, arms[0].arm))
    for i, work in enumerate(arms):
        check, first_own = work.cells[0][0], arms[i - 1].cells[1][0]
        assert check == first_own.model_copy(update={"replica_check": True})
    assert len(plan.cells) == 6 + 6 + 3 + 6


def test_keys_of_the_cells_are_the_one_server_plans_and_checks_are_the_only_new_ones(tmp_path: Path) -> None:
    _config(tmp_path, "accelerator: cpu")
    single = _plan(tmp_path)
    assert [w.replica for w in single.work] == [0, 0, 0] and not any(i.replica_check for i in single.cells.values())
    _config(tmp_path, f"{GPU}, accelerators_per_node: 8")
    split = _plan(tmp_path)
    assert split.fingerprint.digest != single.fingerprint.digest  # another accelerator: compare by identity
    rekeyed = {ident.key(split.fingerprint.digest) for ident in single.cells.values()}
    extra = split.cells.keys() - rekeyed
    assert rekeyed <= split.cells.keys() and len(extra) == 8
    assert all(split.cells[key].replica_check for key in extra)


def test_the_layout_is_not_fingerprinted_so_a_cpu_sweep_resumes_on_two_nodes_with_its_keys(tmp_path: Path) -> None:
    _config(tmp_path, "accelerator: cpu")
    single = _plan(tmp_path)
    _config(tmp_path, "accelerator: cpu, nodes: 2")
    split = _plan(tmp_path, single.sweep_id)
    assert single.cells.keys() <= split.cells.keys()
    assert sorted(split.cells[k].label for k in split.cells.keys() - single.cells.keys()) == [
        "baseline / code / c1 / greedy / r0-check", "baseline / code / c1 / greedy / r0-end-check",
        "baseline / code / c1 / greedy / r1-check", "baseline / code / c1 / greedy / r1-end-check"]


def test_resume_keeps_each_replicas_share_and_moves_the_probes_to_the_first_that_starts(tmp_path: Path) -> None:
    _config(tmp_path, f"{GPU}, accelerators_per_node: 4")
    plan = _plan(tmp_path)
    first = _baseline(plan, "main")[0]
    for ident, key in first.cells:
        store_cell(plan.store, plan.config, ident, key, records(gap_ms=5))
    resumed = _baseline(_plan(tmp_path, plan.sweep_id), "main")
    assert [(w.replica, w.probe) for w in resumed] == [(1, True)]  # no probe stored yet
    assert resumed[0].cells == _baseline(plan, "main")[1].cells


def test_only_the_first_replica_answers_the_scored_sets(tmp_path: Path) -> None:
    path = _config(tmp_path, f"{GPU}, accelerators_per_node: 4")
    (tmp_path / "scored.jsonl").write_text('{"id": "q1", "prompt": "1 + 1 =", "reference": 2, "scorer": "numeric"}\n')
    text = path.read_text().replace("max_output_tokens: 8}", "max_output_tokens: 8, scored_set: scored.jsonl}")
    path.write_text(text.replace("equivalence: {prompts: 2}", "equivalence: {prompts: 2, quality_tolerance: 0.1}"))
    work = _baseline(_plan(tmp_path), "main")
    assert [(w.probe, w.quality_probe) for w in work] == [(True, True), (False, False)]


def test_a_replica_logs_to_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, f"{GPU}, accelerators_per_node: 4")
    plan = _plan(tmp_path)
    logs: list[Path] = []

    def no_engine(config: SweepConfig, arm: ArmPlan, resolved: dict[str, str], log_path: Path) -> ArmServer:
        logs.append(log_path)
        raise ArmStartError("no engine in unit tests")

    monkeypatch.setattr(lifecycle, "_server", no_engine)
    for work in _baseline(plan, "main"):
        outcome = lifecycle.run_arm(plan.config, work.arm, work.cells, plan.resolved, plan.prompts_by_class,
                                    plan.store, probe=False, replica=work.replica)
        assert outcome.error == "no engine in unit tests"
    assert logs == [plan.store.log_path("baseline"), plan.store.log_path("baseline-r1")]
