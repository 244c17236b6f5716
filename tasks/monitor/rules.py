"""``specfleet monitor rules``: a stored sweep read into a ``MonitorBasis`` and its Prometheus rules
written as YAML (``specfleet.production.monitor_basis``, ``specfleet.production.prometheus_rules``)."""

from pathlib import Path

import yaml

from specfleet.contract.durations import format_duration
from specfleet.contract.server_args import deployment_args
from specfleet.production.monitor_basis import LoadBucket, MonitorBasis, monitor_basis
from specfleet.production.prometheus_rules import prometheus_rules
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.store.results import atomic_write_text
from specfleet_tasks.store.sweep import StoredSweep

NO_STORED_ARGS = ("the sweep's summary stored no server arguments (written before they were): the rollback "
                  "command names the models as the config writes them")


def sweep_basis(sweep: StoredSweep, arm: str | None) -> tuple[MonitorBasis, list[str]]:
    """The figures the alerts compare with, from the stored sweep, and notes on what is missing."""
    stored = sweep.report.server_args
    deployment = stored if stored is not None else deployment_args(sweep.config, {}, SERVED_MODEL_NAME)
    basis = monitor_basis(sweep.id, sweep.config, sweep.cells, sweep.records, sweep.report.mix, deployment,
                          sweep.report.noise, arm)
    notes = [] if stored is not None else [NO_STORED_ARGS]
    notes += [f"{p.specfleet.spec_name}'s k policy ({p.specfleet.sampling}) is composed, not measured: these rules "
              "watch a measured arm; measure the policy (policy.measure, --policy-from) to watch it"
              for p in sweep.report.k_policy if p.peer is None and p.speculative_config and p.recommended != "measured"]
    return basis, notes + [note for bucket in basis.buckets for note in bucket.notes]


def rules_yaml(basis: MonitorBasis, window_s: int, model: str | None, notes: list[str]) -> str:
    """The rule file, opened by comments saying where its thresholds come from."""
    rules = prometheus_rules(basis, window_s, model).model_dump(mode="json", by_alias=True)
    adopted = "adopted at the traffic mix" if basis.adopted else "named with --arm; the sweep did not adopt it"
    header = [f"specfleet monitor rules: sweep {basis.sweep_id}, arm {basis.arm} ({adopted}), "
              f"figures of its {basis.sampling} cells, window {format_duration(window_s)}"]
    header += [f"concurrency {b.concurrency}: {_figures(b)}" for b in basis.buckets]
    header += [f"note: {note}" for note in notes]
    return "".join(f"# {line}\n" for line in header) + yaml.safe_dump(rules, sort_keys=False, width=100_000)


def _figures(b: LoadBucket) -> str:
    figures = []
    if b.break_even_tokens_per_step is not None and b.speculative_step_ms and b.baseline_step_ms:
        figures.append(f"break-even {b.break_even_tokens_per_step:.2f} tokens/step (speculative step "
                       f"{b.speculative_step_ms:.2f} ms / baseline step {b.baseline_step_ms:.2f} ms)")
    if b.tokens_per_step is not None:
        figures.append(f"measured {b.tokens_per_step:.2f} tokens/step")
    if b.noise_floor is not None:
        figures.append(f"noise floor {b.noise_floor:.1%}")
    if b.drift_floor_tokens_per_step is not None:
        figures.append(f"drift floor {b.drift_floor_tokens_per_step:.2f}")
    return ", ".join(figures) or "no figures"


def write_rules(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
