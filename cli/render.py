"""Rich tables for people; ``--json`` output never goes through here. Rendering does no I/O
beyond the console: what needs a store or a server (the MLflow UI hint) is looked up by the
command and passed in."""

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from specfleet.contract.durations import format_duration
from specfleet.contract.matrix import load_label
from specfleet.perfmodel.prediction import PREDICTED_LABEL
from specfleet_tasks.report.fmt import NA, speedup_range

if TYPE_CHECKING:
    from pathlib import Path

    from specfleet.perfmodel.prediction import Bounds, Prediction
    from specfleet.planning.estimate import SweepEstimate
    from specfleet.planning.power import DesignProposal, PowerPlan
    from specfleet.production.canary import AcceptanceFigure, CanaryResult
    from specfleet.report.sweep_report import SweepReport

console = Console()
WIDE_COLUMNS = 160


def _fmt(value: object) -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def print_measurement(result: dict[str, object]) -> None:
    table = Table(title=f"cell: {result['status']}")
    table.add_column("series")
    for column in ("p50", "p95", "p99", "mean"):
        table.add_column(column, justify="right")
    for series in ("ttft_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms"):
        figures = result[series]
        assert isinstance(figures, dict)
        table.add_row(series, *(_fmt(figures[c]) for c in ("p50", "p95", "p99", "mean")))
    console.print(table)
    for name in ("completed", "failed", "output_tokens_per_s", "qualified_tokens_per_s", "acceptance_rate",
                 "mean_acceptance_length", "client_mean_acceptance_length", "request_mean_acceptance_length"):
        console.print(f"{name}: {_fmt(result[name])}")
    if result["tls_verification"] is not None:
        style = "[red]" if result["tls_verification"] == "off (--insecure)" else "[dim]"
        console.print(f"{style}TLS certificate verification: {result['tls_verification']}[/]")
    for reason in result["reasons"] or []:  # type: ignore[attr-defined]
        console.print(f"[yellow]note:[/yellow] {reason}")


def _span(value: float | None, bounds: "Bounds | None") -> str:
    if value is None:
        return NA
    if bounds is None or bounds.low is None or bounds.high is None:
        return _fmt(value)
    return f"{_fmt(value)} [{_fmt(bounds.low)}, {_fmt(bounds.high)}]"


def print_prediction(prediction: "Prediction") -> None:
    """A predicted cell: every figure with its interval, then what it extrapolates. The title says PREDICTED."""
    p = prediction
    load = load_label(p.load_mode, p.load_value)
    measured = "a measured cell exists" if p.measured_cell else "not a measured cell"
    table = Table(title=f"{PREDICTED_LABEL}: {p.arm} / {p.prompt_class} / {load} / {p.sampling}, "
                        f"calibrated on {p.calibrated_on} ({measured})")
    table.add_column("series (ms)")
    for column in ("p50", "p95", "p99"):
        table.add_column(column, justify="right")
    for series in ("ttft_ms", "itl_ms", "itl_per_token_ms", "tpot_ms", "e2e_ms"):
        figures, bounds = getattr(p, series), getattr(p.interval, series)
        table.add_row(series, *(_span(getattr(figures, q), getattr(bounds, q)) for q in ("p50", "p95", "p99")))
    console.print(table)
    interval = p.interval
    for name, value, bounds in (
        ("output_tokens_per_s", p.output_tokens_per_s, interval.output_tokens_per_s),
        ("qualified_tokens_per_s", p.qualified_tokens_per_s, interval.qualified_tokens_per_s),
        ("mean_acceptance_length", p.mean_acceptance_length, interval.mean_acceptance_length),
        ("tokens_per_step", p.tokens_per_step, interval.tokens_per_step),
        ("speedup", p.speedup, interval.speedup),
        ("cost_per_million_usd", p.cost_per_million_usd, interval.cost_per_million_usd),
    ):
        console.print(f"{name}: {_span(value, bounds)}", highlight=False)
    console.print(f"interval: {interval.basis}", highlight=False)
    for line in p.extrapolates:
        console.print(f"[yellow]extrapolates:[/yellow] {line}", highlight=False)
    if not p.extrapolates:
        console.print("extrapolates: nothing (inside the measured loads and k)", highlight=False)
    for note in p.notes:
        console.print(f"note: {note}", highlight=False)


