"""``--json``: one JSON object on stdout. Everything else a command or its flow prints (progress,
``sweep id: ...``, notes) goes to stderr meanwhile, so stdout stays parseable."""

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any


@contextmanager
def stdout_to_stderr(as_json: bool) -> Iterator[None]:
    """With ``as_json``, what is printed to stdout inside goes to stderr (rich consoles made
    without a file read ``sys.stdout`` when they print, so theirs too)."""
    if not as_json:
        yield
        return
    with redirect_stdout(sys.stderr):
        yield


def print_json(payload: dict[str, Any]) -> None:
    print(json.dumps(payload))
