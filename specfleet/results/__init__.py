"""Measured results: per-request records and per-cell summaries."""

from specfleet.results.cell import (
    CellResult,
    DistributionSummary,
    EnergyReading,
    KVCacheInfo,
    PercentileEstimate,
    SpecDecodeStats,
    Throughput,
)
from specfleet.results.records import RequestRecord
from specfleet.results.timing import ArmTiming

__all__ = [
    "ArmTiming", "CellResult", "DistributionSummary", "EnergyReading", "KVCacheInfo", "PercentileEstimate",
    "RequestRecord", "SpecDecodeStats", "Throughput",
]
