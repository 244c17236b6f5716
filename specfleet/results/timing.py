"""Where an arm's wall time went: the sweep-overhead account of one server life (or lives)."""

from pydantic import Field

from specfleet.contract.base import RecordModel


class ArmTiming(RecordModel):
    """Seconds per phase of one arm's Ray task. ``warmup_s`` is cell time outside the measured
    windows (warm-up requests, telemetry scrapes, prefix-cache resets); ``idle_s`` is the rest
    (stopping servers, waiting between cells)."""

    startup_s: float = 0.0
    probe_s: float = 0.0
    warmup_s: float = 0.0
    measured_s: float = 0.0
    wall_s: float = 0.0
    server_starts: int = 0
    restarts: int = Field(0, description="Server restarts after it died mid-arm.")

    @property
    def idle_s(self) -> float:
        return max(0.0, self.wall_s - self.startup_s - self.probe_s - self.warmup_s - self.measured_s)

    @property
    def measured_fraction(self) -> float | None:
        """Measured windows over wall time; null when the arm had no wall time (nothing to do)."""
        return self.measured_s / self.wall_s if self.wall_s > 0 else None
