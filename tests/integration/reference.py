"""The reference sweep: one small real sweep, run once per test session and asserted on by the
measurement, sweep-flow and MLflow/S3 tests.

It runs as a user runs it: ``specfleet sweep`` in its own process, against the session's real
Prefect server, a real MLflow tracking server whose artifacts go to a real S3 (SeaweedFS), its
results store mirrored to that S3, local Ray and real vLLM CPU servers on the fixture models:
the baseline, draft_model k=2 and ngram k=3 at concurrency 2, and the closing baseline. Each arm
answers the code class's bundled scored set (``configs/prompts/scored/code.jsonl``), so the
held-out quality gate runs for real.
An API key is planted in the environment to show it never reaches a file or a log."""

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from mlflow import MlflowClient
from mlflow.entities import Run

from specfleet.results import CellResult
from specfleet_tasks.store.results import MIRROR_ENV, ResultsStore
from tests.integration.s3_server import S3Server
from tests.integration.services import PrefectServer
from tests.integration.sweep_configs import BASELINE_ARM, NGRAM_ARM, tiny_sweep_config

EXPERIMENT = "it-reference"
ARTIFACTS_BUCKET, RESULTS_BUCKET = "mlflow", "results"
RESULTS_URL = f"s3://{RESULTS_BUCKET}/sweeps"
KEY_ENV, KEY_VALUE = "SPECFLEET_IT_API_KEY", "sk-it-do-not-log-7f3a"
DRAFT_ARM = {"name": "draft", "method": "draft_model", "k": [2]}
ARMS = ("baseline", "draft-k2", "ngram-k3")
CELLS = 4  # the baseline, draft-k2, ngram-k3 and the baseline again at the end
REQUESTS = 8  # p50/p95/p99 need only a non-empty series here; 8 at concurrency 2 gives batches of two
MAX_TOKENS = 32
GREEDY_PROMPTS, GREEDY_TOKENS = 4, 24
QUALITY_TOLERANCE = 0.1


@dataclass(frozen=True)
class Tracking:
    """The session's MLflow tracking server and the S3 it stores artifacts and results in."""

    uri: str
    s3: S3Server
    root: Path

    def bucket(self) -> Any:
        return boto3.client("s3", endpoint_url=self.s3.endpoint_url, region_name="us-east-1",
                            aws_access_key_id=self.s3.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.s3.env["AWS_SECRET_ACCESS_KEY"])

    def objects(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """key -> ETag of every object under the prefix."""
        out: dict[str, str] = {}
        for page in self.bucket().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out |= {item["Key"]: item["ETag"] for item in page.get("Contents", [])}
        return out

    def runs(self, experiment_name: str, kind: str) -> list[Run]:
        client = MlflowClient(self.uri)
        experiment = client.get_experiment_by_name(experiment_name)
        assert experiment is not None
        return list(client.search_runs([experiment.experiment_id], f"tags.run_kind = '{kind}'"))


@dataclass
class ReferenceSweep:
    root: Path
    config: Path
    tracking: Tracking
    prefect: PrefectServer
    output: str = ""

    @property
    def sweep_id(self) -> str:
        return self.output.split("sweep id: ", 1)[1].split()[0]

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def store(self) -> ResultsStore:
        return ResultsStore(self.results, self.sweep_id)

    def summary(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads((self.store.dir / "summary.json").read_text())
        return found

    def cells(self) -> dict[str, CellResult]:
        """Stored cells by arm, the closing baseline's as ``baseline-end``."""
        return {cell.identity.arm + ("-end" if cell.identity.phase == "baseline_end" else ""): cell
                for cell in self.store.cells()}

    def runs(self, kind: str) -> list[Run]:
        return self.tracking.runs(EXPERIMENT, kind)

    def cli(self, *args: str, results_dir: Path | None = None, timeout_s: float = 900) -> tuple[int, str]:
        """The ``specfleet`` command in its own process with the session's services, killed by
        process group if it overruns; returns its exit code and output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_", "PREFECT_", "RAY_"))}
        env |= self.tracking.s3.env | {k: v for k, v in self.prefect.env.items() if k.startswith("PREFECT_")}
        env |= {MIRROR_ENV: RESULTS_URL, KEY_ENV: KEY_VALUE}
        command = [sys.executable, "-c", "from specfleet_cli.main import entry; entry()", *args,
                   "--tracking-uri", self.tracking.uri, "--results-dir", str(results_dir or self.results)]
        process = subprocess.Popen(command, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate()
            raise AssertionError(f"specfleet {' '.join(args)} overran:\n{out[-4000:]}") from None
        return process.returncode, out


def reference_config(root: Path, draft: Path) -> Path:
    """The demo config cut to three arms, one class (code) at concurrency 2; the draft is a copy
    the revalidation test can change."""
    return tiny_sweep_config(
        root / "reference.yaml", EXPERIMENT, [BASELINE_ARM, DRAFT_ARM, NGRAM_ARM], requests=REQUESTS, warmup=1,
        max_tokens=MAX_TOKENS, concurrency=[2], draft=draft, api_key_env=KEY_ENV,
        equivalence={"prompt_class": "code", "prompts": GREEDY_PROMPTS, "greedy_max_tokens": GREEDY_TOKENS,
                     "quality_tolerance": QUALITY_TOLERANCE},
        analysis={"confidence": 0.95, "bootstrap_resamples": 200})
