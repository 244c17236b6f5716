"""Measured results: per-request records and per-cell summaries."""

from specfleet.results.cell import (
    SERVER_DIED,
    CellResult,
    DistributionSummary,
    EnergyReading,
    KVCacheInfo,
    PercentileEstimate,
    SpecDecodeStats,
    Throughput,
    judge_cell,
)
from specfleet.results.records import RequestRecord
from specfleet.results.timing import ArmTiming

__all__ = [
    "SERVER_DIED", "ArmTiming", "CellResult", "DistributionSummary", "EnergyReading", "KVCacheInfo",
    "PercentileEstimate", "RequestRecord", "SpecDecodeStats", "Throughput", "judge_cell",
]
