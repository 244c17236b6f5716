"""The Prefect side of the flows: the plain functions of ``tasks/`` wrapped as Prefect tasks
(so each shows as a task run with its state), and the artifacts a sweep publishes on its run.

No task caches: a measurement must run when asked, and resume is keyed on the results store.
MLflow calls are retried twice; a failure past that is the tracker's to absorb (``specfleet_flows.tracker``).
"""

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from specfleet.report.sweep_report import SweepReport
from specfleet_tasks.analysis import summary as _summary
from specfleet_tasks.cluster import stage as _stage
from specfleet_tasks.plan import sweep_plan as _sweep_plan
from specfleet_tasks.tracking import runs as _runs

plan_sweep = task(cache_policy=NO_CACHE)(_sweep_plan.plan_sweep)
run_stage = task(cache_policy=NO_CACHE)(_stage.run_stage)
aggregate = task(cache_policy=NO_CACHE)(_summary.aggregate)

_tracking = task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
open_sweep_run = _tracking(_runs.open_sweep_run)
log_cell_runs = _tracking(_runs.log_cell_runs)
log_sweep_summary = _tracking(_runs.log_sweep_summary)


def publish_prefect_artifacts(summary: SweepReport, markdown: str) -> None:
    """The cost table as a table artifact and the summary as markdown, on the flow run."""
    key = "".join(ch if ch.isalnum() else "-" for ch in summary.config_name.lower())
    create_table_artifact(table=[row.model_dump(mode="json") for row in summary.cost_table],
                          key=f"{key}-cost-table", description=f"Cost table of sweep {summary.sweep_id}")
    create_markdown_artifact(markdown=markdown, key=f"{key}-sweep-summary",
                             description=f"Summary of sweep {summary.sweep_id}")
