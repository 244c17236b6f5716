"""The fixture models load in vLLM CPU, and speculation on them is accepted and lossless under greedy.

Each engine runs in its own subprocess (and process group) so a failure or a timeout cannot
leave vLLM processes behind.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tasks.fixtures.build import FixturePaths, build_fixtures

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow]

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "configs" / "prompts"
PROMPTS_PER_CLASS = 2
MAX_TOKENS = 48
ENGINE_TIMEOUT_S = 420

# The offline LLM spawns engine processes, hence the __main__ guard.
GENERATE_SCRIPT = """
import json, sys

def main():
    config = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams
    from vllm.v1.metrics.reader import Counter

    llm = LLM(model=config["target"], dtype="float32", max_model_len=1024, max_num_seqs=4, seed=0,
              disable_log_stats=False, speculative_config=config["speculative_config"])
    params = SamplingParams(temperature=0.0, max_tokens=config["max_tokens"])
    outputs = llm.generate(config["prompts"], params, use_tqdm=False)
    outputs += llm.chat(config["messages"], params, use_tqdm=False)
    counters = {m.name: m.value for m in llm.get_metrics() if isinstance(m, Counter)}
    token_ids = [list(output.outputs[0].token_ids) for output in outputs]
    with open(config["out"], "w") as fh:
        json.dump({"token_ids": token_ids, "counters": counters}, fh)

if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def fixtures() -> FixturePaths:
    return build_fixtures(progress=lambda message: print(message, file=sys.stderr))


def _bundled_prompts() -> tuple[list[str], list[list[dict[str, str]]]]:
    prompts: list[str] = []
    messages: list[list[dict[str, str]]] = []
    for kind in ("code", "extraction", "longform", "chat", "rag"):
        lines = (PROMPTS_DIR / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()
        for record in map(json.loads, lines[:PROMPTS_PER_CLASS]):
            if kind == "chat":
                messages.append(record["messages"])
            else:
                prompts.append(record["prompt"])
    return prompts, messages


def _generate(fixtures: FixturePaths, speculative_config: dict[str, Any] | None, tmp: Path) -> dict[str, Any]:
    prompts, messages = _bundled_prompts()
    out = tmp / f"out-{time.monotonic_ns()}.json"
    config = {
        "target": str(fixtures.target),
        "speculative_config": speculative_config,
        "prompts": prompts,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "out": str(out),
    }
    script = tmp / "generate.py"
    script.write_text(GENERATE_SCRIPT)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_USE_V2_MODEL_RUNNER": "0"}
    process = subprocess.Popen(
        [sys.executable, str(script), json.dumps(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = process.communicate(timeout=ENGINE_TIMEOUT_S)
    finally:
        _kill_group(process)
    assert process.returncode == 0, log[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL whatever is left of the script's process group (engine cores, resource trackers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while _group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_members(process.pid), "vLLM processes outlived the test"


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in the group."""
    members = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
    return members


def test_second_build_reuses_the_cache(fixtures: FixturePaths) -> None:
    started = time.monotonic()
    again = build_fixtures()
    assert again.reused
    assert again.content_hash == fixtures.content_hash
    assert time.monotonic() - started < 30


def test_speculation_is_accepted_and_greedy_outputs_match(fixtures: FixturePaths, tmp_path: Path) -> None:
    baseline = _generate(fixtures, None, tmp_path)
    arms = {
        "draft_model": {"method": "draft_model", "model": str(fixtures.draft), "num_speculative_tokens": 3},
        "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5},
    }
    for name, speculative_config in arms.items():
        result = _generate(fixtures, speculative_config, tmp_path)
        counters = result["counters"]
        accepted = counters["vllm:spec_decode_num_accepted_tokens"]
        drafted = counters["vllm:spec_decode_num_draft_tokens"]
        print(f"{name}: accepted {accepted}/{drafted} draft tokens", file=sys.stderr)
        assert drafted > 0 and accepted > 0, name
        assert result["token_ids"] == baseline["token_ids"], f"{name}: greedy output differs from baseline"
