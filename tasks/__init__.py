"""I/O work: Prefect tasks, and the Ray work they fan out (servers, load, telemetry, files)."""
