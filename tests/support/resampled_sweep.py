"""SYNTHETIC sweeps built from a real stored sweep's own requests at a known true speed ratio: the
decision rule's error rates on data it did not model (issue 49's "sweeps built from a real stored
demo sweep"). They exist in a test's memory or temporary folder only, and every id, config name
and description they carry says "synthetic".

Each synthetic sweep has the stored sweep's classes, loads, arms and traffic, and the design (requests
per cell, repeats, server lives, analysis) of its own config or of the one given: its cells and server
lives as ``planned_cells`` starts them (the opening baseline, every speculative arm, the closing
baseline). Every cell's requests are drawn with replacement from the stored baseline's requests
of the same configuration (its opening and closing cells pooled). Each server life gets its own
run-speed factor, lognormal with the server-to-server variance the stored sweep measured; a
request's times after its send are divided by that factor and, on a speculative arm, by the true
speed ratio. A cell's window is its requests' busy seconds times the stored baseline's window per
busy second at that configuration, so its SLO-qualified tokens per second move by exactly that
speed (the SLO itself applied to the rescaled times). Run-to-run noise is the requests' own: the
draw of the requests and their timing.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specfleet.contract import CellIdentity, SweepConfig, arm_plans
from specfleet.contract.fingerprint import Fingerprint
from specfleet.economics.cost import break_even_speedup
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import QualityProbe
from specfleet.measure.metrics import assemble_cell
from specfleet.results import CellResult, EnergyReading, RequestRecord
from specfleet.stats.runs import ConfigKey, RunValue, config_key
from specfleet.stats.samples import CellSample, busy_s, qualified_tokens
from specfleet.verdicts.analysis import SweepAnalysis, analyse_sweep
from specfleet.verdicts.evidence import earlier_runs
from specfleet.verdicts.traffic_mix import cell_token_shares, effective_mix
from specfleet_tasks.plan.sweep_plan import planned_cells
from specfleet_tasks.store.results import ResultsStore, probe_file
from specfleet_tasks.store.sweep import SWEEP_FILE, StoredSweep, SweepRecord

SYNTHETIC = "synthetic"
NO_ENERGY = EnergyReading(source="none", joules=None, reason="synthetic sweep: resampled requests, no energy counter")


@dataclass(frozen=True)
class RequestPool:
    """The stored baseline's requests of one configuration and its window per busy second."""

    records: tuple[RequestRecord, ...]
    window_per_busy_s: float

    def rate(self, slo_config: SweepConfig) -> float:
        """SLO-qualified tokens per second of the whole pool at run speed 1: the configuration's true
        baseline figure in every synthetic sweep built from it."""
        tokens = sum(qualified_tokens(r, slo_config.slo) for r in self.records)
        return tokens / (self.window_per_busy_s * sum(busy_s(r) for r in self.records))


