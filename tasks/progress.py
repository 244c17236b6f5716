"""How a long job shows its progress: in a terminal, a rich bar with the time remaining; in a log
(stdout not a terminal: ``nohup``, CI, ``make demo > log``), a line per event the job marks and,
between them, one at least every ``HEARTBEAT_S``, each with the elapsed and remaining time.

The remaining time is the caller's: a sweep's comes from its plan's prediction, a training's from
the steps done so far. None means not known yet, shown as such.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

HEARTBEAT_S = 20.0


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``1h02m``."""
    whole = max(0, int(round(seconds)))
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def remaining_text(remaining_s: float | None, predicted: bool) -> str:
    if remaining_s is None:
        return "time left not known yet"
    if not predicted:
        return f"about {duration(remaining_s)} left"
    return f"predicted {duration(remaining_s)} left" if remaining_s > 0 else "overrunning its prediction"


class _RemainingColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(remaining_text(task.fields.get("remaining_s"), task.fields.get("predicted", False)),
                    style="progress.remaining")


class JobProgress:
    """One job's progress over ``total`` units (steps, cells), shown as the module says."""

    def __init__(self, title: str, total: int, unit: str, *, predicted: bool = False,
                 console: Console | None = None) -> None:
        self.title, self.unit, self.total, self.predicted = title, unit, total, predicted
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.started = time.monotonic()
        self.done, self.description, self.remaining_s = 0, title, None  # type: tuple[int, str, float | None]
        self._lock = threading.Lock()
        self._last_line = self.started
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self.bar: Progress | None = None
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                                TimeElapsedColumn(), _RemainingColumn(), console=self.console)
            self.task = self.bar.add_task(title, total=total, remaining_s=None, predicted=predicted)

    def __enter__(self) -> JobProgress:
        if self.bar is not None:
            self.bar.start()
        else:
            self._heartbeat = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._heartbeat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.stop()
        if self._heartbeat is not None:
            self._heartbeat.join()

    def update(self, done: int, description: str, remaining_s: float | None, *, line: str | None = None) -> None:
        """The job's state now; ``line`` (a finished cell, say) is logged at once in a log."""
        with self._lock:
            self.done, self.description, self.remaining_s = done, description, remaining_s
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=description, remaining_s=remaining_s)
            if line is not None:
                self.bar.console.print(line, markup=False)
        elif line is not None:
            self._print(line)

    def grow(self, total: int) -> None:
        """More units than planned at the start (a stage planned as the job runs)."""
        with self._lock:
            self.total = total
        if self.bar is not None:
            self.bar.update(self.task, total=total)

    def log_line(self, line: str) -> None:
        """A line with the job's elapsed and remaining time, in a terminal and in a log."""
        self._print(line)

    def status(self) -> str:
        with self._lock:
            done, description = self.done, self.description
        return f"{self.title}: {description}, {done}/{self.total} {self.unit} {self._times()}"

    def _times(self) -> str:
        with self._lock:
            remaining_s, finished = self.remaining_s, self.done >= self.total
        elapsed = duration(time.monotonic() - self.started)
        return f"({elapsed} elapsed, {'done' if finished else remaining_text(remaining_s, self.predicted)})"

    def _print(self, line: str) -> None:
        with self._lock:
            self._last_line = time.monotonic()
        self.console.print(f"{line} {self._times()}", markup=False)

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                quiet_s = time.monotonic() - self._last_line
            if quiet_s >= HEARTBEAT_S:
                with self._lock:
                    self._last_line = time.monotonic()
                self.console.print(self.status(), markup=False)
