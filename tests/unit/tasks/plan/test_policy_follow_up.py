"""``specfleet sweep --policy-from SWEEP`` (issue 33): a follow-up measuring the k policy a finished
sweep chose, beside its own baseline; resumable, and refused where its policy no longer applies."""

from pathlib import Path

import pytest

from specfleet.errors import InputError
from specfleet.report.sweep_report import REPORT_FILE
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import SweepPlan, plan_sweep
from specfleet_tasks.store.sweep import POLICY_FILE, StoredSweep
from tests.support.sweep_data import records, store_cell, write_config


def _config(root: Path) -> Path:
    """The unit sweep at concurrency 1 and 2, three repeats, and vLLM's proposed tuner's rule (it needs them)."""
    path = write_config(root)
    text = path.read_text().replace("load: {concurrency: [1], requests_per_cell: 4}",
                                    "load: {concurrency: [1, 2], requests_per_cell: 4, repeats: 3}")
    path.write_text(text + 'policy: {rule: "vllm#49163"}\n')
    return path


def _measure_all(plan: SweepPlan) -> None:
    """Every planned cell: the baseline's in 4 s, a speculative arm's (two tokens a chunk) in 3 s."""
    for key, ident in plan.cells.items():
        if ident.k is None:
            store_cell(plan.store, plan.config, ident, key, records(5))
        else:
            store_cell(plan.store, plan.config, ident, key, records(8, 2), duration_s=3.0)


def _finished(root: Path) -> SweepPlan:
    plan = plan_sweep(_config(root), None, root / "results")
    _measure_all(plan)
    plan.store.write_json(REPORT_FILE, aggregate(plan, []))
    return plan


def test_a_follow_up_measures_the_chosen_policy_beside_its_own_baseline_and_resumes(tmp_path: Path) -> None:
    earlier = _finished(tmp_path)
    follow = plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results", policy_from=earlier.sweep_id)
    assert follow.derived is not None and follow.derived.derived_from == earlier.sweep_id
    (policy,) = follow.derived.policies
    assert policy.policy.rule == "vllm#49163" and policy.arm is not None
    assert [(w.arm.arm, w.phase) for w in follow.work] == [("baseline", "main"), ("baseline", "baseline_end"),
                                                           ("draft-policy", "main")]
    assert [name for name, _ in follow.stages()] == ["baseline", "k policy", "baseline (end)"]
    assert follow.origin is not None and follow.origin.startswith(f"--policy-from {earlier.sweep_id}: measuring")
    stored = StoredSweep(follow.store.dir)
    assert [a.name for a in stored.config.arms] == ["baseline", "draft-policy"]
    assert (follow.store.dir / POLICY_FILE).is_file()
    resumed = plan_sweep(tmp_path / "sweep.yaml", follow.sweep_id, tmp_path / "results")
    assert sorted(resumed.cells) == sorted(follow.cells)  # the same policy, no fixed-k arm
    _measure_all(resumed)
    summary = aggregate(resumed, [])
    (compared,) = summary.policy_comparisons
    assert compared.measured_arm == "draft-policy" and compared.rule == "vllm#49163"
    assert compared.composed is not None  # the earlier sweep's composed verdict, beside this one's measured
    assert any(note.startswith(f"composed in sweep {earlier.sweep_id}") for note in compared.notes)
    assert compared.measured is not None and compared.measured.startswith("draft-policy / greedy")


def test_a_follow_up_refuses_a_changed_fingerprint_an_unfinished_sweep_and_nothing_to_measure(tmp_path: Path) -> None:
    earlier = _finished(tmp_path)
    (earlier.store.dir / REPORT_FILE).rename(earlier.store.dir / "kept.json")
    with pytest.raises(InputError, match="the sweep wrote no summary"):
        plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results", policy_from=earlier.sweep_id)
    (earlier.store.dir / "kept.json").rename(earlier.store.dir / REPORT_FILE)
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(InputError, match=r"draft changed since that sweep: its policy was chosen for what it"):
        plan_sweep(tmp_path / "sweep.yaml", None, tmp_path / "results", policy_from=earlier.sweep_id)
    other = tmp_path / "other"
    other.mkdir()
    config = write_config(other)  # specfleet's rule: no k is adopted on these cells
    plan = plan_sweep(config, None, other / "results")
    _measure_all(plan)
    plan.store.write_json(REPORT_FILE, aggregate(plan, []))
    with pytest.raises(InputError, match=r"no k policy to measure at sampling 'greedy' \(draft: "):
        plan_sweep(config, None, other / "results", policy_from=plan.sweep_id)
