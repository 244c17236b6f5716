"""The results store under faults: a full disk (a real kernel write failure: the file-size
limit of a child process), atomic writes, and private permissions."""

import json
import stat
import subprocess
import sys
from pathlib import Path

from specfleet_tasks.store.results import ResultsStore

ROOT = Path(__file__).resolve().parents[4]

FILL_DISK = """
import os, resource, signal, sys
from specfleet.errors import StorageFull
from specfleet.results import RequestRecord
from pathlib import Path
from specfleet_tasks.store.results import ResultsStore

store = ResultsStore(Path(sys.argv[1]), "full-disk")
store.write_json("cells/first.json", {"key": "first"})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
try:
    store.write_records("second", [RequestRecord(index=0, prompt_id="p", send_ns=0, text=os.urandom(2**19).hex())])
except StorageFull as err:
    print(err.strerror)
    sys.exit(7)
"""


def test_a_full_disk_is_one_clear_error_and_earlier_results_stay(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", FILL_DISK, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 7, done.stderr[-2000:]
    message = done.stdout.strip()
    assert len(message.splitlines()) == 1
    assert "second.parquet" in message and "file too large" in message and "--resume" in message
    sweep = tmp_path / "full-disk"
    assert json.loads((sweep / "cells" / "first.json").read_text())["key"] == "first"
    assert not (sweep / "records" / "second.parquet").exists()
    assert not [p for p in sweep.rglob("*") if p.name.endswith(".tmp")]


def test_results_dirs_are_private(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results", "private")
    path = store.write_json("cells/k.json", {"key": "k"})
    for directory in (store.dir, path.parent):
        assert stat.S_IMODE(directory.stat().st_mode) & 0o077 == 0, oct(directory.stat().st_mode)
