"""One model configuration shared by every contract and result model."""

from pydantic import BaseModel, ConfigDict


class ContractModel(BaseModel):
    """Frozen, no unknown keys, strict types: a typo or a string where a number belongs fails."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class RecordModel(BaseModel):
    """Frozen result records. Lax typing so they round-trip through JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def known_format(value: int, newest: int) -> int:
    """A stored file's ``format``, refused when a newer specfleet wrote it (a validator's check)."""
    if value > newest:
        raise ValueError(f"{value} was written by a newer specfleet; this one reads formats 1 to {newest} "
                         "(upgrade specfleet)")
    return value
