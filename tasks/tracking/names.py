"""What goes into MLflow, by name: flat contract params, fingerprint tags, per-cell metrics, the
sweep's quality gates and its verdicts at the traffic mix.

Names are stable and flat so runs compare column by column in the MLflow UI and in
``search_runs``. A figure that could not be measured is left out, never logged as 0.
"""

import json
import math
import re
from collections.abc import Iterable, Mapping

from specfleet.contract import CellIdentity, SweepConfig
from specfleet.contract.fingerprint import Fingerprint
from specfleet.gates.quality import QualityCheck
from specfleet.measure.acceptance import ClassAcceptance
from specfleet.production.canary import CanaryResult
from specfleet.results import AcceptanceDistribution, CellResult, DistributionSummary
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.mix import MixVerdict

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"token|secret|passw|credential|api_?key|auth", re.IGNORECASE)
INVALID_KEY_CHARS = re.compile(r"[^\w./ -]")  # MLflow keys: alphanumerics, _ . - / and space
SERIES = {  # metric prefix -> CellResult field (docs/measurement.md, "Latency series")
    "ttft_ms": "ttft_ms",
    "itl_ms": "itl_per_chunk_ms",
    "itl_per_token_ms": "itl_per_token_ms",
    "tpot_ms": "tpot_ms",
    "e2e_ms": "e2e_ms",
}
ACCEPTANCE_SOURCES = ("client_mean_acceptance_length", "request_mean_acceptance_length")
"""Per-request acceptance sources (``RequestAcceptance`` fields): the client's estimate (tokens per
step over all steps) and vLLM's own per-request figure (conditional on drafting)."""
FINGERPRINT_TEXT_PARTS = ("target", "tokenizer", "engine", "engine_version")
FINGERPRINT_JSON_PARTS = ("drafts", "methods", "hardware")


