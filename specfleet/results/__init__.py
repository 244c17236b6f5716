"""Measured results: per-request records and per-cell summaries."""

from specfleet.results.cell import (
    SERVER_DIED,
    AcceptanceDistribution,
    CellResult,
    DistributionSummary,
    EnergyReading,
    KVCacheInfo,
    PercentileEstimate,
    RequestAcceptance,
    SpecDecodeStats,
    Throughput,
    judge_cell,
)
from specfleet.results.records import RequestRecord
from specfleet.results.timing import ArmTiming

__all__ = [
    "SERVER_DIED", "AcceptanceDistribution", "ArmTiming", "CellResult", "DistributionSummary", "EnergyReading",
    "KVCacheInfo", "PercentileEstimate", "RequestAcceptance", "RequestRecord", "SpecDecodeStats", "Throughput",
    "judge_cell",
]
