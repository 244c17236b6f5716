"""The k policy as an arm (issue 33): what a derived policy's arm runs, where its cells are, and
how the recommendation says whether it was measured."""

from pathlib import Path

from specfleet.contract import arm_plans, cell_identities
from specfleet.contract.arms import SCHEDULE_KEY
from specfleet.contract.sweep import SweepConfig
from specfleet.verdicts.kpolicy import KPolicy, KPolicyReport, LevelChoice, k_policy_reports
from specfleet.verdicts.policy_arm import (
    PolicyComparison,
    derive_policies,
    recommendation,
    with_policy_arms,
)
from tests.support.sweep_data import load, write_config


def _config(tmp_path: Path, extra: str = "") -> SweepConfig:
    path = write_config(tmp_path)
    text = path.read_text().replace("load: {concurrency: [1], requests_per_cell: 4}",
                                    "load: {concurrency: [1, 2, 4], requests_per_cell: 4}")
    text = text.replace("  - {name: draft, method: draft_model, k: [2]}",
                        "  - {name: draft, method: draft_model, k: [2, 4]}" + extra)
    text += ("traffic: {share_basis: tokens, prompt_classes: {code: 1.0}, concurrency: {1: 0.5, 2: 0.5, 4: 0.0}}\n"
             "sampling: [{name: greedy, temperature: 0.0}, {name: hot, temperature: 1.0}]\n"
             "policy: {measure: true}\n")
    path.write_text(text)
    return load(path)


def _report(schedule: list[tuple[int, int, int]], refused: str | None = None,
            sampling: str = "greedy") -> KPolicyReport:
    policy = KPolicy(rule="specfleet", spec_name="draft", prompt_class=None, sampling=sampling,
                     levels=[LevelChoice(level=s, k=k, reason="adopted") for s, _, k in schedule],
                     schedule=schedule, refused=refused, base_config={"method": "draft_model"})
    return KPolicyReport(specfleet=policy, peer=None, differences=[], speculative_config=policy.speculative_config())


def test_a_derived_policy_runs_as_an_arm_with_its_schedule_at_the_mix_loads_only(tmp_path: Path) -> None:
    config = _config(tmp_path)
    schedule = [(1, 1, 4), (2, 2, 2), (3, 16, 0)]
    derived = derive_policies(config, [_report(schedule), _report([(1, 16, 2)], sampling="hot")], [], "s1")
    (policy,) = derived.policies  # the policy's sampling only (the first of the config's)
    assert policy.arm is not None and policy.reason is None
    assert policy.arm.name == "draft-policy" and policy.arm.k == [4] and policy.arm.policy_of == "draft"
    assert policy.arm.speculative_extra[SCHEDULE_KEY] == [list(r) for r in schedule]
    measured = with_policy_arms(config, derived)
    plan = next(p for p in arm_plans(measured) if p.policy_of == "draft")
    assert plan.arm == "draft-policy" and plan.schedule == tuple(schedule) and plan.k == 4
    assert plan.speculative_config is not None and plan.speculative_config["num_speculative_tokens"] == 4
    assert plan.speculative_config["model"] == config.models.draft.path  # the arm's own draft
    cells = cell_identities(measured, plan)
    assert {(c.load_value, c.sampling) for c in cells} == {(1.0, "greedy"), (2.0, "greedy")}  # 4 has no share
    assert all(c.schedule == tuple(schedule) and c.k == 4 for c in cells)
    assert cells[0].key("d") != cell_identities(config, arm_plans(config)[2])[0].key("d")
    assert "k 4 at batch 1, 2 at 2, 0 at 3-16" in cells[0].label
    # the fixed-k arms keep their keys: a schedule at its default is left out of the key
    fixed = cell_identities(config, arm_plans(config)[1])[0]
    assert fixed.key("d") == fixed.model_copy(update={"schedule": None}).key("d")


def test_a_policy_that_never_speculates_or_was_refused_is_not_measured(tmp_path: Path) -> None:
    config = _config(tmp_path)
    off = derive_policies(config, [_report([(1, 16, 0)])], [], "s1").policies[0]
    refused = derive_policies(config, [_report([], refused="no concurrency-mode decisions")], [], "s1").policies[0]
    assert off.arm is None and off.reason is not None and "turns speculation off at every load" in off.reason
    assert refused.arm is None and refused.reason == "no policy: no concurrency-mode decisions"
    assert with_policy_arms(config, derive_policies(config, [_report([(1, 16, 0)])], [], "s1")) is config


def test_an_adaptive_arm_is_no_fixed_k_candidate_of_a_policy(tmp_path: Path) -> None:
    config = _config(tmp_path, "\n  - {name: dyn, method: draft_model, speculative_extra: "
                               "{num_speculative_tokens_per_batch_size: [[1, 2, 3], [3, 16, 1]]}}")
    assert [a.name for a in config.arms if a.adaptive] == ["dyn"]
    names = {r.specfleet.spec_name for r in k_policy_reports([], [], config)}
    assert names == {"draft"}


def test_the_recommendation_says_whether_the_policy_was_measured(tmp_path: Path) -> None:
    schedule = [(1, 1, 4), (2, 16, 2)]
    report = _report(schedule)

    def compared(ran: list[tuple[int, int, int]], arm: str | None = "draft-policy") -> PolicyComparison:
        return PolicyComparison(spec_name="draft", sampling="greedy", schedule=tuple(ran), measured_arm=arm,
                                composed=None, measured=None, composed_saving_fraction=None,
                                measured_saving_fraction=None, saving_difference=None, composed_adoptable=None,
                                measured_adoptable=None)

    assert recommendation(report, [compared(schedule)]) == "measured"
    assert recommendation(report, []) == "composed, not measured"
    assert recommendation(report, [compared([(1, 16, 4)])]) == "composed, not measured"  # another schedule ran
    assert recommendation(report, [compared(schedule, arm=None)]) == "composed, not measured"
    assert recommendation(_report([(1, 16, 0)]), []) == "measured"  # speculation off: the baseline is measured