@dataclass(frozen=True)
class ResampleSource:
    """What synthetic sweeps are drawn from: a stored sweep's config, its baseline's requests per
    configuration, its baseline's probes and the server-to-server variance it measured."""

    stored_id: str
    config: SweepConfig
    fingerprint: Fingerprint
    pools: dict[ConfigKey, RequestPool]
    server_var: float
    """Variance of the log run speed of a server life (the stored sweep's estimate, tokens/s)."""
    probe: EquivalenceProbe
    quality: QualityProbe

    @classmethod
    def of(cls, stored: StoredSweep, design: SweepConfig | None = None) -> "ResampleSource":
        """``design``: a config whose requests per cell, repeats and analysis (confidence, server
        lives, error control) the synthetic sweeps take instead of the stored sweep's own, over the
        stored sweep's classes, loads and traffic (the configurations it has requests for)."""
        baseline, stored_config = stored.baseline_arm, stored.config
        cells: dict[ConfigKey, list[CellResult]] = {}
        for cell in stored.cells:
            if cell.identity.arm == baseline and cell.key in stored.records:
                cells.setdefault(config_key(cell.identity), []).append(cell)
        pools = {key: _pool(group, stored.records) for key, group in cells.items()}
        noise = next(n for n in stored.report.noise if n.metric == "qualified_tokens_per_s")
        if noise.server_var is None or noise.server_var <= 0:
            raise ValueError(f"{stored.id}: no positive server-to-server variance to give server lives "
                             f"({noise.server_var})")
        config = stored_config if design is None else stored_config.model_copy(update={
            "analysis": design.analysis, "load": design.load.model_copy(update={
                "concurrency": stored_config.load.concurrency, "rates_per_s": stored_config.load.rates_per_s})})
        config = config.model_copy(update={
            "name": f"{SYNTHETIC}-{stored_config.name}",
            "description": f"SYNTHETIC: resampled from the baseline requests of stored sweep {stored.id}"})
        return cls(stored.id, config, stored.record.fingerprint, pools, noise.server_var, stored.probes()[baseline],
                   stored.quality_answers()[baseline])

    def true_break_evens(self) -> list[float]:
        """The break-even speedup of every claim a synthetic sweep makes (each cell, each class and
        the arm at the traffic mix), at the pools' true baseline figures: finite ones only."""
        rates = {(key[0], key[2]): pool.rate(self.config) for key, pool in self.pools.items()}
        shares = {cell: s for cell, s in cell_token_shares(effective_mix(self.config)).items() if s > 0}
        groups = [[cell] for cell in rates] + [[c for c in shares if c[0] == pc] for pc in {c[0] for c in shares}]
        groups.append(list(shares))
        demand = self.config.hardware.peak_demand_tokens_per_s
        out = []
        for group in groups:
            weights = np.array([shares.get(c, 1.0) for c in group])
            base = weights.sum() / sum(w / rates[c] for w, c in zip(weights, group, strict=True))
            out.append(break_even_speedup(demand, float(base)))
        return [be for be in out if np.isfinite(be)]


def _pool(cells: Sequence[CellResult], records: Mapping[str, Sequence[RequestRecord]]) -> RequestPool:
    pooled = tuple(r for c in cells for r in records[c.key])
    busy = sum(busy_s(r) for r in pooled)
    return RequestPool(pooled, sum(c.throughput.duration_s for c in cells) / busy)


@dataclass(frozen=True)
class SyntheticSweep:
    """One SYNTHETIC sweep: cells and records in memory, decided as ``specfleet report`` decides a
    stored sweep without a summary (``StoredSweep.analyse``: ``analyse_sweep``)."""

    sweep_id: str
    source: ResampleSource
    cells: list[CellResult]
    records: dict[str, list[RequestRecord]]

    def analyse(self, history: Sequence[RunValue] = ()) -> SweepAnalysis:
        """What ``StoredSweep.analyse`` runs on this sweep stored, with ``history`` as the earlier
        nights' repeated runs (none: a first night). The candidates are the baseline rescaled, so no
        engine finding applies to them."""
        probes, quality = self._probes()
        cells = sorted(self.cells, key=lambda c: c.key)  # as a stored sweep's are read: the max-T draws follow them
        usable = {c.key: self.records[c.key] for c in cells if c.usable}
        return analyse_sweep(self.source.config, cells, usable, probes, quality, history=history)

    def repeated_runs(self) -> list[RunValue]:
        """This sweep's repeated runs as a later night's noise history (``StoredSweep.noise_history``)."""
        config = self.source.config
        samples = {c.key: CellSample.from_records(c, self.records[c.key], config.slo) for c in self.cells if c.usable}
        return earlier_runs(self.sweep_id, self.cells, samples, config.slo, config.analysis)

    def _probes(self) -> tuple[dict[str, EquivalenceProbe], dict[str, QualityProbe]]:
        """Every arm answers the probes as the stored baseline did: no gate tells them apart."""
        arms = [p.arm for p in arm_plans(self.source.config)]
        return ({a: self.source.probe.model_copy(update={"arm": a}) for a in arms},
                {a: self.source.quality.model_copy(update={"arm": a}) for a in arms})

    def store(self, results_dir: Path) -> Path:
        """The sweep as a results folder (format 2, no summary), for ``specfleet report`` itself."""
        store = ResultsStore(results_dir, self.sweep_id)
        record = SweepRecord(name=self.source.config.name, config_source=f"{SYNTHETIC}.yaml",
                             config=self.source.config, fingerprint=self.source.fingerprint)
        store.write_json(SWEEP_FILE, record)
        for cell in self.cells:
            store.write_cell(cell.model_copy(update={"records_file": store.write_records(cell.key,
                                                                                         self.records[cell.key])}))
        probes, quality = self._probes()
        for arm in probes:
            store.write_json(probe_file("equivalence", arm), probes[arm])
            store.write_json(probe_file("quality", arm), quality[arm])
        return store.dir


