"""What a sweep says first, as text: the verdict at the traffic mix (``MixVerdict``), and the
cell decisions and gates grouped so that cells sharing a verdict and reason read as one line.
The terminal, ``summary.md`` and the report all open with these, in the one section order
(``specfleet_tasks.report.sections``); per-cell detail stays below them (the cost table, the negative-result cells)."""

import os
from collections.abc import Mapping, Sequence

from specfleet.contract.matrix import load_label
from specfleet.gates.quality import QualityCheck
from specfleet.stats.bootstrap import Interval, speedup_text
from specfleet.stats.quality import GateResult
from specfleet.stats.variance import RunNoise
from specfleet.verdicts.cell import Decision
from specfleet.verdicts.detection import Detection
from specfleet.verdicts.mix import GateCheck, MixCell, MixFigures, MixVerdict
from specfleet.verdicts.prompt_class import ClassVerdict
from specfleet.verdicts.sequential import Look
from specfleet.verdicts.traffic_mix import TrafficMix
from specfleet_tasks.report import fmt
from specfleet_tasks.report.tables import Column, gate_line, markdown_table

MIX_TITLE = "Verdict at the traffic mix (cost per million SLO-qualified tokens on whole replicas)"
ClassFigures = tuple[MixVerdict, str, MixFigures]
"""One prompt class of a verdict alone at the load shares: (verdict, class, its figures)."""


def _pair(base: float | int | None, candidate: float | int | None, spec: str) -> str:
    return f"{fmt.num(base, spec)} → {fmt.num(candidate, spec)}"


def _saving(f: MixFigures) -> str:
    if f.saving_fraction is None:
        return f"{fmt.NA} ({f.reason})"
    interval = fmt.saving_range(f.pessimistic_saving_fraction, f.optimistic_saving_fraction)
    return f"{fmt.pct(f.saving_fraction)} {interval}"


def _gate(v: MixVerdict) -> str:
    failed = [c.name for c in v.checks if not c.passed]
    return "passed" if not failed else f"FAILED ({', '.join(failed)})"


MIX_COLUMNS: list[Column[MixVerdict]] = [
    ("arm or k policy", lambda v: v.subject), ("sampling", lambda v: v.sampling),
    ("covers", lambda v: fmt.pct(v.coverage, signed=False)),
    ("replicas base → spec", lambda v: _pair(v.fleet.baseline_replicas, v.fleet.candidate_replicas, "d")),
    ("$/M base → spec", lambda v: _pair(v.fleet.baseline_cost_per_million_usd,
                                        v.fleet.candidate_cost_per_million_usd, ",.2f")),
    ("saving [interval]", lambda v: _saving(v.fleet)), ("noise", lambda v: fmt.num(v.fleet.noise_floor, ".1%")),
    ("entry gate", _gate), ("other gates", lambda v: "passed" if v.other_gates.passed else "FAILED"),
]
MIX_CLASS_COLUMNS: list[Column[ClassFigures]] = [
    ("arm or k policy", lambda r: r[0].subject), ("sampling", lambda r: r[0].sampling), ("class", lambda r: r[1]),
    ("covers", lambda r: fmt.pct(r[2].covered_share, signed=False)),
    ("replicas base → spec", lambda r: _pair(r[2].baseline_replicas, r[2].candidate_replicas, "d")),
    ("saving [interval]", lambda r: _saving(r[2])), ("noise", lambda r: fmt.num(r[2].noise_floor, ".1%")),
    ("beyond noise", lambda r: "yes" if r[2].beyond_noise else "no"),
]


def class_figures(verdicts: Sequence[MixVerdict]) -> list[ClassFigures]:
    return [(v, name, figures) for v in verdicts for name, figures in v.per_class.items()]


def mix_description(mix: TrafficMix) -> str:
    """``code 50%, chat 50% of tokens; c1 25%, c4 75%: <where the shares come from>``."""
    classes = ", ".join(f"{name} {share:.0%}" for name, share in mix.class_shares.items())
    loads = ", ".join(f"{load_label(mix.load_mode, load)} {share:.0%}" for load, share in mix.load_shares.items())
    return f"{classes} of {mix.share_basis}; {loads}: {mix.note}"


def _check(check: GateCheck) -> str:
    """A load check that passed needs no detail (every load has a cell); the others always show theirs."""
    state = "passed" if check.passed else "FAILED"
    quiet = check.passed and check.name == "production_load_distribution"
    return f"{check.name} {state}" if quiet else f"{check.name} {state} ({check.detail})"


def _left_out(mix: TrafficMix, cells: Sequence[MixCell]) -> str:
    return "; ".join(f"{c.prompt_class} {load_label(mix.load_mode, c.load_value)} ({c.reason})"
                     for c in cells if not c.measured)


