"""What the measurement sections show, from the stored cells and per-request records:
latency percentiles per arm and load, acceptance by draft position, KV capacity, energy,
and the contract block. Only usable (status ok) main-phase cells count."""

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from specfleet.contract import arm_plans
from specfleet.contract.matrix import load_label
from specfleet.measure.metrics import (
    chunks_read_together_fraction,
    itl_per_chunk_series_ms,
    itl_per_token_series_ms,
    summarize,
    ttft_series_ms,
)
from specfleet.results import CellResult, KVCacheInfo, RequestRecord
from specfleet_tasks.store.sweep import StoredSweep
from specfleet_tasks.tracking.names import contract_params

Series = Callable[[Iterable[RequestRecord]], list[float]]
PERCENTILES = ("p50", "p95", "p99")
READ_TOGETHER_NOTE_FRACTION = 0.5
"""Above this share of 0 ms chunk gaps the report says ITL per chunk reads low."""


def main_cells(sweep: StoredSweep) -> list[CellResult]:
    return [c for c in sweep.cells if c.usable and c.identity.phase == "main"]


def _load_keys(cells: Sequence[CellResult]) -> list[tuple[str, float]]:
    return sorted({(c.identity.load_mode, c.identity.load_value) for c in cells})


@dataclass(frozen=True)
class LatencyCurve:
    """p50/p95/p99 of one series per load, pooled over prompt classes, sampling and repeats."""

    arm: str
    series: str
    slo_ms: float
    loads: list[str]
    values_ms: dict[str, list[float | None]]


def _curve(arm: str, name: str, target_ms: float, series: Series,
           by_load: dict[tuple[str, float], list[RequestRecord]], keys: Sequence[tuple[str, float]]) -> LatencyCurve:
    summaries = [summarize(series(by_load.get(key, []))) for key in keys]
    values = {p: [e.value if (e := getattr(s, p)) is not None else None for s in summaries] for p in PERCENTILES}
    return LatencyCurve(arm, name, target_ms, [load_label(*key) for key in keys], values)


def _records_by_load(sweep: StoredSweep, arm: str) -> dict[tuple[str, float], list[RequestRecord]]:
    by_load: dict[tuple[str, float], list[RequestRecord]] = defaultdict(list)
    for c in main_cells(sweep):
        if c.identity.arm == arm:
            by_load[(c.identity.load_mode, c.identity.load_value)] += sweep.records.get(c.key, [])
    return by_load


def latency_curves(sweep: StoredSweep) -> list[tuple[LatencyCurve, LatencyCurve]]:
    """(TTFT, ITL) per arm; the ITL series is the one the SLO binds."""
    slo = sweep.config.slo
    itl: Series = itl_per_chunk_series_ms if slo.itl_statistic == "per_chunk" else itl_per_token_series_ms
    keys = _load_keys(main_cells(sweep))
    out = []
    for plan in arm_plans(sweep.config):
        by_load = _records_by_load(sweep, plan.arm)
        out.append((_curve(plan.arm, "TTFT", slo.ttft_ms, ttft_series_ms, by_load, keys),
                    _curve(plan.arm, f"ITL ({slo.itl_statistic.replace('_', ' ')})", slo.itl_ms, itl, by_load, keys)))
    return out


def read_together_notes(sweep: StoredSweep) -> list[str]:
    """Arm and load where most chunk gaps were 0 ms: the client got those chunks in one read,
    so ITL per chunk reads low there (``metrics.chunks_read_together_fraction``)."""
    notes = []
    for plan in arm_plans(sweep.config):
        for (mode, value), records in sorted(_records_by_load(sweep, plan.arm).items()):
            share = chunks_read_together_fraction(records)
            if share is not None and share > READ_TOGETHER_NOTE_FRACTION:
                notes.append(f"{plan.arm} at {load_label(mode, value)}: {share:.0%} of chunk gaps were 0 ms "
                             "(chunks read together), so its ITL per chunk reads low")
    return notes


def acceptance_by_position(sweep: StoredSweep) -> tuple[dict[str, dict[str, list[float]]], dict[str, str]]:
    """Per prompt class and arm: accepted-prefix reach / drafts at each position, pooled over
    loads; and, per arm without telemetry, why (the cells' recorded reason)."""
    accepted: dict[tuple[str, str], list[int]] = defaultdict(list)
    drafts: dict[tuple[str, str], int] = defaultdict(int)
    missing: dict[str, str] = {}
    for c in main_cells(sweep):
        if c.identity.k is None:
            continue
        key = (c.identity.prompt_class, c.identity.arm)
        if c.spec_decode is None:
            missing.setdefault(c.identity.arm, c.spec_decode_unavailable or "no spec-decode counters recorded")
            continue
        sums = accepted[key]
        sums.extend([0] * (len(c.spec_decode.accepted_per_position) - len(sums)))
        for i, n in enumerate(c.spec_decode.accepted_per_position):
            sums[i] += n
        drafts[key] += c.spec_decode.num_drafts
    rates: dict[str, dict[str, list[float]]] = {}
    for pc in sweep.config.prompt_classes:
        for arm in (p.arm for p in arm_plans(sweep.config)):
            if drafts.get((pc.name, arm)):
                rates.setdefault(pc.name, {})[arm] = [n / drafts[(pc.name, arm)] for n in accepted[(pc.name, arm)]]
    measured = {arm for per in rates.values() for arm in per}
    return rates, {arm: why for arm, why in missing.items() if arm not in measured}


