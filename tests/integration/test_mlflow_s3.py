"""A real MLflow tracking server (SQLite backend, artifacts proxied to a real S3: SeaweedFS on
loopback), first on its own, then as the tracking server of a tiny real sweep whose results
store is mirrored to the same S3. The sweep is then resumed from a fresh results directory
(the local one deleted), as on a fresh machine: nothing finished is measured again."""

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from mlflow import MlflowClient

from tasks.engine.ports import free_port
from tests.integration.conftest import BASELINE_ARM, NGRAM_ARM, live_engine_pids, tiny_sweep_config
from tests.integration.s3_server import S3Server, seaweed_s3
from tests.integration.services import answers_http, service, wait_until_ready

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_BUCKET, RESULTS_BUCKET = "mlflow", "results"
RESULTS_URL = f"s3://{RESULTS_BUCKET}/sweeps"
EXPERIMENT = "it-mlflow-s3"


@dataclass(frozen=True)
class Tracking:
    uri: str
    s3: S3Server

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


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tracking]:
    root = tmp_path_factory.mktemp("mlflow")
    (root / "weed").mkdir()
    with seaweed_s3(root / "weed") as s3:
        client = Tracking("", s3).bucket()
        for bucket in (ARTIFACTS_BUCKET, RESULTS_BUCKET):
            client.create_bucket(Bucket=bucket)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))} | s3.env | {
            "MLFLOW_S3_ENDPOINT_URL": s3.endpoint_url,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no background job workers: 2 shared cores
        }
        log = root / "mlflow.log"
        argv = [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
                f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", f"s3://{ARTIFACTS_BUCKET}/artifacts",
                "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        with service(argv, log, env=env, cwd=root) as process:
            uri = f"http://127.0.0.1:{port}"
            wait_until_ready(answers_http(f"{uri}/health"), process, log, "mlflow server")
            yield Tracking(uri, s3)


@pytest.fixture
def no_s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients talk to the tracking server only: it proxies artifacts to S3."""
    for name in [n for n in os.environ if n.startswith(("AWS_", "MLFLOW_"))]:
        monkeypatch.delenv(name)


def test_an_artifact_logged_through_the_server_lands_in_the_bucket(tracking: Tracking,
                                                                    no_s3_credentials: None) -> None:
    client = MlflowClient(tracking.uri)
    experiment = client.create_experiment("it-artifacts")
    run = client.create_run(experiment, run_name="hello")
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    client.log_text(run.info.run_id, "specfleet was here", "notes/hello.txt")
    client.set_terminated(run.info.run_id)
    keys = [k for k in tracking.objects(ARTIFACTS_BUCKET, "artifacts/") if k.endswith("notes/hello.txt")]
    assert len(keys) == 1 and run.info.run_id in keys[0]
    body = tracking.bucket().get_object(Bucket=ARTIFACTS_BUCKET, Key=keys[0])["Body"].read()
    assert body == b"specfleet was here"


# --- a tiny real sweep tracked by the server, its results mirrored to S3 ------------------------

@dataclass
class Swept:
    root: Path
    config: Path
    sweep_id: str
    tracking: Tracking

    def cli(self, results_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """`specfleet sweep` in its own process (Prefect's ephemeral API, local Ray), killed by
        process group if it overruns."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_", "PREFECT_", "RAY_"))}
        env |= self.tracking.s3.env | {"SPECFLEET_RESULTS_S3": RESULTS_URL,
                                       "PREFECT_HOME": str(self.root / "prefect-home")}
        command = [sys.executable, "-c", "from cli.main import entry; entry()", "sweep", str(self.config),
                   *args, "--tracking-uri", self.tracking.uri, "--results-dir", str(results_dir)]
        process = subprocess.Popen(command, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = process.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate()
            raise AssertionError(f"sweep overran:\n{out[-4000:]}") from None
        return subprocess.CompletedProcess(command, process.returncode, out, "")

    def runs(self, kind: str) -> list[Any]:
        client = MlflowClient(self.tracking.uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        assert experiment is not None
        return list(client.search_runs([experiment.experiment_id], f"tags.run_kind = '{kind}'"))


def _config(root: Path) -> Path:
    return tiny_sweep_config(root / "sweep.yaml", EXPERIMENT, [BASELINE_ARM, NGRAM_ARM], warmup=1,
                             analysis={"confidence": 0.95, "bootstrap_resamples": 200})


@pytest.fixture(scope="module")
def swept(tracking: Tracking, tmp_path_factory: pytest.TempPathFactory, fixture_models: dict[str, str]
          ) -> Swept:
    root = tmp_path_factory.mktemp("sweep")
    run = Swept(root, _config(root), "", tracking)
    engines_before = live_engine_pids()
    first = run.cli(root / "results-a")
    assert first.returncode == 0, first.stdout[-4000:]
    run.sweep_id = first.stdout.split("sweep id: ", 1)[1].split()[0]
    assert not (live_engine_pids() - engines_before)
    return run


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_runs_and_per_request_parquet_are_in_the_buckets(swept: Swept, no_s3_credentials: None) -> None:
    parents, cells = swept.runs("sweep"), swept.runs("cell")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["sweep_id"] == swept.sweep_id
    assert len(cells) == 3  # baseline, ngram-k3, baseline again at the end
    client = MlflowClient(swept.tracking.uri)
    artifacts = swept.tracking.objects(ARTIFACTS_BUCKET, "artifacts/")
    for cell in cells:
        (records,) = client.list_artifacts(cell.info.run_id, "records")
        assert records.path.endswith(".parquet")
        assert [k for k in artifacts if cell.info.run_id in k and k.endswith(records.path)]
    assert [k for k in artifacts if parents[0].info.run_id in k and k.endswith("summary.md")]
    mirrored = swept.tracking.objects(RESULTS_BUCKET, f"sweeps/{swept.sweep_id}/")
    assert len([k for k in mirrored if k.endswith(".parquet") and "/records/" in k]) == 3
    assert len([k for k in mirrored if "/cells/" in k and k.endswith(".json")]) == 3


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resume_on_a_fresh_machine_measures_nothing_again(swept: Swept) -> None:
    mirrored = swept.tracking.objects(RESULTS_BUCKET, f"sweeps/{swept.sweep_id}/")
    shutil.rmtree(swept.root / "results-a")  # the first machine is gone
    engines_before = live_engine_pids()
    again = swept.cli(swept.root / "results-b", "--resume", swept.sweep_id)
    assert again.returncode == 0, again.stdout[-4000:]
    assert f"sweep id: {swept.sweep_id}" in again.stdout and "0 servers started" in again.stdout
    assert not (live_engine_pids() - engines_before)
    fresh = swept.root / "results-b" / swept.sweep_id
    assert len(list((fresh / "cells").glob("*.json"))) == 3  # fetched from the bucket
    now = swept.tracking.objects(RESULTS_BUCKET, f"sweeps/{swept.sweep_id}/")
    unchanged = {k: v for k, v in now.items() if "/cells/" in k or "/records/" in k}
    assert unchanged == {k: v for k, v in mirrored.items() if "/cells/" in k or "/records/" in k}
    assert len(swept.runs("cell")) == 3 and len(swept.runs("sweep")) == 1
