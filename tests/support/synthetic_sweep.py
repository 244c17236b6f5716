"""Synthetic sweeps for the decision tests: cells assembled by the real metrics code from request
records whose rates, request-level spread and server lives are chosen by hand, analysed by
``specfleet.verdicts.analysis.analyse_sweep`` with passing equivalence and quality probes."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specfleet.contract import CellIdentity, SweepConfig, arm_plans, parse_sweep_config
from specfleet.contract.matrix import cell_identities
from specfleet.gates.equivalence import EquivalenceProbe
from specfleet.gates.quality import ClassAnswers, ItemAnswer, QualityProbe
from specfleet.measure.metrics import assemble_cell, meets_slo
from specfleet.results import CellResult, EnergyReading, RequestRecord
from specfleet.stats.runs import RunValue
from specfleet.stats.samples import CellSample
from specfleet.verdicts.analysis import SweepAnalysis, analyse_sweep
from specfleet.verdicts.evidence import earlier_runs, sequence_runs
from specfleet.verdicts.nights import Nights
from tests.support.records import MS, request_record

TOKENS = 48
BASE = """
name: synthetic
models: {target: {path: fixture:target}, draft: {path: fixture:draft}}
arms:
ARMS
load: {concurrency: LOADS, requests_per_cell: 24}
prompt_classes:
CLASSES
sampling: SAMPLING
slo: {ttft_ms: 2000, itl_ms: 200}
hardware: {accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 1000000000}
equivalence: {prompts: 2, quality_tolerance: 0.1}
analysis: {bootstrap_resamples: 200}
"""


DRAFT = "{name: draft, method: draft_model, k: [2, 4]}"
NGRAM = "{name: ngram, method: ngram, k: [3], prompt_lookup_min: 2, prompt_lookup_max: 5}"


GREEDY_ONLY = "[{name: greedy, temperature: 0.0}]"


def config(classes: tuple[str, ...] = ("code", "extraction", "chat"), loads: tuple[int, ...] = (1, 4),
           extra: str = "", arms: tuple[str, ...] = (DRAFT,), sampling: str = GREEDY_ONLY) -> SweepConfig:
    lines = "\n".join(f"  - {{name: {c}, max_output_tokens: {TOKENS}}}" for c in classes)
    arm_lines = "\n".join(f"  - {a}" for a in ("{name: baseline, method: baseline}", *arms))
    text = (BASE.replace("LOADS", str(list(loads))).replace("CLASSES", lines).replace("ARMS", arm_lines)
            .replace("SAMPLING", sampling) + extra)
    return parse_sweep_config(text, "synthetic.yaml")


def records(rate_per_request: float, n: int, spread: float, rng: np.random.Generator,
            ttft_ms: float = 10.0, slow: int = 0, failed: int = 0, long_gaps: int = 0) -> list[RequestRecord]:
    """``n`` requests of ``TOKENS`` one-token chunks, each streaming at about ``rate_per_request``
    tokens/s with a relative request-to-request ``spread``; the first ``slow`` of them wait ten
    times ``ttft_ms`` for their first token, the last ``failed`` time out, and every one has
    ``long_gaps`` gaps 25 times as long (each request meets an ITL SLO at p95 that the cell's
    pooled gaps miss)."""
    out = []
    for i in range(n):
        gap_ns = int(1e9 / rate_per_request * max(0.2, 1.0 + spread * rng.standard_normal()))
        send = i * 10_000 * MS
        first = ttft_ms * (10 if i < slow else 1)
        gaps = [gap_ns * (25 if j < long_gaps else 1) for j in range(TOKENS - 1)]
        times = tuple(send + int(first * MS) + int(sum(gaps[:j])) for j in range(TOKENS))
        if i >= n - failed:
            out.append(request_record(i, send_ns=send, end_ns=times[-1], error="timeout", max_tokens=TOKENS))
            continue
        out.append(request_record(i, times, send_ns=send, finish_reason="length", max_tokens=TOKENS))
    return out


@dataclass
class Sweep:
    """Cells and records made by hand, and how to analyse them."""

    config: SweepConfig
    seed: int = 0
    cells: list[CellResult] = field(default_factory=list)
    records: dict[str, list[RequestRecord]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def add(self, ident: CellIdentity, rate: float, server: str, spread: float = 0.01, status: str = "ok",
            n: int = 24, ttft_ms: float = 10.0, slow: int = 0, failed: int = 0,
            per_request_tokens_per_s: float = 100.0, long_gaps: int = 0) -> CellResult:
        """One cell measured at SLO-qualified ``rate`` tokens/s on ``server`` (its window set so; 0 when
        no request meets the SLO); its requests stream at ``per_request_tokens_per_s``."""
        reqs = records(per_request_tokens_per_s, n, spread, self.rng, ttft_ms, slow, failed, long_gaps)
        key = ident.key("synthetic")
        qualified = sum(TOKENS for r in reqs if r.ok and meets_slo(r, self.config.slo))
        cell = assemble_cell(ident, key, reqs, slo=self.config.slo, duration_s=(qualified or n * TOKENS) / rate,
                             requests_planned=n, ignore_eos=True, max_error_fraction=0.05,
                             energy=EnergyReading(source="none", joules=None, reason="synthetic"),
                             runner_reasons=[] if status == "ok" else ["client saturated: synthetic"])
        cell = cell.model_copy(update={"server": server})
        self.cells.append(cell)
        self.records[key] = reqs
        return cell

    def arm(self, arm: str, rate: Callable[[CellIdentity], float], phase: str = "main", server: str | None = None,
            spread: float = 0.01, status: Callable[[CellIdentity], str] = lambda ident: "ok",
            ttft_ms: float = 10.0, slow: int = 0) -> None:
        """Every cell of ``arm`` in one server life, its rate per cell from ``rate``."""
        plan = next(p for p in arm_plans(self.config) if p.arm == arm)
        for ident in cell_identities(self.config, plan, phase):  # type: ignore[arg-type]
            self.add(ident, rate(ident), server or f"{arm}/{phase}", spread, status(ident), ttft_ms=ttft_ms,
                     slow=slow)

    def analyse(self, probes: Mapping[str, EquivalenceProbe] | None = None,
                history: Sequence[RunValue] = (), nights: Nights | None = None) -> SweepAnalysis:
        arms = [p.arm for p in arm_plans(self.config)]
        greedy = {"p0": [1, 2, 3], "p1": [4, 5, 6]}
        probes = probes if probes is not None else {
            arm: EquivalenceProbe(arm=arm, greedy=greedy, greedy_repeat=greedy if arm == "baseline" else None)
            for arm in arms}
        scores = {f"q{i}": ItemAnswer(answer="ok", score=1.0) for i in range(20)}
        answers = {s.name: scores for s in self.config.sampling}
        quality = {arm: QualityProbe(arm=arm, classes={pc.name: ClassAnswers(source="synthetic", sha256="0" * 64,
                                                                             answers=answers)
                                                       for pc in self.config.prompt_classes}) for arm in arms}
        return analyse_sweep(self.config, self.cells, self.records, probes, quality, history=history, nights=nights)

    def repeated_runs(self, sweep_id: str) -> list[RunValue]:
        """This sweep's repeated runs as an earlier sweep's noise history (``analysis.noise_history``)."""
        samples = {c.key: CellSample.from_records(c, self.records[c.key], self.config.slo) for c in self.cells}
        return earlier_runs(sweep_id, self.cells, samples, self.config.slo, self.config.analysis)

    def look_runs(self, sweep_id: str) -> list[RunValue]:
        """This sweep's runs as an earlier look of a sequence (``analysis.nights``)."""
        samples = {c.key: CellSample.from_records(c, self.records[c.key], self.config.slo) for c in self.cells}
        return sequence_runs(sweep_id, self.cells, samples, self.config.slo, self.config.analysis,
                             {p.arm for p in arm_plans(self.config)})


