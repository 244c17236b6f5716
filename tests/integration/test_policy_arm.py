"""The k policy measured as an arm (issue 33), on real vLLM CPU servers with the fixture models:
``specfleet sweep --policy-from SWEEP`` starts a server with the k policy vLLM's proposed tuner
(vllm#49163) chose from an earlier sweep's cells and decides on it like any arm, beside its own
baseline. Its schedule is read back from the arguments the sweep stored and from vLLM's own
"non-default args" log line.

The earlier sweep is recorded, not measured: the same config planned here and its cells stored
from request records with a set pace (the baseline one token a chunk, the draft arm at k=2 two,
each chunk 40 ms apart), so the tuner's choice, k = 2 at batches 1-2, does not depend on how fast
the machine is today. Measured on a loaded machine the draft cells came out slower than the
baseline's and the tuner chose k = 0 everywhere: the baseline, with nothing to start. What the
tuner chose from real cells of this config on the wide fixture target is in docs/measurement.md,
"The measured k policy"; the rule itself is ``tests/unit/specfleet/verdicts/test_kpolicy.py``'s.

Every server life here costs a real vLLM start (about 30 s, most of the module's time), so the
follow-up has the fewest the policy arm needs: the baseline, the policy arm and the closing
baseline. An adaptive arm (one that sets its own ``num_speculative_tokens_per_batch_size``) would
be one more: its schedule takes the same path to ``--speculative-config``
(``tests/unit/tasks/plan/test_speculative_extra.py``) as the policy arm's, whose arrival in vLLM
this module checks, and that it is no policy candidate is
``tests/unit/specfleet/verdicts/test_policy_arm.py``'s. Adaptive verification cannot run on the
CPU build (its V1 runner refuses it, V2 needs Triton): that arm exits 2 at plan time, a unit test
shows."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specfleet.contract.arms import SCHEDULE_KEY
from specfleet.report.sweep_report import REPORT_FILE, SweepReport
from specfleet_tasks.analysis.summary import aggregate
from specfleet_tasks.plan.sweep_plan import plan_sweep
from specfleet_tasks.store.sweep import POLICY_FILE, StoredSweep
from tests.integration.services import PrefectServer
from tests.integration.sweep_configs import BASELINE_ARM, tiny_sweep_config
from tests.support.records import paced_record
from tests.support.sweep_data import store_cell

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]

ARMS: list[dict[str, object]] = [BASELINE_ARM, {"name": "draft", "method": "draft_model", "k": [2]}]
MAX_TOKENS = 16
REQUESTS = 6
SCHEDULE = [[1, 2, 2]]
"""What the tuner chooses from the recorded cells: k = 2 from batch 1 to 2 (and, in vLLM, beyond)."""
NON_DEFAULT_ARGS = re.compile(r"non-default args: (\{.*\})")


def _config(root: Path) -> Path:
    path = tiny_sweep_config(root / "policy.yaml", "it-policy", ARMS, requests=REQUESTS, warmup=1,
                             max_tokens=MAX_TOKENS, concurrency=[1, 2], policy={"rule": "vllm#49163"},
                             hardware={"accelerator": "cpu", "accelerator_hour_usd": 1.0,
                                       "peak_demand_tokens_per_s": 100_000})
    data = yaml.safe_load(path.read_text())
    data["load"]["repeats"] = 3  # the tuner's minimum
    path.write_text(yaml.safe_dump(data))
    return path


def _recorded_sweep(config: Path, results: Path) -> str:
    """The config's sweep, planned and finished from recorded cells: every request 16 tokens in
    chunks 40 ms apart, one token a chunk on the baseline and two on the draft arm (k=2), in cell
    windows of 6 s and 3 s, so the draft doubles the SLO-qualified tokens/s at every level and
    repeat. Its id."""
    plan = plan_sweep(config, None, results)
    for key, ident in plan.cells.items():
        per_chunk = 1 if ident.k is None else 2
        requests = [paced_record(i, 40, MAX_TOKENS // per_chunk, per_chunk, usage_completion_tokens=MAX_TOKENS,
                                 finish_reason="length", max_tokens=MAX_TOKENS) for i in range(REQUESTS)]
        store_cell(plan.store, plan.config, ident, key, requests, duration_s=6.0 / per_chunk)
    plan.store.write_json(REPORT_FILE, aggregate(plan, []))
    return plan.sweep_id


@pytest.fixture(scope="module")
def policy_sweep(tmp_path_factory: pytest.TempPathFactory,
                 prefect_api: PrefectServer) -> tuple[StoredSweep, str, str]:
    """The follow-up measured on real vLLM, its terminal output and the recorded sweep's id."""
    root = tmp_path_factory.mktemp("policy")
    config, results = _config(root), root / "results"
    recorded = _recorded_sweep(config, results)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_"))} | prefect_api.env
    command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", "sweep", str(config),
               "--policy-from", recorded, "--results-dir", str(results),
               "--tracking-uri", f"sqlite:///{root / 'mlflow.db'}"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1100, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    (sweep_dir,) = (d for d in results.iterdir() if d.name != recorded)
    return StoredSweep(sweep_dir), done.stdout, recorded


