"""Best-effort MLflow logging for a running sweep: the results store is the record, MLflow a copy."""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from specfleet.contract import SweepConfig
from specfleet.contract.fingerprint import Fingerprint
from specfleet.report.sweep_report import SweepReport
from specfleet.results import CellResult
from specfleet_flows.steps import log_cell_runs, log_sweep_summary, open_sweep_run
from specfleet_tasks.store.results import ResultsStore
from specfleet_tasks.tracking.runs import close_sweep_run, unreachable, use_short_http_retries

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class SweepTracker:
    """Best-effort MLflow logging for one sweep run. The results store is the record: the
    first failure to reach MLflow switches logging off for the rest of the run, measuring
    goes on, and ``specfleet sync SWEEP_ID`` logs everything later (idempotently)."""

    uri: str
    sweep_id: str
    parent_id: str | None = None
    offline: str | None = None

    def open(self, config: SweepConfig, fingerprint: Fingerprint) -> None:
        use_short_http_retries()
        self.parent_id = self._attempt("opening the sweep run",
                                       lambda: open_sweep_run(self.uri, config, self.sweep_id, fingerprint))

    def log_cells(self, cells: Sequence[CellResult], store: ResultsStore, fingerprint_digest: str) -> None:
        parent = self.parent_id
        if parent is not None:
            self._attempt("logging cell runs",
                          lambda: log_cell_runs(self.uri, parent, cells, store, fingerprint_digest))

    def log_summary(self, summary: SweepReport, markdown: str) -> None:
        parent = self.parent_id
        if parent is not None:
            self._attempt("logging the summary", lambda: log_sweep_summary(self.uri, parent, summary, markdown))

    def close(self, status: str) -> None:
        parent = self.parent_id
        if parent is not None:
            self._attempt("closing the sweep run", lambda: close_sweep_run(self.uri, parent, status))

    def _attempt(self, what: str, call: Callable[[], T]) -> T | None:
        if self.offline is not None:
            return None
        reason = unreachable(self.uri)
        if reason is None:
            try:
                return call()
            except Exception as err:  # any tracking failure: measuring must go on
                reason = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
        self.offline = (f"MLflow not reached while {what} ({reason}); the results dir holds everything: "
                        f"`specfleet sync {self.sweep_id}` logs it when MLflow is back")
        log.warning(self.offline)
        return None
