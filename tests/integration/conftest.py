"""Shared fixtures for tests that start real services. What many tests only read is started once
per session: the fixture models, one Prefect server, one S3 and MLflow tracking server, a healthy
vLLM server per arm kind (baseline, draft, ngram) for tests that send requests to an idle
server, and the reference sweep. A test that changes a server or a service gets its own."""

import shutil
from collections.abc import Iterator

import pytest

from tests.integration.idle_servers import IdleServers
from tests.integration.processes import live_engine_pids, marked_processes
from tests.integration.reference import (
    ARTIFACTS_BUCKET,
    KEY_ENV,
    KEY_VALUE,
    RESULTS_BUCKET,
    ReferenceSweep,
    Tracking,
    reference_config,
)
from tests.integration.s3_server import S3Server, seaweed_s3
from tests.integration.services import PrefectServer, mlflow_server, prefect_server
from tests.integration.sweep_configs import ROOT


def pytest_configure(config: pytest.Config) -> None:
    """Registered here, not in pyproject.toml, whose every edit rebuilds the shared environment."""
    config.addinivalue_line("markers", "gpu_parser: puts the shipped GPU configs through vLLM's GPU build's "
                            "parser (its wheel unpacked, no GPU)")


@pytest.fixture(scope="session")
def fixture_models() -> dict[str, str]:
    from specfleet_tasks.fixtures.build import build_fixtures

    paths = build_fixtures()
    return {"fixture:target": str(paths.target), "fixture:draft": str(paths.draft),
            "fixture:tokenizer": str(paths.tokenizer)}


@pytest.fixture
def no_orphans() -> Iterator[None]:
    """Fails the test if it leaves a vLLM process behind."""
    before = live_engine_pids()
    yield
    left = live_engine_pids() - before
    assert not left, f"orphan engine processes: {sorted(left)}"


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """One real Prefect server for the session: this process's flows (through Prefect's settings)
    and every CLI process a test starts (through ``PrefectServer.env``) report to it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as server, \
            temporary_settings({PREFECT_API_URL: server.api_url}):
        yield server


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3 (SeaweedFS) for the session, with the MLflow artifacts and results buckets."""
    with seaweed_s3(tmp_path_factory.mktemp("weed")) as server:
        client = Tracking("", server, ROOT).bucket()
        for bucket in (ARTIFACTS_BUCKET, RESULTS_BUCKET):
            client.create_bucket(Bucket=bucket)
        yield server


@pytest.fixture(scope="session")
def tracking(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tracking]:
    """One real MLflow tracking server for the session (SQLite), artifacts proxied to the S3."""
    root = tmp_path_factory.mktemp("mlflow")
    env = s3.env | {"MLFLOW_S3_ENDPOINT_URL": s3.endpoint_url}
    with mlflow_server(root, f"s3://{ARTIFACTS_BUCKET}/artifacts", env) as uri:
        yield Tracking(uri, s3, root)


@pytest.fixture(scope="session")
def idle_server(fixture_models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdleServers]:
    """The session's idle servers (``IdleServers``), all stopped at the end."""
    servers = IdleServers(fixture_models, tmp_path_factory.mktemp("idle-servers"))
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def reference(prefect_api: PrefectServer, tracking: Tracking, fixture_models: dict[str, str],
              tmp_path_factory: pytest.TempPathFactory) -> ReferenceSweep:
    """The reference sweep (``tests/integration/reference.py``), run once for the session."""
    root = tmp_path_factory.mktemp("reference")
    draft = root / "draft"
    shutil.copytree(fixture_models["fixture:draft"], draft)
    run = ReferenceSweep(root, reference_config(root, draft), tracking, prefect_api)
    engines_before = live_engine_pids()
    code, run.output = run.cli("sweep", str(run.config))
    assert code == 0, run.output[-4000:]
    assert marked_processes(KEY_ENV, KEY_VALUE) == []  # Ray shut down, every server stopped
    assert not live_engine_pids() - engines_before
    return run