def _logged_speculative_config(log: Path) -> dict[str, object]:
    """The speculative_config of vLLM's own "non-default args" line in a server's log."""
    (found,) = {m.group(1) for m in map(NON_DEFAULT_ARGS.search, log.read_text().splitlines()) if m}
    logged = ast.literal_eval(found)["speculative_config"]
    assert isinstance(logged, dict)
    return logged


def test_the_derived_policy_runs_on_its_own_server_with_its_schedule(
        policy_sweep: tuple[StoredSweep, str, str]) -> None:
    sweep, _, recorded = policy_sweep
    derived = sweep.derived_policies
    assert derived is not None and derived.derived_from == recorded
    (policy,) = derived.policies
    assert policy.policy.rule == "vllm#49163" and policy.arm is not None, policy.reason
    assert [list(r) for r in policy.policy.schedule] == SCHEDULE
    summary = sweep.summary
    assert summary is not None and summary.server_args is not None
    assert [a.name for a in sweep.config.arms] == ["baseline", "draft-policy"]  # no fixed-k arm measured
    stored = summary.server_args.speculative["draft-policy"]
    passed = json.loads(stored[stored.index("--speculative-config") + 1])
    assert passed[SCHEDULE_KEY] == SCHEDULE and passed["num_speculative_tokens"] == 2
    assert _logged_speculative_config(sweep.dir / "logs" / "draft-policy.log")[SCHEDULE_KEY] == SCHEDULE
    cells = [c for c in sweep.cells if c.identity.arm == "draft-policy"]
    assert len(cells) == 2 * 3 and all(c.identity.schedule == tuple(map(tuple, SCHEDULE)) for c in cells)
    assert {c.identity.load_value for c in cells} == {1.0, 2.0}
    # decided on like any arm: its cells, its gates, its own verdict at the mix
    assert {d.slice.load_value for d in summary.decisions if d.slice.arm == "draft-policy"} == {1.0, 2.0}
    assert [g.gate for g in summary.gates["draft-policy"]] == ["greedy_exact_match"]
    assert any(v.name == "draft-policy" for v in summary.mix)
    assert (sweep.dir / POLICY_FILE).is_file()


def test_composed_and_measured_verdicts_are_side_by_side(policy_sweep: tuple[StoredSweep, str, str]) -> None:
    sweep, terminal, recorded = policy_sweep
    summary = sweep.summary
    assert isinstance(summary, SweepReport)
    (compared,) = summary.policy_comparisons
    # composed in the recorded sweep, from its fixed-k cells: the draft's doubled tokens/s save half
    assert any(note.startswith(f"composed in sweep {recorded}") for note in compared.notes)
    assert compared.composed is not None and compared.composed.startswith("draft k policy, vllm#49163 rule")
    assert compared.composed_saving_fraction == pytest.approx(0.5, abs=1e-3)
    # measured here, on the policy arm's own server
    measured = next(v for v in summary.mix if v.name == "draft-policy")
    assert compared.measured == measured.headline
    assert compared.measured_saving_fraction == measured.fleet.saving_fraction
    if measured.fleet.saving_fraction is not None:
        assert compared.saving_difference == pytest.approx(measured.fleet.saving_fraction
                                                           - compared.composed_saving_fraction)
    assert compared.line in terminal and compared.line in (sweep.dir / "summary.md").read_text()
