"""Read sweep configs from disk (the parsing and validation are in ``specfleet.contract``)."""

from pathlib import Path

from specfleet.contract import SweepConfig, parse_sweep_config
from specfleet.errors import InputError


def load_sweep_config(path: Path) -> SweepConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: config file not found") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as err:
        raise InputError(f"{path}: cannot read config ({type(err).__name__})") from None
    return parse_sweep_config(text, str(path))
