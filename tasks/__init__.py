"""The I/O shell around the pure core (``specfleet``), one package per stage: plan, engine, arm,
loadgen, store, tracking, cluster, analysis, report, fixtures. Plain functions; the Prefect tasks
that wrap them live with the flows (``flows/steps.py``)."""