def mix_verdict_lines(verdict: MixVerdict, left_out: bool = True) -> list[str]:
    """The headline (partial coverage first), the entry gate's three checks, the other gates,
    and (``left_out``) the cells of the mix the verdict leaves out, each named with why."""
    lines = [verdict.headline, "  entry gate: " + "; ".join(_check(c) for c in verdict.checks),
             "  " + _check(verdict.other_gates)]
    found = verdict.fleet.detection
    if found is not None and found.saving_fraction is not None:
        lines.append(f"  minimum detectable saving {found.saving_fraction:+.1%} at 80 % power (speedup "
                     f"{found.speedup:.3f}x)"
                     + (f"; {found.to_decide}" if found.to_decide and verdict.verdict == "inconclusive" else ""))
    missing = _left_out(verdict.mix, verdict.cells)
    return lines + ([f"  left out of the verdict: {missing}"] if missing and left_out else [])


def mix_lines(verdicts: Sequence[MixVerdict]) -> list[str]:
    """The mix once, the cells every verdict leaves out once when they are the same, then each
    verdict; nothing when no verdict was formed (the notes say why)."""
    if not verdicts:
        return []
    missing = {_left_out(v.mix, v.cells) for v in verdicts}
    shared = missing.pop() if len(missing) == 1 else None
    lines = [f"traffic mix: {mix_description(verdicts[0].mix)}"]
    lines += [f"left out of every verdict: {shared}"] if shared else []
    return lines + [line for v in verdicts for line in mix_verdict_lines(v, left_out=shared is None)]


def class_verdict_lines(verdicts: Sequence[ClassVerdict]) -> list[str]:
    """One line per prompt class (and sampling mode): its verdict, the arm shown and why."""
    return [f"{v.label}: {v.verdict}" + (f", {v.arm} ({v.method}, k={v.k})" if v.arm else "") + f": {v.reason}"
            for v in verdicts] or [f"{fmt.NA}: no prompt class in the config"]


INCONCLUSIVE_TITLE = "Inconclusive: this sweep could not tell (not negative results)"


def inconclusive_lines(verdicts: Sequence[MixVerdict], decisions: Sequence[Decision]) -> list[str]:
    """Every inconclusive verdict at the mix and cell, apart from the rejects: its corrected
    interval, its minimum detectable saving at 80 % power and what would decide it."""
    lines = [f"{v.subject} / {v.sampling} at the traffic mix: "
             f"{_undecided(v.fleet.speedup_corrected, v.fleet.detection)}"
             for v in verdicts if v.verdict == "inconclusive"]
    lines += [f"{d.slice.arm} {d.slice.prompt_class} {load_label(d.slice.load_mode, d.slice.load_value)} "
              f"{d.slice.sampling} ({d.reason_code}): "
              f"{_undecided(d.comparison.qualified_tps_speedup_corrected if d.comparison else None, d.detection)}"
              for d in decisions if d.verdict == "inconclusive"]
    return lines or ["none: every claim was adopted or rejected"]


def _undecided(interval: Interval | None, found: Detection | None) -> str:
    shown = (f"corrected speedup {speedup_text(interval.estimate, interval.low, interval.high, digits=3)}"
             if interval is not None else "no interval")
    if found is None:
        return f"{shown}; no minimum detectable saving (no noise estimate: repeated runs on two or more server " \
               "lives would give one)"
    mds = f"{found.saving_fraction:+.1%}" if found.saving_fraction is not None else "none in whole replicas"
    return (f"{shown}; minimum detectable saving {mds} (speedup {found.speedup:.3f}x at 80 % power)"
            + (f"; {found.to_decide}" if found.to_decide else ""))


def look_lines(look: Look | None, verdicts: Sequence[MixVerdict], decisions: Sequence[Decision]) -> list[str]:
    """With ``analysis.nights``: which look of its sequence the sweep is, the confidence it decided at,
    and each verdict it carries from an earlier look, with the sweep that decided it; nothing without."""
    if look is None:
        return []
    pooled = f", over its own runs and those of {len(look.earlier_sweeps)} earlier looks" if look.earlier_sweeps else ""
    lines = [f"{look.text}{pooled}"]
    lines += [f"{v.subject} / {v.sampling} at the traffic mix: {v.carried.text}" for v in verdicts if v.carried]
    lines += [f"{d.slice.arm} {d.slice.prompt_class} {load_label(d.slice.load_mode, d.slice.load_value)} "
              f"{d.slice.sampling}: {d.carried.text}" for d in decisions if d.carried]
    return lines