def _compact(count: int) -> str:
    """``10,240,000`` as ``10.2M``."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.1f}{suffix}"
    return str(count)


def print_plan(estimate: "SweepEstimate") -> None:
    """A sweep's plan: one row per stage and the total, every figure PREDICTED, then its basis."""
    from specfleet.planning.estimate import human_duration

    e = estimate
    table = Table(title=f"PREDICTED plan of {e.config_name} ({e.basis}): {e.accelerators} accelerators held",
                  box=box.SIMPLE)
    for column in ("stage", "servers", "cells", "requests", "tokens", "wall", "accel-h", "cost $", "idle accel-h"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    rows = [(s.name, s.servers, s.cells, s.requests, s.tokens, s.wall_s, s.accelerator_hours, s.cost_usd,
             s.idle_accelerator_hours) for s in e.stages]
    rows.append(("total", e.servers, e.cells, e.requests, e.tokens, e.wall_s, e.accelerator_hours, e.cost_usd,
                 e.idle_accelerator_hours))
    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)  # logs and CI: do not fold lines
    for name, servers, cells, requests, tokens, wall, accel, cost, idle in rows:
        table.add_row(name, str(servers), str(cells), f"{requests:,}", _compact(tokens), human_duration(wall),
                      f"{accel:,.2f}", f"{cost:,.2f}", f"{idle:,.2f}")
    out.print(table)
    if e.budget_s is not None:
        verdict = "fits" if e.fits_budget else "[red]does NOT fit[/red]"
        out.print(f"budget {human_duration(e.budget_s)}: {verdict} (predicted {human_duration(e.wall_s)})")
    for note in e.notes:
        out.print(f"note: {note}", highlight=False)


def _share(value: float | None) -> str:
    """A saving and the true speedup it is: +20% (1.25x)."""
    return NA if value is None else f"{value:+.0%} ({1.0 / (1.0 - value):.2f}x)"


def print_power(plan: "PowerPlan") -> None:
    """Each verdict's minimum detectable saving: the arms at the mix and on each class, the cells
    as a range per arm; PREDICTED, with the noise it rests on."""
    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)
    table = Table(title=f"PREDICTED minimum detectable saving at {plan.power:.0%} power ({plan.history_sweeps} earlier "
                  f"sweeps' noise pooled; {plan.baseline_server_lives} baseline server lives)", box=box.SIMPLE)
    columns = ("verdict", "arm", "sampling", "adopts a true saving of at least", "rejects a true saving of at most")
    for column in columns:
        table.add_column(column, justify="left" if column in ("verdict", "arm", "sampling") else "right")
    for kind, label in (("mix", "arm at the mix"), ("class", "class")):
        for c in (c for c in plan.claims if c.kind == kind):
            where = label if c.prompt_class is None else f"{label} {c.prompt_class}"
            table.add_row(where, c.arm, c.sampling, _share(c.adopt_saving), _share(c.reject_saving))
    for arm, sampling in dict.fromkeys((c.arm, c.sampling) for c in plan.claims if c.kind == "cell"):
        cells = [c for c in plan.claims if c.kind == "cell" and (c.arm, c.sampling) == (arm, sampling)]
        adopt = [c.adopt_saving for c in cells if c.adopt_saving is not None]
        reject = [c.reject_saving for c in cells if c.reject_saving is not None]
        if len(adopt) == len(cells) and adopt:
            table.add_row(f"cells ({len(cells)})", arm, sampling, f"{_share(min(adopt))} to {_share(max(adopt))}",
                          f"{_share(min(reject))} to {_share(max(reject))}")
        else:
            table.add_row(f"cells ({len(cells)})", arm, sampling, NA, NA)
    out.print(table)
    out.print(f"noise: floor {plan.tau:.1%}, {plan.noise_source}", highlight=False)
    for note in plan.notes + sorted({c.why_none for c in plan.claims if c.why_none}):
        out.print(f"note: {note}", highlight=False)


def print_design(proposal: "DesignProposal") -> None:
    """``--detect``: the design proposed, or the closest searched, with its predicted time and cost."""
    from specfleet.planning.estimate import human_duration

    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)
    head = (f"PREDICTED design that adopts a true {proposal.target_saving:.0%} saving at the mix at "
            f"{proposal.power:.0%} power" if proposal.found else
            f"[red]no design searched adopts a true {proposal.target_saving:.0%} saving at the mix at "
            f"{proposal.power:.0%} power[/red]; the closest")
    out.print(f"{head}: load.repeats {proposal.repeats}, load.requests_per_cell {proposal.requests_per_cell}, "
              f"analysis.baseline_server_lives {proposal.baseline_server_lives}, analysis.arm_server_lives "
              f"{proposal.arm_server_lives}: minimum detectable saving at the "
              f"mix {_share(proposal.mix_adopt_saving)}, on one class {_share(proposal.class_adopt_saving)}; "
              f"{human_duration(proposal.wall_s)}, {proposal.accelerator_hours:,.2f} accel-h, "
              f"${proposal.cost_usd:,.2f} ({proposal.searched} designs searched)")
    for note in proposal.notes:
        out.print(f"note: {note}", highlight=False)


def print_sweep_summary(summary: "SweepReport", mlflow_hint: str) -> None:
    """The sweep's report in the one section order (``specfleet_tasks.report.terminal``): the verdict at the traffic
    mix first, the class verdicts, the noise, the cell decisions and the gates grouped by verdict and
    reason, the k policy: one screen for the demo, the per-cell tables named in ``summary.md``. Long
    lines are left to the terminal to wrap (``soft_wrap``), so a log keeps one line per statement.
    ``mlflow_hint``: where the sweep's runs are seen (``specfleet_cli.sweep.mlflow_ui_hint``)."""
    from specfleet_tasks.report.terminal import terminal_sections

    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)  # logs and CI: do not fold lines
    out.print(f"\nsweep id: {summary.sweep_id}  (fingerprint {summary.fingerprint})")
    out.print(f"cells: {summary.cells_complete}/{summary.cells_planned} complete ({summary.cells_ok} ok, "
              f"{summary.cells_invalid} invalid, {len(summary.failed_cells)} failed"
              + (f", {len(summary.not_measured)} not measured" if summary.not_measured else "") + "); "
              f"{summary.servers_started} servers started; hardware: {summary.hardware}", markup=False)
    for title, lines in terminal_sections(summary):
        out.print(title, style="bold", markup=False, highlight=False)
        for line in lines:
            out.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"MLflow UI: {mlflow_hint}", markup=False)