def earlier_nights(source: ResampleSource, rng: np.random.Generator, nights: int) -> list[RunValue]:
    """The noise history of ``nights`` earlier SYNTHETIC sweeps of the same deployment: their
    baselines' repeated runs (the speculative arms add none)."""
    return [run for night in range(nights)
            for run in synthetic_sweep(source, 1.0, rng, 9000 + night, baseline_only=True).repeated_runs()]


def synthetic_sweep(source: ResampleSource, true_ratio: float, rng: np.random.Generator,
                    index: int = 0, baseline_only: bool = False) -> SyntheticSweep:
    """Every speculative arm at ``true_ratio`` times the baseline's speed, each server life at its
    own lognormal run speed."""
    config = source.config
    cells: list[CellResult] = []
    records: dict[str, list[RequestRecord]] = {}
    sweep_id = f"{SYNTHETIC}-{config.name.removeprefix(SYNTHETIC + '-')}-{index:04d}"
    for arm, phase, replica, planned in planned_cells(config, f"{SYNTHETIC}{index}"):
        if baseline_only and not arm.is_baseline:
            continue
        server = f"{arm.arm}/{phase}/{replica}"
        speed = float(np.exp(rng.normal(0.0, np.sqrt(source.server_var)))) * (1.0 if arm.is_baseline else true_ratio)
        for ident, key in planned:
            pool = source.pools[config_key(ident)]
            drawn = rng.integers(len(pool.records), size=config.load.requests_per_cell)
            cell, records[key] = resampled_cell(config, pool, ident, key, [int(j) for j in drawn], speed, server)
            cells.append(cell)
    return SyntheticSweep(sweep_id, source, cells, records)


def resampled_cell(config: SweepConfig, pool: RequestPool, ident: CellIdentity, key: str, drawn: Sequence[int],
                   speed: float, server: str) -> tuple[CellResult, list[RequestRecord]]:
    """The cell of the pool's requests ``drawn``, served ``speed`` times as fast, by the metrics code."""
    reqs = [_rescaled(pool.records[j], i, speed) for i, j in enumerate(drawn)]
    window_s = pool.window_per_busy_s * sum(busy_s(r) for r in reqs)
    cell = assemble_cell(ident, key, reqs, slo=config.slo, duration_s=window_s, requests_planned=len(reqs),
                         ignore_eos=config.load.ignore_eos,
                         max_error_fraction=config.load.max_error_fraction, energy=NO_ENERGY, server=server)
    return cell, reqs


def _rescaled(record: RequestRecord, index: int, speed: float) -> RequestRecord:
    """The request as a server ``speed`` times as fast would have served it: every time after its
    send divided by ``speed``."""
    def at(t_ns: int) -> int:
        return record.send_ns + round((t_ns - record.send_ns) / speed)

    return replace(record, index=index, chunk_ns=tuple(at(t) for t in record.chunk_ns),
                   end_ns=None if record.end_ns is None else at(record.end_ns))
