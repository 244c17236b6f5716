"""The sweep: measure every arm and cell on real servers, then decide where speculation pays.

1. Plan: validate the config, fingerprint models, tokenizer, engine, methods and hardware,
   expand the matrix, skip cells already complete (``--resume``, ``--continue``); under a budget,
   predict each cell's time (``specfleet_tasks.plan.budget.cell_budget``).
2. Open the sweep's MLflow parent run (the contract as params, the fingerprint as tags).
3. Measure in stages of Ray tasks: the baseline, every speculative arm side by side, with
   ``policy.measure`` the k policy each implies on its own server (derived from the cells stored
   by then), the baseline again (its end cells put overnight drift into the noise floor).
   Each finished arm's cells become MLflow child runs. Under a budget a cell that no longer fits
   is not started (``specfleet.planning.budget``) and is listed as not measured.
4. Aggregate with the economics core: cost table, decisions, negative cells, k policy;
   publish them to MLflow, Prefect artifacts and the results dir.
"""

import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.exceptions import TerminationSignal

from specfleet.contract.arms import schedule_text
from specfleet.report.sweep_report import REPORT_FILE, SweepReport, run_status
from specfleet_flows.steps import aggregate, plan_sweep, publish_prefect_artifacts, run_stage
from specfleet_flows.tracker import SweepTracker
from specfleet_tasks.cluster.interrupt import raise_if_interrupted
from specfleet_tasks.cluster.progress import CellProgress
from specfleet_tasks.cluster.session import ray_session
from specfleet_tasks.engine.noise_records import record_sweep_noise
from specfleet_tasks.plan.budget import cell_budget
from specfleet_tasks.plan.sweep_plan import POLICY_STAGE
from specfleet_tasks.report.summary_md import summary_markdown
from specfleet_tasks.store.results import atomic_write_text
from specfleet_tasks.store.sweep import SUMMARY_MARKDOWN
from specfleet_tasks.tracking.runs import tracking_uri

DEFAULT_RESULTS_DIR = "results"


@flow(name="specfleet-sweep")
def sweep_flow(config_path: str, resume: str | None = None, tracking: str | None = None,
               results_dir: str = DEFAULT_RESULTS_DIR, budget: str | None = None,
               continue_sweep: bool = False, policy_from: str | None = None) -> SweepReport:
    """Run (or resume, or continue) one sweep; returns its report and prints nothing (the caller renders
    it: ``specfleet_cli.render.print_sweep_summary``; the log says the sweep's id first). Every cell is stored as it
    finishes; MLflow logging is best effort (``SweepTracker``), so a tracking outage loses nothing.
    ``budget`` (``90m``, ``7h``) overrides the config's budget block, counted from the flow's start.
    ``policy_from``: a follow-up measuring that sweep's k policies beside a baseline (``--policy-from``)."""
    started_unix_s = time.time()
    plan = plan_sweep(Path(config_path), resume, Path(results_dir), budget, continue_sweep, policy_from)
    logger = get_run_logger()
    if plan.origin is not None:
        logger.info(plan.origin)
    logger.info("sweep id: %s", plan.sweep_id)
    logger.info("sweep %s: %d of %d cells to measure on %d servers", plan.sweep_id,
                plan.pending_cells, len(plan.cells), len(plan.work))
    for warning in plan.warnings:
        logger.warning(warning)
    budget_s = None if plan.config.budget is None else plan.config.budget.duration_s
    tracker = SweepTracker(tracking_uri(tracking), plan.sweep_id)
    tracker.open(plan.config, plan.fingerprint)
    finished: SweepReport | None = None  # set once everything is written: the run's status follows it
    killed, reports = False, []
    try:
        if plan.work:
            with ray_session(plan.config) as resources, CellProgress(plan) as progress:
                for label, stage in plan.stages():
                    if label == POLICY_STAGE:
                        progress.replan(plan)  # its servers were planned as the stage was reached
                        logger.info("k policy stage: %s", "; ".join(
                            f"{p.spec_name}: {p.reason or schedule_text(p.policy.schedule)}"
                            for p in (plan.derived.policies if plan.derived else [])))
                    raise_if_interrupted()  # each stage's budget reserves the twins of the opening cells measured
                    time_budget = None if budget_s is None else cell_budget(plan, budget_s, started_unix_s)
                    done = run_stage(plan, stage, resources, progress, label, time_budget)
                    plan.pull_results()
                    tracker.log_cells([c for r in done for c in r.cells], plan.store, plan.fingerprint.digest)
                    reports += done
        stages_done_unix_s = time.time()
        stored = [c for c in plan.store.cells() if c.key in plan.cells]
        tracker.log_cells(stored, plan.store, plan.fingerprint.digest)  # any a crash left unlogged
        summary = aggregate(plan, reports)
        ended_unix_s = time.time()
        summary = summary.model_copy(update={"wall_s": ended_unix_s - started_unix_s,
                                             "after_stages_s": ended_unix_s - stages_done_unix_s})
        tracker.log_summary(summary, summary_markdown(summary))
        if tracker.offline is not None:
            summary = summary.model_copy(update={"notes": [*summary.notes, tracker.offline]})
        markdown = summary_markdown(summary)
        plan.store.write_json(REPORT_FILE, summary)
        record_sweep_noise(plan.store.dir)  # what the next plan's power reads
        atomic_write_text(plan.store.dir / SUMMARY_MARKDOWN, markdown)
        publish_prefect_artifacts(summary, markdown)
        finished = summary
    except (KeyboardInterrupt, TerminationSignal):  # Ctrl-C, or Prefect cancelling the run
        killed = True
        raise
    finally:
        tracker.close("KILLED" if killed else run_status(finished))
    return summary