def history(cfg: SweepConfig, base: Callable[[CellIdentity], float], end: Callable[[CellIdentity], float],
            sweeps: int = 4, seed: int = 100) -> list[RunValue]:
    """``sweeps`` earlier sweeps' baselines (opening at ``base``, closing at ``end``): noise history."""
    out: list[RunValue] = []
    for n in range(sweeps):
        earlier = Sweep(cfg, seed + n)
        earlier.arm("baseline", base)
        earlier.arm("baseline", end, phase="baseline_end")
        out += earlier.repeated_runs(f"earlier-{n}")
    return out


def bracketed(cfg: SweepConfig, base: Callable[[CellIdentity], float], end: Callable[[CellIdentity], float],
              speculative: Mapping[str, Callable[[CellIdentity], float]], seed: int = 0, spread: float = 0.01,
              status: Mapping[str, Callable[[CellIdentity], str]] | None = None) -> Sweep:
    """The baseline opening (``base``) and closing (``end``) servers, and each speculative arm's."""
    sweep = Sweep(cfg, seed)
    sweep.arm("baseline", base, spread=spread)
    for arm, rate in speculative.items():
        sweep.arm(arm, rate, spread=spread, status=(status or {}).get(arm, lambda ident: "ok"))
    sweep.arm("baseline", end, phase="baseline_end", spread=spread)
    return sweep
