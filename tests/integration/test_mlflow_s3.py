"""A real MLflow tracking server (SQLite backend, artifacts proxied to a real S3: SeaweedFS on
loopback), first on its own, then as the tracking server of the reference sweep, whose results
store is mirrored to the same S3. The sweep is then resumed into a fresh results directory, as
on a fresh machine: nothing finished is measured again."""

import os

import pytest
from mlflow import MlflowClient

from tests.integration.processes import live_engine_pids
from tests.integration.reference import ARTIFACTS_BUCKET, CELLS, RESULTS_BUCKET, ReferenceSweep, Tracking

pytestmark = [pytest.mark.integration]


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


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_runs_and_per_request_parquet_are_in_the_buckets(reference: ReferenceSweep,
                                                               no_s3_credentials: None) -> None:
    parents, cells = reference.runs("sweep"), reference.runs("cell")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["sweep_id"] == reference.sweep_id
    assert len(cells) == CELLS
    client = MlflowClient(reference.tracking.uri)
    artifacts = reference.tracking.objects(ARTIFACTS_BUCKET, "artifacts/")
    for cell in cells:
        (records,) = client.list_artifacts(cell.info.run_id, "records")
        assert records.path.endswith(".parquet")
        assert [k for k in artifacts if cell.info.run_id in k and k.endswith(records.path)]
    assert [k for k in artifacts if parents[0].info.run_id in k and k.endswith("summary.md")]
    mirrored = reference.tracking.objects(RESULTS_BUCKET, f"sweeps/{reference.sweep_id}/")
    assert len([k for k in mirrored if k.endswith(".parquet") and "/records/" in k]) == CELLS
    assert len([k for k in mirrored if "/cells/" in k and k.endswith(".json")]) == CELLS


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resume_on_a_fresh_machine_measures_nothing_again(reference: ReferenceSweep) -> None:
    """A results directory that never saw the sweep: the finished cells come from the bucket."""
    mirrored = reference.tracking.objects(RESULTS_BUCKET, f"sweeps/{reference.sweep_id}/")
    engines_before = live_engine_pids()
    fresh_dir = reference.root / "fresh-machine"
    code, output = reference.cli("sweep", str(reference.config), "--resume", reference.sweep_id,
                                 results_dir=fresh_dir)
    assert code == 0, output[-4000:]
    assert f"sweep id: {reference.sweep_id}" in output and "0 servers started" in output
    assert not (live_engine_pids() - engines_before)
    assert len(list((fresh_dir / reference.sweep_id / "cells").glob("*.json"))) == CELLS  # fetched from the bucket
    now = reference.tracking.objects(RESULTS_BUCKET, f"sweeps/{reference.sweep_id}/")
    unchanged = {k: v for k, v in now.items() if "/cells/" in k or "/records/" in k}
    assert unchanged == {k: v for k, v in mirrored.items() if "/cells/" in k or "/records/" in k}
    assert len(reference.runs("cell")) == CELLS and len(reference.runs("sweep")) == 1