def _walk(prefix: str, value: object, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _walk(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        for item in value:  # named list items (arms, prompt classes) keyed by name, not position
            _walk(f"{prefix}.{item['name']}", {k: v for k, v in item.items() if k != "name"}, out)
    else:
        out[INVALID_KEY_CHARS.sub("_", prefix)] = value if isinstance(value, str) else json.dumps(value)


def scrub(value: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            value = value.replace(secret, REDACTED)
    return value


def contract_params(config: SweepConfig, secrets: Iterable[str] = ()) -> dict[str, str]:
    """The whole contract as ``section.field`` params. Environment entries with secret-like
    names, and any occurrence of a secret value (the API key), are redacted."""
    flat: dict[str, str] = {}
    _walk("", config.model_dump(mode="json"), flat)
    known = list(secrets)
    return {
        key: REDACTED if ".env." in f".{key}" and SECRET_NAME.search(key.rsplit(".", 1)[-1]) else scrub(value, known)
        for key, value in flat.items()
    }


def fingerprint_tags(fingerprint: Fingerprint) -> dict[str, str]:
    """``fingerprint`` (the digest) and ``fingerprint.<part>``, enough to rebuild it."""
    tags = {"fingerprint": fingerprint.digest}
    for part in FINGERPRINT_TEXT_PARTS:
        value = getattr(fingerprint, part)
        if value is not None:
            tags[f"fingerprint.{part}"] = str(value)
    for part in FINGERPRINT_JSON_PARTS:
        tags[f"fingerprint.{part}"] = json.dumps(getattr(fingerprint, part), sort_keys=True)
    return tags


def fingerprint_from_tags(tags: Mapping[str, str]) -> Fingerprint | None:
    """Inverse of ``fingerprint_tags``; None when the run carries no fingerprint."""
    if "fingerprint.engine" not in tags:
        return None
    data: dict[str, object] = {part: tags.get(f"fingerprint.{part}") for part in FINGERPRINT_TEXT_PARTS}
    data |= {part: json.loads(tags[f"fingerprint.{part}"]) for part in FINGERPRINT_JSON_PARTS}
    return Fingerprint.model_validate(data)


def _put(out: dict[str, float], name: str, value: float | int | None) -> None:
    if value is not None and math.isfinite(value):
        out[name] = float(value)


def _series(out: dict[str, float], prefix: str, summary: DistributionSummary) -> None:
    for stat in ("p50", "p95", "p99"):
        estimate = getattr(summary, stat)
        _put(out, f"{prefix}_{stat}", estimate.value if estimate is not None else None)
    _put(out, f"{prefix}_mean", summary.mean)


def _acceptance(out: dict[str, float], prefix: str, dist: AcceptanceDistribution) -> None:
    """``PREFIX`` is the token-weighted (pooled) mean; ``PREFIX_request_mean``, ``_p10``, ``_p50``,
    ``_p90`` the request-level distribution; ``PREFIX_weighting_gap`` their difference."""
    _put(out, prefix, dist.token_weighted_mean)
    _put(out, f"{prefix}_request_mean", dist.mean)
    for stat in ("p10", "p50", "p90"):
        _put(out, f"{prefix}_{stat}", getattr(dist, stat))
    _put(out, f"{prefix}_weighting_gap", dist.weighting_gap)


def cell_metrics(cell: CellResult) -> dict[str, float]:
    """Flat metric names, the same in every cell's run; absent where the figure is None."""
    out: dict[str, float] = {}
    for prefix, field in SERIES.items():
        _series(out, prefix, getattr(cell, field))
    tp = cell.throughput
    for name in ("output_tokens_per_s", "qualified_tokens_per_s", "request_goodput_per_s", "requests_per_s",
                 "duration_s"):
        _put(out, name, getattr(tp, name))
    _put(out, "requests_completed", cell.completed)
    _put(out, "requests_failed", cell.failed)
    _put(out, "requests_slo_met", cell.slo_met)
    _put(out, "requests_measured", cell.measured_requests)
    if cell.spec_decode is not None:
        _put(out, "acceptance_rate", cell.spec_decode.acceptance_rate)
        _put(out, "mean_acceptance_length", cell.spec_decode.mean_acceptance_length)
        for i, rate in enumerate(cell.spec_decode.acceptance_per_position):
            _put(out, f"acceptance_pos_{i}", rate)
    if cell.request_acceptance is not None:
        for source in ACCEPTANCE_SOURCES:
            _acceptance(out, source, getattr(cell.request_acceptance, source))
    if cell.kv_cache is not None:
        _put(out, "kv_cache_size_tokens", cell.kv_cache.kv_cache_size_tokens)
        _put(out, "kv_cache_max_concurrency", cell.kv_cache.kv_cache_max_concurrency)
    _put(out, "energy_j", cell.energy.joules)
    _put(out, "j_per_qualified_token", cell.energy.j_per_qualified_token)
    _put(out, "client_lag_p99_ms", cell.client_lag_p99_ms)
    _put(out, "chunks_read_together_fraction", cell.chunks_read_together_fraction)
    return out


def cell_params(identity: CellIdentity) -> dict[str, str]:
    """The cell's contract identity (None fields, e.g. the baseline's k, are left out)."""
    return {key: str(value) for key, value in identity.model_dump(mode="json").items() if value is not None}


def cell_tags(cell: CellResult, fingerprint_digest: str) -> dict[str, str]:
    ident = cell.identity
    tags = {
        "run_kind": "cell", "fingerprint": fingerprint_digest, "cell_key": cell.key, "arm": ident.arm,
        "method": ident.method, "prompt_class": ident.prompt_class, "sampling": ident.sampling,
        "phase": ident.phase, "status": cell.status, "started_at": cell.started_at or "",
        "stop_reason": cell.stop_reason,
    }
    if ident.k is not None:
        tags["k"] = str(ident.k)
    if ident.concurrency is not None:
        tags["concurrency"] = str(ident.concurrency)
    else:
        tags["rate_per_s"] = f"{ident.load_value:g}"
    if cell.reasons:
        tags["reasons"] = "; ".join(cell.reasons)[:4000]
    return tags


def _quality_prefix(check: QualityCheck) -> str:
    return f"quality.{check.arm}.{check.prompt_class}.{check.sampling}"


def quality_metrics(checks: Iterable[QualityCheck]) -> dict[str, float]:
    """Per speculative arm, prompt class and sampling mode whose gate ran, under
    ``quality.ARM.CLASS.SAMPLING.``: ``score`` (the arm's mean), ``baseline_score`` (the baseline's
    on the same items), ``difference`` with ``difference_low`` and ``difference_high`` (its paired
    interval), ``items`` and ``passed`` (1 or 0). A gate that did not run logs no figure
    (``quality_tags`` says why)."""
    out: dict[str, float] = {}
    for check in checks:
        result, prefix = check.result, _quality_prefix(check)
        if result is None:
            continue
        _put(out, f"{prefix}.score", result.candidate_mean)
        _put(out, f"{prefix}.baseline_score", result.baseline_mean)
        if result.difference is not None:
            _put(out, f"{prefix}.difference", result.difference.estimate)
            _put(out, f"{prefix}.difference_low", result.difference.low)
            _put(out, f"{prefix}.difference_high", result.difference.high)
        _put(out, f"{prefix}.items", result.items)
        _put(out, f"{prefix}.passed", result.passed)
    return out


def quality_tags(checks: Iterable[QualityCheck]) -> dict[str, str]:
    """``quality.ARM.CLASS.SAMPLING.not_run``: why that gate did not run."""
    return {f"{_quality_prefix(c)}.not_run": c.not_run for c in checks if c.not_run is not None}


def acceptance_metrics(rows: Iterable[ClassAcceptance]) -> dict[str, float]:
    """Per speculative arm, prompt class and sampling mode, under ``acceptance.ARM.CLASS.SAMPLING.``:
    ``counter_mean_acceptance_length`` (1 + accepted / drafts, conditional on drafting) and each
    per-request source as in a cell's run (``client_mean_acceptance_length``: tokens per step over
    all steps; ``request_mean_acceptance_length``: vLLM's own). A figure that is None is left out."""
    out: dict[str, float] = {}
    for row in rows:
        prefix = INVALID_KEY_CHARS.sub("_", f"acceptance.{row.arm}.{row.prompt_class}.{row.sampling}")
        _put(out, f"{prefix}.counter_mean_acceptance_length", row.counter_mean_acceptance_length)
        for source in ACCEPTANCE_SOURCES:
            _acceptance(out, f"{prefix}.{source}", getattr(row, source))
    return out


def mix_metrics(verdicts: Iterable[MixVerdict]) -> dict[str, float]:
    """What nights are compared by, per speculative arm and k policy at the traffic mix, under
    ``mix.NAME.SAMPLING.`` (NAME an arm id or ``SPEC-k-policy``): ``saving``, ``saving_low`` and
    ``saving_high`` (whole-replica, at the ends of the speedup interval corrected for the sweep's
    comparisons), ``noise_floor``, ``coverage`` (token share of the mix measured), ``partial`` (1 when
    the verdict covers less than the whole mix), ``comparisons`` (what it was corrected for),
    ``baseline_replicas``, ``candidate_replicas``, ``entry_gate`` and ``adoptable`` (1 or 0). A figure
    that could not be formed is left out."""
    out: dict[str, float] = {}
    for v in verdicts:
        prefix, fleet = INVALID_KEY_CHARS.sub("_", f"mix.{v.name}.{v.sampling}"), v.fleet
        _put(out, f"{prefix}.saving", fleet.saving_fraction)
        _put(out, f"{prefix}.saving_low", fleet.pessimistic_saving_fraction)
        _put(out, f"{prefix}.saving_high", fleet.optimistic_saving_fraction)
        _put(out, f"{prefix}.noise_floor", fleet.noise_floor)
        _put(out, f"{prefix}.coverage", v.coverage)
        _put(out, f"{prefix}.partial", v.partial)
        _put(out, f"{prefix}.comparisons", v.comparisons)
        _put(out, f"{prefix}.baseline_replicas", fleet.baseline_replicas)
        _put(out, f"{prefix}.candidate_replicas", fleet.candidate_replicas)
        _put(out, f"{prefix}.entry_gate", v.passed)
        _put(out, f"{prefix}.adoptable", v.adoptable)
    return out


def noise_metrics(noise: Iterable[RunNoise]) -> dict[str, float]:
    """The sweep's run-to-run noise per figure, under ``noise.FIGURE.``: ``relative_sd`` (the noise
    floor) with ``relative_sd_low`` and ``relative_sd_high``, ``server_var`` and ``run_var``."""
    out: dict[str, float] = {}
    for n in noise:
        prefix = f"noise.{n.metric}"
        for name in ("relative_sd", "relative_sd_low", "relative_sd_high", "server_var", "run_var"):
            _put(out, f"{prefix}.{name}", getattr(n, name))
    return out


def canary_metrics(result: CanaryResult) -> dict[str, float]:
    """Per class: both replicas' acceptance, the speedups with their intervals (none where the class
    was not compared: ``canary.json`` says why), the quality difference, the twin against the
    baseline; each replica's age and the compared pair's age gap (none where unknown)."""
    out: dict[str, float] = {}
    for c in result.classes:
        prefix = f"{c.prompt_class}."
        for side, figure in (("baseline", c.baseline_acceptance), ("candidate", c.candidate_acceptance)):
            _put(out, f"{prefix}{side}_mean_acceptance_length", figure.value)
        compared = c.comparison
        for name, interval in (("qualified_tps_speedup", compared.qualified_tps_speedup if compared else None),
                               ("qualified_tps_speedup_corrected",
                                compared.qualified_tps_speedup_corrected if compared else None),
                               ("itl_speedup", compared.itl_speedup if compared else None),
                               ("quality_difference", c.quality.difference if c.quality else None),
                               ("age_difference_tps_speedup",
                                c.age_difference.qualified_tps_speedup if c.age_difference else None)):
            if interval is not None:
                for stat in ("estimate", "low", "high"):
                    _put(out, f"{prefix}{name}{'' if stat == 'estimate' else '_' + stat}", getattr(interval, stat))
        _put(out, f"{prefix}break_even_acceptance_length", c.break_even_acceptance)
    _put(out, "noise_floor", result.noise_floor)
    _put(out, "comparisons", result.comparisons)
    for age in result.age.ages:
        _put(out, f"{age.replica}_age_s", age.age_s)
    _put(out, "age_gap_s", result.age.age_gap_s)
    return out

