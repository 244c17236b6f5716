"""Run in a subprocess by ``test_gpu_parser.py``: vLLM's GPU build (an unpacked wheel, first on
sys.path, ``VLLM_TARGET_DEVICE=cpu``) parses each arm's server arguments as its API server does
(``make_arg_parser``, ``validate_parsed_serve_args``) and builds its engine config
(``AsyncEngineArgs.create_engine_config``) under the arm's environment. Nothing loads weights or
touches a GPU.

Reads ``{"wheel": DIR, "arms": [{"arm", "args", "env"}]}`` on stdin; writes one JSON object per arm
on stdout: what the engine made of it, or the error it refused it with.
"""

import json
import logging
import os
import sys
from typing import Any

request = json.load(sys.stdin)
sys.path.insert(0, request["wheel"])
os.environ["VLLM_TARGET_DEVICE"] = "cpu"

import vllm  # noqa: E402
import vllm.config.vllm as vllm_config  # noqa: E402
import vllm.triton_utils as triton_utils  # noqa: E402
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

# A GPU node has Triton, so vLLM's default runner there is chosen as on the node, not as on this CPU
# (where vLLM 0.34's CPU platform would refuse to build a config at all without triton-cpu).
vllm_config.HAS_TRITON = True  # type: ignore[attr-defined]
triton_utils.HAS_TRITON = True  # type: ignore[attr-defined]


class Deprecations(logging.Handler):
    """vLLM's own deprecation warnings (its logger, not Python's warnings), per arm."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "deprecated" in message.lower():
            self.seen.append(message)


def engine_view(args: list[str]) -> dict[str, Any]:
    parser = make_arg_parser(FlexibleArgumentParser())
    try:
        namespace = parser.parse_args(args)
    except SystemExit:
        return {"error": "the server's parser refused the arguments (argparse exit)"}
    validate_parsed_serve_args(namespace)
    config = AsyncEngineArgs.from_cli_args(namespace).create_engine_config()
    spec = config.speculative_config
    return {
        "version": vllm.__version__,
        "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
        "quantization": config.model_config.quantization,
        "max_model_len": config.model_config.max_model_len,
        # vLLM 0.34 has one model runner, the former V2 (its V1 runner and VLLM_USE_V2_MODEL_RUNNER are gone)
        "model_runner_v2": bool(getattr(config, "use_v2_model_runner", True)),
        "per_request_spec_decode_metrics": config.observability_config.per_request_spec_decode_metrics,
        "speculative": None if spec is None else {
            "method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens, "model": spec.model,
            "prompt_lookup_min": spec.prompt_lookup_min, "prompt_lookup_max": spec.prompt_lookup_max,
            "draft_tensor_parallel_size": spec.draft_tensor_parallel_size,
        },
    }


def main() -> None:
    deprecations = Deprecations()
    logging.getLogger("vllm").addHandler(deprecations)
    base_env = dict(os.environ)
    seen: dict[str, dict[str, Any]] = {}
    """Arms rendered alike in several configs are built once."""
    for arm in request["arms"]:
        key = json.dumps([arm["args"], arm["env"]])
        if key not in seen:
            os.environ.clear()
            os.environ.update(base_env | arm["env"])
            deprecations.seen = []
            try:
                view = engine_view(arm["args"])
            except Exception as err:  # the engine's refusal is the finding: report it, go on
                view = {"error": f"{type(err).__name__}: {err}"}
            seen[key] = {**view, "deprecations": sorted(set(deprecations.seen))}
        print(json.dumps({"arm": arm["arm"], **seen[key]}), flush=True)


main()