def print_answer(summary: "SweepReport") -> None:
    """The last word of the demo: each verdict's first line, the details being above and in the report."""
    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)
    out.print("[bold]The answer at the traffic mix[/bold] (checks above, figures in the report)")
    for verdict in summary.mix:
        out.print(f"  {verdict.headline}", markup=False, highlight=False, soft_wrap=True)
        found = verdict.fleet.detection
        if verdict.verdict == "inconclusive":
            decide = ("no interval: repeated runs on two or more server lives would give one" if found is None
                      else found.to_decide or "the checks above that are not yet met (cells of the mix not "
                      "measured, or prompt classes still inconclusive)")
            out.print(f"    what would decide it: {decide}", markup=False, highlight=False, soft_wrap=True)
    if not summary.mix:
        out.print(f"  {NA}: no verdict at the traffic mix (see the notes above)", markup=False)
    for compared in summary.policy_comparisons:  # the measured k policy beside the composed one
        out.print(f"  {compared.line}", markup=False, highlight=False, soft_wrap=True)


def print_next_steps(report_html: "Path", mlflow_hint: str) -> None:
    """The demo's last lines: what a newcomer opens next, and how to run it on their own fleet."""
    out = console if console.is_terminal else Console(width=WIDE_COLUMNS)
    out.print("[bold]Next[/bold]")
    for name, text in (
        ("report", str(report_html)),
        ("MLflow UI", mlflow_hint),
        ("your fleet", "copy configs/llama70b-h200.yaml (or the demo's), set its models, prompt classes, traffic and "
                       "prices, then: specfleet validate my.yaml && specfleet plan my.yaml && specfleet sweep my.yaml"),
    ):
        out.print(f"  {name + ':':<12}{text}", markup=False, highlight=False, soft_wrap=True)


def _acceptance(figure: "AcceptanceFigure") -> str:
    if figure.value is None:
        return NA
    source = "vLLM per request" if figure.source == "vllm_per_request" else "client estimate"
    return f"{figure.value:.2f} ({source}, {figure.requests} req)"


def _speedup(interval: object) -> str:
    estimate, low, high = (getattr(interval, name, None) for name in ("estimate", "low", "high"))
    if estimate is None:
        return NA
    return speedup_range(estimate, low, high)


def print_canary(result: "CanaryResult", canary_dir: "Path") -> None:
    """The verdict, then one row per prompt class: what was compared and what was found."""
    kind = f" ({result.hold})" if result.hold else ""
    table = Table(title=f"canary: {result.verdict.upper()}{kind}", box=box.SIMPLE_HEAD)
    for column in ("class", "acceptance base / cand", "break-even", "SLO tok/s cand/base (corrected)", "ITL speedup",
                   "p95 TTFT cand ms", "quality diff", "finding"):
        table.add_column(column)
    for c in result.classes:
        quality = c.quality.difference if c.quality is not None else None
        compared = c.comparison
        why_not = [f"not compared: {c.not_compared}"] if c.not_compared else []
        table.add_row(
            c.prompt_class, f"{_acceptance(c.baseline_acceptance)} / {_acceptance(c.candidate_acceptance)}",
            _fmt(c.break_even_acceptance), _speedup(compared.qualified_tps_speedup_corrected if compared else None),
            _speedup(compared.itl_speedup if compared else None),
            _fmt(compared.candidate_ttft_ms if compared else None),
            NA if quality is None else f"{quality.estimate:+.3f}",
            "; ".join([*why_not, *c.findings, *(f"not covered: {f}" for f in c.not_covered_findings)])
            or "within the noise")
    console.print(table)
    console.print(f"verdict: {result.verdict}{kind}: {result.reason}", markup=False, highlight=False)
    ages = ", ".join(age.describe() for age in result.age.ages)
    covered = "covered" if result.age.covered else "not covered"
    console.print(f"ages: {ages} ({covered}: --max-age-gap {format_duration(int(result.age.max_age_gap_s))})",
                  markup=False, highlight=False)
    for c in result.classes:
        if c.age_difference is not None:
            console.print(f"age difference on {c.prompt_class}: {c.age_difference.finding}", markup=False,
                          highlight=False)
    corrected = f" (intervals corrected for {result.comparisons} comparisons)" if result.comparisons else ""
    console.print(f"noise: {result.noise_source}{corrected}", markup=False, highlight=False)
    if result.rollback_server_args is not None:
        console.print(f"rollback (speculation off): {' '.join(result.rollback_server_args)}", markup=False)
    console.print(f"stored: {canary_dir}/canary.json", markup=False, highlight=False)
