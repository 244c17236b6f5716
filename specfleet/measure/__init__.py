"""What is measured, from the per-request records and vLLM's telemetry: latency metrics, acceptance, the /metrics
counters as typed figures."""
