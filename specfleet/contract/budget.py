"""A sweep's wall-clock budget (issue 18, "Run within a budget"): the ``budget`` block.
``specfleet sweep --budget`` overrides it; what a budget does to a sweep is ``specfleet.planning.budget``."""

from pydantic import Field, field_validator

from specfleet.contract.base import ContractModel
from specfleet.contract.durations import parse_duration_s


class BudgetSpec(ContractModel):
    """No cell starts once its predicted time plus the closing baseline's no longer fits."""

    duration: str = Field(description="Wall time from the sweep's start: 90m, 7h, 1d.")

    @field_validator("duration")
    @classmethod
    def _a_duration(cls, text: str) -> str:
        parse_duration_s(text)
        return text

    @property
    def duration_s(self) -> int:
        return parse_duration_s(self.duration)
