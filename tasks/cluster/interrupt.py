"""Ctrl-C during a sweep: a flag the stage loop checks, since a library can swallow the
KeyboardInterrupt (one raised inside ``ray.wait`` can be)."""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_INTERRUPTED = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


@contextmanager
def ctrl_c_stops_the_sweep() -> Iterator[None]:
    """Ctrl-C ends the sweep even where a library swallows the KeyboardInterrupt (one raised
    inside ``ray.wait`` can be): the flag it sets is checked every poll and between stages."""
    _INTERRUPTED.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def raise_if_interrupted() -> None:
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt
