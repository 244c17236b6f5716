"""The results directory: one JSON and one Parquet per finished cell, written atomically.

Layout under ``<root>/<sweep_id>/``: ``cells/<key>.json`` (a ``CellResult``),
``records/<key>.parquet`` (its per-request records), ``equivalence/<arm>.json`` and
``quality/<arm>.json`` (the idle-server probes, ``probe_file``), ``logs/<arm>.log``. A file
appears under its final name only once completely written (temporary file + ``os.replace``),
so a killed process never leaves a half-written result.

With ``SPECFLEET_RESULTS_S3=s3://bucket/prefix`` (or ``mirror_url``) every file is also
uploaded as it is written, and opening the store first fetches what the bucket already
holds for the sweep: ``--resume`` works from a fresh machine.
"""

import errno
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from specfleet.errors import StorageFull
from specfleet.results import CellResult, RequestRecord
from specfleet_tasks.store.parquet import records_parquet_bytes
from specfleet_tasks.store.s3_mirror import S3Mirror

MIRROR_ENV = "SPECFLEET_RESULTS_S3"
FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
ProbeKind = Literal["equivalence", "quality"]


def probe_file(kind: ProbeKind, arm: str) -> str:
    """Where an arm's idle-server probe of this kind is stored, relative to the sweep's folder."""
    return f"{kind}/{arm}.json"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename: the final name only ever holds a whole file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        _raise_if_full(err, path)
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            _raise_if_full(err, path)
        raise


def _raise_if_full(err: OSError, path: Path) -> None:
    if err.errno in FULL_ERRNOS:
        raise StorageFull(err.errno, f"cannot write {path}: {os.strerror(err.errno or 0).lower()}; "
                                     "results written before are intact (free space, then --resume)") from err


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class ResultsStore:
    """Finished cells of one sweep on local disk."""

    def __init__(self, root: Path, sweep_id: str, mirror_url: str | None = None) -> None:
        self.root = root
        self.sweep_id = sweep_id
        self.dir = root / sweep_id
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        url = mirror_url or os.environ.get(MIRROR_ENV)
        self.mirror = S3Mirror(url) if url else None
        if self.mirror is not None:
            self.mirror.download_sweep(sweep_id, self.dir)

    def _written(self, path: Path) -> None:
        if self.mirror is not None:
            self.mirror.upload(self.sweep_id, str(path.relative_to(self.dir)), path)

    def cell_path(self, key: str) -> Path:
        return self.dir / "cells" / f"{key}.json"

    def records_path(self, key: str) -> Path:
        return self.dir / "records" / f"{key}.parquet"

    def log_path(self, arm: str) -> Path:
        return self.dir / "logs" / f"{arm}.log"

    def write_records(self, key: str, records: Sequence[RequestRecord]) -> str:
        """A cell's per-request Parquet; returns its path relative to the sweep's directory."""
        path = self.records_path(key)
        atomic_write_bytes(path, records_parquet_bytes(records))
        self._written(path)
        return str(path.relative_to(self.dir))

    def write_cell(self, result: CellResult) -> Path:
        path = self.cell_path(result.key)
        atomic_write_text(path, result.model_dump_json(indent=2))
        self._written(path)
        return path

    def write_json(self, relative: str, model: BaseModel | dict[str, object]) -> Path:
        path = self.dir / relative
        text = model.model_dump_json(indent=2) if isinstance(model, BaseModel) else json.dumps(model, indent=2)
        atomic_write_text(path, text)
        self._written(path)
        return path

    def read_json(self, relative: str) -> dict[str, object] | None:
        path = self.dir / relative
        if not path.exists():
            return None
        loaded: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
        return loaded

    def cells(self) -> Iterator[CellResult]:
        for path in sorted((self.dir / "cells").glob("*.json")):
            yield CellResult.model_validate_json(path.read_text(encoding="utf-8"))

    def complete_keys(self) -> set[str]:
        """Keys of cells that count as done: measured in full on a server that did not fail."""
        return {cell.key for cell in self.cells() if cell.status != "failed"}
