"""One arm's server life on its worker: start, equivalence probes, every cell measured and stored,
stop (``lifecycle.run_arm``); one cell's load and telemetry (``cell``); energy counters."""
