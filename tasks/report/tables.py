"""The sweep's tables as text, one column set per table over the typed rows: the cost table and
the negative-result cells (``DecisionRow``), acceptance length per request (``ClassAcceptance``),
the sweep overhead (``ArmSummary``), the k policy (``KPolicyReport``), the gates (``GateResult``)
and the cells a budget did not measure (``NotMeasuredCell``). The markdown summary, the report and
the CLI's rich tables all render these.

A figure that was not measured prints as ``fmt.NA``; the row's reason says why.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from specfleet.contract.matrix import load_label
from specfleet.gates.engine_findings import EngineCheck
from specfleet.gates.quality import QualityCheck
from specfleet.measure.acceptance import ClassAcceptance
from specfleet.perfmodel.prediction import PREDICTED_LABEL
from specfleet.planning.not_measured import NotMeasuredCell
from specfleet.report.sweep_report import ArmSummary
from specfleet.results import AcceptanceDistribution
from specfleet.stats.quality import GateResult
from specfleet.verdicts.kpolicy import KPolicyReport
from specfleet.verdicts.policy_arm import PolicyComparison
from specfleet.verdicts.table import DecisionRow
from specfleet_tasks.report import fmt

Row = TypeVar("Row")
Column = tuple[str, Callable[[Row], str]]


def _load(row: DecisionRow) -> str:
    return load_label(row.load_mode, row.load_value)


COST_COLUMNS: list[Column[DecisionRow]] = [
    ("method", lambda r: r.method), ("k", lambda r: str(r.k)), ("class", lambda r: r.prompt_class), ("load", _load),
    ("accept r", lambda r: fmt.num(r.acceptance_rate)),
    ("accept len (drafted steps)", lambda r: fmt.num(r.mean_acceptance_length)),
    ("tok/step (all steps)", lambda r: fmt.num(r.tokens_per_step)),
    ("speedup [CI]", lambda r: fmt.speedup_range(r.qualified_tps_speedup, r.speedup_low, r.speedup_high)),
    ("base $/M", lambda r: fmt.num(r.baseline_cost_per_million_usd, ",.2f")),
    ("spec $/M", lambda r: fmt.num(r.candidate_cost_per_million_usd, ",.2f")),
    ("saving", lambda r: fmt.num(r.saving_fraction, "+.1%")), ("noise", lambda r: fmt.num(r.noise_floor, ".1%")),
    ("MDS 80%", lambda r: fmt.num(r.detectable_saving_fraction, "+.1%")),
    ("verdict", lambda r: r.verdict), ("reason", lambda r: r.reason_code),
]
NEGATIVE_COLUMNS: list[Column[DecisionRow]] = [
    *COST_COLUMNS[:-1], ("sampling", lambda r: r.sampling), ("hardware", lambda r: r.hardware),
    ("engine", lambda r: f"{r.engine} {r.engine_version or fmt.NA}"), ("reason", lambda r: r.reason),
]
"""A negative cell is shown with the same detail as an adopted one (seed: "A negative result should be
published with the same detail as a positive one"), its reason in full; the HTML report and every
markdown file show these columns."""


def acceptance_spread(dist: AcceptanceDistribution) -> str:
    """``2.41 [1.90 2.50 3.00]``: the request-weighted mean with p10, p50 and p90 across requests."""
    if dist.mean is None:
        return fmt.NA
    return f"{dist.mean:.2f} [{fmt.num(dist.p10)} {fmt.num(dist.p50)} {fmt.num(dist.p90)}]"


def token_weighted(dist: AcceptanceDistribution) -> str:
    """``2.31 (+0.10)``: the token-weighted (pooled) mean, and how far the request-weighted one lies from it."""
    if dist.token_weighted_mean is None:
        return fmt.NA
    return f"{dist.token_weighted_mean:.2f} ({fmt.num(dist.weighting_gap, '+.2f')})"


def acceptance_note(row: ClassAcceptance) -> str:
    notes = [f"{name}: {d.missing}" for name, d in (("client", row.client_mean_acceptance_length),
                                                    ("vLLM", row.request_mean_acceptance_length)) if d.missing]
    return "; ".join(notes)


ACCEPTANCE_TITLE = "Acceptance length per request (per arm, prompt class and sampling)"
ACCEPTANCE_CAPTION = (
    "Three figures, named apart (docs/measurement.md, \"Per-request acceptance\"). The counters' 1 + accepted / "
    "drafts and vLLM's per-request figure count only the steps that verified a draft: lengths conditional on "
    "drafting. The client's estimate, tokens per content chunk between a request's first (prefill) and last (cut "
    "by max_tokens), is tokens per engine step over all steps: what speedup follows, and what the cost table's "
    "tok/step and the model's implied alpha use. Request-weighted: the mean of the requests' figures; "
    "token-weighted: tokens over steps pooled over the requests, as the counters pool.")
ACCEPTANCE_COLUMNS: list[Column[ClassAcceptance]] = [
    ("arm", lambda r: r.arm), ("class", lambda r: r.prompt_class), ("sampling", lambda r: r.sampling),
    ("counters 1+acc/drafts (drafted steps)", lambda r: fmt.num(r.counter_mean_acceptance_length)),
    ("vLLM per request (drafted steps): mean [p10 p50 p90]",
     lambda r: acceptance_spread(r.request_mean_acceptance_length)),
    ("vLLM token-weighted (request - token)", lambda r: token_weighted(r.request_mean_acceptance_length)),
    ("client tok/step (all steps): mean [p10 p50 p90]", lambda r: acceptance_spread(r.client_mean_acceptance_length)),
    ("client token-weighted (request - token)", lambda r: token_weighted(r.client_mean_acceptance_length)),
    ("requests", lambda r: str(r.client_mean_acceptance_length.requests
                               + r.client_mean_acceptance_length.requests_without)),
    ("note", acceptance_note),
]


def _timed(name: str) -> Callable[[ArmSummary], str]:
    """An arm whose Ray task died has no timing: n/a, not zeros."""
    return lambda a: fmt.num(getattr(a.timing, name), ".1f") if a.timing else fmt.NA


OVERHEAD_COLUMNS: list[Column[ArmSummary]] = [
    ("arm", lambda a: a.arm), ("phase", lambda a: a.phase), ("cells", lambda a: str(a.cells_measured)),
    ("start s", _timed("startup_s")), ("probe s", _timed("probe_s")), ("warm-up s", _timed("warmup_s")),
    ("measured s", _timed("measured_s")), ("idle s", _timed("idle_s")), ("wall s", _timed("wall_s")),
    ("measured", lambda a: fmt.num(a.measured_fraction, ".0%")),
    ("restarts", lambda a: str(a.timing.restarts) if a.timing else fmt.NA),
]


def markdown_table(rows: Sequence[Row], columns: Sequence[Column[Row]]) -> str:
    if not rows:
        return "(none)\n"
    lines = ["| " + " | ".join(name for name, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(render(row).replace("|", "\\|") for _, render in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def not_measured_title(count: int) -> str:
    return f"Not measured ({count} cell{'s' if count != 1 else ''}): the budget did not start them; " \
           "--continue measures them; never in a decision"


def not_measured_line(cell: NotMeasuredCell) -> str:
    """``LABEL: budget: predicted 42 s, 30 s left; PREDICTED, not measured: figures [interval]``, or
    ``...; no prediction: why``."""
    head = f"{cell.label}: {cell.reason}: {cell.detail}"
    p = cell.prediction
    if p is None:
        return f"{head}; no prediction: {cell.prediction_note}"
    tps, cost, speedup = p.interval.qualified_tokens_per_s, p.interval.cost_per_million_usd, p.interval.speedup
    figures = [f"qualified tokens/s {fmt.num_range(p.qualified_tokens_per_s, tps.low, tps.high)}"]
    if speedup is not None:
        figures.append(f"speedup {fmt.speedup_range(p.speedup, speedup.low, speedup.high)}")
    figures.append(f"$/M {fmt.num_range(p.cost_per_million_usd, cost.low, cost.high, ',.2f')}")
    return f"{head}; {PREDICTED_LABEL}: {', '.join(figures)}"


def _level(concurrency: int) -> str:
    return load_label("concurrency", concurrency)


def k_policy_lines(report: KPolicyReport) -> list[str]:
    """The deployable policy of one speculative arm: its k per level and the vLLM config."""
    ours = report.specfleet
    head = f"{ours.spec_name} ({ours.sampling}"
    head += f", {ours.prompt_class})" if ours.prompt_class else ", all prompt classes)"
    if ours.refused:
        return [f"{head}: no policy ({ours.refused})"]
    levels = "; ".join(f"{_level(c.level)}: k={c.k} ({c.reason})" for c in ours.levels)
    config = report.speculative_config
    deploy = json.dumps(config, sort_keys=True) if config else "none: speculation adopted at no level"
    return [f"{head}: {levels}", f"  speculative_config ({report.recommended}): {deploy}"]


POLICY_COMPARISON_TITLE = "k policy measured on its own server beside the composed verdict"


def policy_comparison_lines(comparisons: Sequence[PolicyComparison]) -> list[str]:
    """Each measured policy: composed and measured savings side by side, then both headlines and notes."""
    lines = []
    for c in comparisons:
        lines.append(c.line)
        lines += [f"  composed: {c.composed}"] if c.composed else []
        lines += [f"  measured: {c.measured}"] if c.measured else []
        lines += [f"  note: {note}" for note in c.notes]
    return lines


def engine_check_lines(checks: Sequence[EngineCheck]) -> list[str]:
    """One line per self-check of the installed engine, with the command that reproduces it."""
    return [f"- {c.check} on {c.engine} {c.engine_version}: {c.outcome.upper().replace('_', ' ')}: {c.detail} "
            f"(reproduce: `{c.reproducer}`)" for c in checks]


def gate_line(arm: str, gate: GateResult) -> str:
    """``ARM: GATE passed|FAILED: detail``; a gate that did not run: ``ARM: quality gate not run: why``."""
    if not gate.ran:
        return f"{arm}: {gate.detail}"
    return f"{arm}: {gate.gate} {'passed' if gate.passed else 'FAILED'}: {gate.detail}"


def gate_lines(equivalence: Mapping[str, Sequence[GateResult]], quality: Sequence[QualityCheck]) -> list[str]:
    """Every gate of every speculative arm: its equivalence gates, then its quality gate per prompt
    class and sampling mode."""
    arms = list(dict.fromkeys([*equivalence, *(q.arm for q in quality)]))
    return [gate_line(arm, g) for arm in arms
            for g in [*equivalence.get(arm, []), *(q.gate() for q in quality if q.arm == arm)]]
