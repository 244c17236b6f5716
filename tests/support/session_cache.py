"""Values a test session builds once for all its pytest-xdist workers: a module or session
fixture is per worker, so two workers that run tests of one module would each build what the
module shares. Each value is pickled in a folder of the session's temporary directory that every
worker of the session sees, and lives no longer than the session's temporary directories do."""

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest

T = TypeVar("T")


def session_folder(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The folder every worker of this session shares (``worker_id`` is pytest-xdist's fixture:
    ``master`` without workers, whose own temporary directory is the session's)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base if worker_id == "master" else base.parent) / "session-cache"
    folder.mkdir(exist_ok=True)
    return folder


def built_once(folder: Path, name: str, build: Callable[[], T]) -> T:
    """``build()``'s value under ``name``: the first worker to ask builds it holding the name's lock,
    one that asks meanwhile waits for it and reads what the first wrote."""
    path = folder / f"{name}.pickle"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return cast(T, pickle.loads(path.read_bytes()))
        value = build()
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(pickle.dumps(value))
        partial.replace(path)
        return value