@dataclass(frozen=True)
class KVRow:
    arm: str
    tokens: int | None
    max_concurrency: float | None
    memory_gib: float | None
    draft_cost: float | None
    note: str


def kv_rows(sweep: StoredSweep) -> list[KVRow]:
    """KV pool per arm (a server property, from vllm:cache_config_info) and the share of the
    baseline's pool the speculative arm gives up."""
    info: dict[str, KVCacheInfo] = {}
    for c in sweep.cells:
        if c.kv_cache is not None:
            info.setdefault(c.identity.arm, c.kv_cache)
    plans = arm_plans(sweep.config)
    base = info.get(plans[0].arm)
    base_tokens = base.kv_cache_size_tokens if base else None
    rows = []
    for plan in plans:
        kv = info.get(plan.arm)
        tokens = kv.kv_cache_size_tokens if kv else None
        cost = None if plan.is_baseline or tokens is None or not base_tokens else 1.0 - tokens / base_tokens
        note = ("the engine exposed no vllm:cache_config_info" if kv is None else
                "no kv_cache_size_tokens label" if tokens is None else
                "no baseline KV figure to compare" if not plan.is_baseline and not base_tokens else "")
        memory = kv.kv_cache_memory_bytes if kv else None
        rows.append(KVRow(plan.arm, tokens, kv.kv_cache_max_concurrency if kv else None,
                          memory / 2**30 if memory is not None else None, cost, note))
    return rows


@dataclass(frozen=True)
class EnergyRow:
    arm: str
    load: str
    j_per_qualified_token: float | None
    cells_measured: int
    cells: int
    note: str


def energy_rows(sweep: StoredSweep) -> list[EnergyRow]:
    """Joules over SLO-qualified accepted tokens per arm and load, pooled over prompt classes."""
    groups: dict[tuple[str, tuple[str, float]], list[CellResult]] = defaultdict(list)
    for c in main_cells(sweep):
        groups[(c.identity.arm, (c.identity.load_mode, c.identity.load_value))].append(c)
    order = {p.arm: i for i, p in enumerate(arm_plans(sweep.config))}
    rows = []
    for (arm, load), cells in sorted(groups.items(), key=lambda item: (order[item[0][0]], item[0][1])):
        measured = [c for c in cells if c.energy.joules is not None]
        tokens = sum(c.throughput.qualified_output_tokens for c in measured)
        joules = sum(c.energy.joules or 0.0 for c in measured)
        reasons = sorted({c.energy.reason or c.energy.source for c in cells if c.energy.joules is None})
        note = ("" if not reasons else ("unavailable: " if not measured else "partly unavailable: ")
                + "; ".join(reasons))
        if measured and not tokens:
            note = "no SLO-qualified tokens to divide by" + (f"; {note}" if note else "")
        rows.append(EnergyRow(arm, load_label(*load), joules / tokens if measured and tokens else None,
                              len(measured), len(cells), note))
    return rows


def contract_sections(sweep: StoredSweep) -> list[tuple[str, list[tuple[str, str]]]]:
    """The contract as it was measured: config sections (secrets redacted), the fingerprint
    (checkpoint and tokenizer hashes, engine and version) and each arm's speculative_config."""
    fp = sweep.record.fingerprint
    versions = sorted({c.engine_version for c in sweep.cells if c.engine_version})
    sections: list[tuple[str, list[tuple[str, str]]]] = [("sweep", [
        ("sweep id", sweep.id), ("fingerprint", fp.digest), ("config file", sweep.record.config_source),
        ("decisions", sweep.report.decided_by)])]
    sections.append(("fingerprint", [
        ("target sha256", fp.target or "n/a (checkpoint not readable when fingerprinted)"),
        ("tokenizer sha256", fp.tokenizer or "n/a (tokenizer not readable when fingerprinted)"),
        *((f"draft {path} sha256", digest or "n/a (not readable)") for path, digest in sorted(fp.drafts.items())),
        ("engine", fp.engine), ("engine version", fp.engine_version or "n/a (not detected)"),
        ("engine version in cells", ", ".join(versions) or "n/a (not recorded)"),
        ("hardware", json.dumps(fp.hardware, sort_keys=True))]))
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for key, value in contract_params(sweep.config).items():
        section, _, rest = key.partition(".")
        (grouped[section] if rest else sections[0][1]).append((rest or section, value))
    sections += list(grouped.items())
    sections.append(("arms (vLLM speculative_config)", [
        (p.arm, json.dumps(p.speculative_config, sort_keys=True) if p.speculative_config else "none (baseline)")
        for p in arm_plans(sweep.config)]))
    return sections
