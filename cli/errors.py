"""Exit codes and the one-line error contract shared by every command."""

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

import typer
from pydantic import ValidationError

from specfleet.errors import InputError, StorageFull


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    BAD_INPUT = 2
    FAILED_CELLS = 3
    ROLLBACK = 4
    """``specfleet canary``'s ``rollback`` verdict, so a rollout step can gate on it."""
    INTERRUPTED = 130


def debug_enabled() -> bool:
    return os.environ.get("SPECFLEET_DEBUG", "") not in ("", "0")


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Bad input -> one line on stderr, exit 2; anything else -> exit 1.

    The traceback is shown only with ``--debug`` (``SPECFLEET_DEBUG=1``).
    """
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except (InputError, ValidationError) as err:
        if debug_enabled():
            raise
        message = str(err).splitlines()[0] if isinstance(err, InputError) else _pydantic_line(err)
        print(f"error: {message}", file=sys.stderr)
        raise typer.Exit(ExitCode.BAD_INPUT) from None
    except StorageFull as err:
        if debug_enabled():
            raise
        print(f"error: {err.strerror}", file=sys.stderr)
        raise typer.Exit(ExitCode.INTERNAL) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except Exception as err:
        if debug_enabled():
            raise
        print(f"internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback)",
              file=sys.stderr)
        raise typer.Exit(ExitCode.INTERNAL) from None


def _pydantic_line(err: ValidationError) -> str:
    from specfleet.contract.loading import format_validation_error

    return format_validation_error(err, err.title)


def check_load_flags(concurrency: int | None, rate: float | None) -> None:
    """Exactly one of ``--concurrency`` or a positive ``--rate`` (``specfleet measure``, ``canary``,
    ``predict``; NaN is not positive)."""
    if (concurrency is None) == (rate is None):
        raise InputError("give exactly one of --concurrency or --rate")
    if rate is not None and not rate > 0:
        raise InputError(f"--rate must be positive (got {rate})")
