"""A rich progress bar over a sweep's pending cells."""

import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tasks.store.results import ResultsStore


class CellProgress:
    """A rich progress bar over the sweep's pending cells, advanced as cell files land in the store."""

    def __init__(self, total: int) -> None:
        self.started = time.time()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("cells"), TimeElapsedColumn())
        self.task = self.bar.add_task("measuring", total=total)

    def __enter__(self) -> "CellProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def update(self, store: ResultsStore, keys: set[str], stage: str) -> None:
        done = sum(1 for key in keys if _written_since(store.cell_path(key), self.started))
        self.bar.update(self.task, completed=done, description=stage)


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False
