"""Durations as people write them on the command line and in configs: ``30s``, ``90m``, ``7h``,
``1d``, ``2w`` (``--since``, ``--budget``, the ``budget`` block)."""

import re

from specfleet.errors import InputError

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration_s(text: str) -> int:
    """``30s``, ``90m``, ``7h``, ``1d`` or ``2w`` in seconds; ``ValueError`` for anything else."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration like 30s, 90m, 7h or 1d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def duration_flag(flag: str, text: str) -> int:
    """A duration flag (``--budget``, ``--since``, ``--window``) in seconds; a bad one is one
    ``InputError`` naming the flag: ``--budget: '7x' is not a duration like 30s, 90m, 7h or 1d``."""
    try:
        return parse_duration_s(text)
    except ValueError as err:
        raise InputError(f"{flag}: {err}") from None


def format_duration(seconds: int) -> str:
    """The largest unit that divides ``seconds``: 300 -> ``5m``, 604800 -> ``1w``."""
    for unit, size in sorted(_UNIT_S.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
