"""One model configuration shared by every contract and result model."""

from pydantic import BaseModel, ConfigDict


class ContractModel(BaseModel):
    """Frozen, no unknown keys, strict types: a typo or a string where a number belongs fails."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class RecordModel(BaseModel):
    """Frozen result records. Lax typing so they round-trip through JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")
