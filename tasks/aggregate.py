"""From the results store to the economics: equivalence gates from the stored probes,
per-request samples from the Parquet files, then the core's decisions, cost table,
negative-result cells and k policy (``specfleet.decisions``, ``decision_table``, ``kpolicy``)."""

from collections.abc import Mapping, Sequence
from typing import Literal

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import Field

from specfleet.contract import ArmPlan, SweepConfig, arm_plans
from specfleet.contract.base import RecordModel
from specfleet.decision_table import decision_rows, negative_cells, rows_as_dicts
from specfleet.decisions import decide_all
from specfleet.kpolicy import k_policy_reports
from specfleet.results import ArmTiming, CellResult
from specfleet.stats.equivalence import greedy_equivalence, stochastic_equivalence
from specfleet.stats.quality import GateResult
from specfleet.stats.samples import CellSample
from tasks.loadgen.parquet import read_records_parquet
from tasks.ray_arms import ArmReport
from tasks.store import ResultsStore
from tasks.sweep_plan import SweepPlan

PEER_MIN_RUNS = 3  # vllm#49163 refuses fewer repeated runs per (batch, k); kept as the peer wrote it
PERMUTATIONS = 999

Greedy = dict[str, list[int]]
Sampled = dict[str, list[list[int]]]


class ArmSummary(RecordModel):
    arm: str
    phase: str
    cells_measured: int
    error: str | None
    timing: ArmTiming | None = Field(description="None when the arm's Ray task died past its retries.")
    measured_fraction: float | None = Field(description="Measured windows over the arm's wall time.")


class SweepSummary(RecordModel):
    """Everything the sweep reports; every figure comes from a stored measurement."""

    sweep_id: str
    config_name: str
    fingerprint: str
    resumed: bool
    cells_planned: int
    cells_complete: int
    cells_ok: int
    cells_invalid: int
    failed_cells: list[str] = Field(description="Label and reason of every cell without a complete result.")
    servers_started: int = Field(description="Arms started in this invocation (0: nothing left to measure).")
    arms: list[ArmSummary]
    gates: dict[str, list[GateResult]]
    notes: list[str]
    cost_table: list[dict[str, object]] = Field(description="One row per decision (DecisionRow).")
    negative_cells: list[dict[str, object]]
    decisions: list[dict[str, object]]
    k_policy: list[dict[str, object]] = Field(description="KPolicyReport, plus the specfleet rule's "
                                                          "ready-to-paste speculative_config.")
    results_dir: str

    @property
    def exit_failed(self) -> bool:
        return bool(self.failed_cells)

    @property
    def run_status(self) -> Literal["FINISHED", "FAILED"]:
        """The parent run's MLflow status: FINISHED only when every cell is complete, since
        revalidation trusts finished sweeps alone; FAILED says resume it."""
        return "FAILED" if self.exit_failed else "FINISHED"


def _greedy(payload: Mapping[str, object], key: str) -> Greedy | None:
    value = payload.get(key)
    return {str(p): [int(t) for t in tokens] for p, tokens in value.items()} if isinstance(value, dict) else None


def _sampled(payload: Mapping[str, object]) -> Sampled | None:
    value = payload.get("stochastic")
    if not isinstance(value, dict):
        return None
    return {str(p): [[int(t) for t in seq] for seq in seqs] for p, seqs in value.items()}


