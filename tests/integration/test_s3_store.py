"""The results store mirrored to a real S3 server (the session's SeaweedFS, its ``results``
bucket): a fresh machine resumes from the bucket."""

from pathlib import Path

import boto3
import pytest

from specfleet.contract import CellIdentity
from specfleet.results import CellResult, DistributionSummary, EnergyReading, RequestRecord, Throughput
from specfleet_tasks.store.results import ResultsStore
from tests.integration.s3_server import S3Server

pytestmark = pytest.mark.integration

RECORDS = [RequestRecord(index=0, prompt_id="p0", send_ns=1, error="timed out")]


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return s3


def _cell(key: str) -> CellResult:
    empty = DistributionSummary(count=0, mean=None, p50=None, p95=None, p99=None)
    identity = CellIdentity(arm="baseline", method="baseline", k=None, load_mode="concurrency", load_value=1.0,
                            prompt_class="code", sampling="greedy", repeat=0)
    return CellResult(
        identity=identity, key=key, status="ok", requests_planned=1, completed=1, failed=0, slo_met=1,
        ttft_ms=empty, itl_per_chunk_ms=empty, itl_per_token_ms=empty, tpot_ms=empty, e2e_ms=empty,
        throughput=Throughput(duration_s=1.0, output_tokens=4, qualified_output_tokens=4, output_tokens_per_s=4.0,
                              qualified_tokens_per_s=4.0, request_goodput_per_s=1.0, requests_per_s=1.0),
        energy=EnergyReading(source="none", joules=None, reason="test"),
    )


def test_resume_on_a_fresh_machine_finds_finished_cells(s3_env: S3Server, tmp_path: Path) -> None:
    first = ResultsStore(tmp_path / "machine-a", "sweep-1", mirror_url="s3://results/nightly")
    first.write_records("k1", RECORDS)
    first.write_cell(_cell("k1"))
    first.write_json("equivalence/baseline.json", {"greedy": {"p0": [1, 2]}})
    listing = boto3.client("s3").list_objects_v2(Bucket="results", Prefix="nightly/sweep-1/")
    keys = sorted(o["Key"] for o in listing["Contents"])
    assert keys == ["nightly/sweep-1/cells/k1.json", "nightly/sweep-1/equivalence/baseline.json",
                    "nightly/sweep-1/records/k1.parquet"]

    second = ResultsStore(tmp_path / "machine-b", "sweep-1", mirror_url="s3://results/nightly")
    assert second.complete_keys() == {"k1"}
    assert second.records_path("k1").read_bytes() == first.records_path("k1").read_bytes()
    assert second.read_json("equivalence/baseline.json") == {"greedy": {"p0": [1, 2]}}


def test_records_without_their_cell_json_are_not_done(s3_env: S3Server, tmp_path: Path) -> None:
    first = ResultsStore(tmp_path / "a", "sweep-2", mirror_url="s3://results/nightly")
    first.write_records("half", RECORDS)
    second = ResultsStore(tmp_path / "b", "sweep-2", mirror_url="s3://results/nightly")
    assert second.complete_keys() == set()
