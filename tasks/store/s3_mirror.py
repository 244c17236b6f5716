"""Mirror a sweep's results directory to ``s3://bucket/prefix`` so another machine can resume it.

boto3 reads the endpoint (``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3`` for an
S3-compatible store) and the credentials from the environment. A cell's Parquet is uploaded
before its JSON, and the JSON is what marks the cell complete, so a half-uploaded cell is
never taken as done.
"""

from pathlib import Path
from urllib.parse import urlparse

import boto3

from specfleet.errors import InputError


class S3Mirror:
    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise InputError(f"results store {url!r}: expected s3://bucket/prefix")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.client = boto3.client("s3")

    def _key(self, sweep_id: str, relative: str) -> str:
        return "/".join(part for part in (self.prefix, sweep_id, relative) if part)

    def upload(self, sweep_id: str, relative: str, path: Path) -> None:
        self.client.upload_file(str(path), self.bucket, self._key(sweep_id, relative))

    def download_sweep(self, sweep_id: str, into: Path) -> int:
        """Fetch every stored file of the sweep into ``into``; returns how many."""
        base = self._key(sweep_id, "") + "/"
        count = 0
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
            for item in page.get("Contents", []):
                relative = item["Key"][len(base):]
                target = into / relative
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = target.with_name(f".{target.name}.download")
                self.client.download_file(self.bucket, item["Key"], str(tmp))
                tmp.replace(target)
                count += 1
        return count