def noise_lines(noise: Sequence[RunNoise]) -> list[str]:
    """The sweep's run-to-run noise per figure: the floor, its interval, its parts, what it pooled."""
    lines = []
    for n in noise:
        figure = "SLO-qualified tokens/s" if n.metric == "qualified_tokens_per_s" else "SLO-percentile ITL"
        if n.relative_sd is None:
            lines.append(f"{figure}: no estimate ({n.source}): no interval states a confidence, nothing is adopted")
            continue
        interval = (f" [{n.relative_sd_low:.1%}, {n.relative_sd_high:.1%}]"
                    if n.relative_sd_low is not None and n.relative_sd_high is not None else "")
        lines.append(f"{figure}: {n.relative_sd:.1%}{interval} per window on another server (server part "
                     f"{n.server_var:.2g}, run part {n.run_var:.2g} on the log scale; {n.source})")
    return lines or [f"{fmt.NA}: a summary written before the noise was pooled"]


def _cells_label(decisions: Sequence[Decision]) -> str:
    """The cells of a group by arm: ``draft-k2, ngram-k3: code, chat at c1, c4`` when each arm's
    cells are all its classes at all its loads, else each cell named."""
    by_arm: dict[str, list[Decision]] = {}
    for d in decisions:
        by_arm.setdefault(d.slice.arm, []).append(d)
    shapes: dict[str, list[str]] = {}
    for arm, ds in by_arm.items():
        classes = list(dict.fromkeys(d.slice.prompt_class for d in ds))
        loads = list(dict.fromkeys(load_label(d.slice.load_mode, d.slice.load_value) for d in ds))
        shape = (f"{', '.join(classes)} at {', '.join(loads)}" if len(classes) * len(loads) == len(ds)
                 else ", ".join(f"{d.slice.prompt_class} {load_label(d.slice.load_mode, d.slice.load_value)}"
                                for d in ds))
        shapes.setdefault(shape, []).append(arm)
    return "; ".join(f"{', '.join(arms)}: {shape}" for shape, arms in shapes.items())


def _shared_reason(code: str, reasons: list[str]) -> str:
    """What differing reasons share up to their last common ``: `` clause, then the code."""
    common = os.path.commonprefix(reasons)
    clause = common[:common.rfind(": ") + 2] if ": " in common else ""
    return f"{clause}... ({code}; figures differ per cell: see the report)" if clause else \
        f"{code} (figures differ per cell: see the report)"


def grouped_decision_lines(decisions: Sequence[Decision]) -> list[str]:
    """One line per (verdict, reason code): the count, the cells, and the reason when every cell
    of the group gives the same one (else the reason code; each cell's figures are in the report)."""
    groups: dict[tuple[str, str], list[Decision]] = {}
    for d in decisions:
        groups.setdefault((d.verdict, d.reason_code), []).append(d)
    lines = []
    for (verdict, code), ds in groups.items():
        reasons = {d.reason for d in ds}
        reason = reasons.pop() if len(reasons) == 1 else _shared_reason(code, sorted(reasons))
        count = f"{len(ds)} cell{'s' if len(ds) != 1 else ''}"
        lines.append(f"{verdict} {count} ({_cells_label(ds)}): {reason}")
    return lines


def grouped_gate_lines(equivalence: Mapping[str, Sequence[GateResult]], quality: Sequence[QualityCheck]) -> list[str]:
    """Every gate of every speculative arm, the arms that share a result on one line."""
    results = [*((arm, g) for arm, gates in equivalence.items() for g in gates), *((q.arm, q.gate()) for q in quality)]
    arms_by_text: dict[str, list[str]] = {}
    for arm, gate in results:
        text = gate_line(arm, gate).removeprefix(f"{arm}: ")
        arms_by_text.setdefault(text, []).append(arm)
    return [f"{', '.join(dict.fromkeys(arms))}: {text}" for text, arms in arms_by_text.items()]


def mix_markdown(verdicts: Sequence[MixVerdict], per_class: bool = False) -> str:
    """The first section of ``summary.md`` and of the report, under its title: the mix, each verdict's
    lines, the figures as a table (and each class alone at the load shares when ``per_class``)."""
    if not verdicts:
        return f"{fmt.NA}: no verdict at the traffic mix (the notes say why).\n"
    lines = [f"Traffic mix: {mix_description(verdicts[0].mix)}.", ""]
    for v in verdicts:
        first, *rest = mix_verdict_lines(v)
        lines += [f"- **{first}**", *(f"  - {line.strip()}" for line in rest)]
    parts = ["\n".join(lines) + "\n\n", markdown_table(verdicts, MIX_COLUMNS)]
    if per_class:
        parts += ["\nEach prompt class alone at the load shares:\n\n", markdown_table(class_figures(verdicts),
                                                                                   MIX_CLASS_COLUMNS)]
    return "".join(parts)