def equivalence_gates(config: SweepConfig, store: ResultsStore, plans: Sequence[ArmPlan]
                      ) -> tuple[dict[str, list[GateResult]], list[str]]:
    """Per speculative arm: greedy exact match against the baseline with the baseline's own
    repeat as the control, and the stochastic test where both arms stored samples."""
    baseline = plans[0]
    base = store.read_json(f"equivalence/{baseline.arm}.json") or {}
    base_greedy, control = _greedy(base, "greedy"), _greedy(base, "greedy_repeat")
    gates: dict[str, list[GateResult]] = {}
    notes = []
    spec = config.equivalence.stochastic
    for arm in (p for p in plans if not p.is_baseline):
        probe = store.read_json(f"equivalence/{arm.arm}.json") or {}
        greedy = _greedy(probe, "greedy")
        if base_greedy is None or greedy is None:
            missing = baseline.arm if base_greedy is None else arm.arm
            notes.append(f"{arm.arm}: no equivalence gate (no stored probe of {missing})")
            continue
        arm_gates = [greedy_equivalence(base_greedy, greedy, control).gate()]
        a, b = _sampled(base), _sampled(probe)
        if spec is not None and a is not None and b is not None:
            arm_gates.append(stochastic_equivalence(
                a, b, significance=spec.significance, power=spec.power, min_detectable_tv=spec.min_detectable_tv,
                permutations=PERMUTATIONS, seed=config.analysis.seed).gate())
        elif spec is not None:
            notes.append(f"{arm.arm}: stochastic gate not run (no stored samples)")
        gates[arm.arm] = arm_gates
    return gates, notes


def cell_samples(cells: Sequence[CellResult], plan: SweepPlan) -> dict[str, CellSample]:
    """Per-request samples of the usable cells, read back from their Parquet files."""
    samples = {}
    for cell in cells:
        if cell.usable and cell.records_file:
            records = read_records_parquet(plan.store.dir / cell.records_file)
            samples[cell.key] = CellSample.from_records(cell, records, plan.config.slo)
    return samples


def _failure(plan: SweepPlan, key: str, cell: CellResult | None, errors: Mapping[str, str]) -> str:
    ident = plan.cells[key]
    if cell is not None:
        return f"{ident.label}: " + ("; ".join(cell.reasons) or "failed")
    return f"{ident.label}: not measured" + (f" ({errors[ident.arm]})" if ident.arm in errors else "")


@task(cache_policy=NO_CACHE)
def aggregate(plan: SweepPlan, reports: Sequence[ArmReport]) -> SweepSummary:
    """Read every stored cell of the sweep and run the economics core over them."""
    cells = [c for c in plan.store.cells() if c.key in plan.cells]
    by_key = {c.key: c for c in cells}
    complete = {c.key for c in cells if c.status != "failed"}
    errors = {r.arm: r.error.splitlines()[0] for r in reports if r.error}
    plans = arm_plans(plan.config)
    gates, notes = equivalence_gates(plan.config, plan.store, plans)
    decisions = decide_all(cells, cell_samples(cells, plan), plan.config, gates)
    policies = k_policy_reports(decisions, cells, plan.config, peer_min_runs=PEER_MIN_RUNS)
    return SweepSummary(
        sweep_id=plan.sweep_id, config_name=plan.config.name, fingerprint=plan.fingerprint.digest,
        resumed=plan.resumed, cells_planned=len(plan.cells), cells_complete=len(complete),
        cells_ok=sum(c.status == "ok" for c in cells), cells_invalid=sum(c.status == "invalid" for c in cells),
        failed_cells=[_failure(plan, key, by_key.get(key), errors) for key in plan.cells if key not in complete],
        servers_started=len(reports),
        arms=[ArmSummary(arm=r.arm, phase=r.phase, cells_measured=len(r.cells), error=r.error,
                         timing=r.timing, measured_fraction=r.timing.measured_fraction if r.timing else None)
              for r in reports],
        gates=gates, notes=[*plan.warnings, *notes],
        cost_table=rows_as_dicts(decision_rows(decisions, plan.config)),
        negative_cells=rows_as_dicts(negative_cells(decisions, plan.config)),
        decisions=[d.model_dump(mode="json") for d in decisions],
        k_policy=[r.model_dump(mode="json") | {"speculative_config": r.specfleet.speculative_config()}
                  for r in policies],
        results_dir=str(plan.store.dir),
    )
