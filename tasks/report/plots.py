"""The report's figures as base64 PNG (matplotlib ``Figure`` on the Agg canvas, no pyplot state).

Every plotted value comes from a stored measurement, except lines labelled "modelled" (the seed's
closed form) and the dashed curves and bands labelled "predicted" (the performance model).
"""

import base64
import io
import math
from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from specfleet.economics.theory import ModelledAlpha, net_speedup
from specfleet.perfmodel.prediction import PREDICTED_LABEL
from specfleet_tasks.report import fmt
from specfleet_tasks.report.measures import PERCENTILES, EnergyRow, KVRow, LatencyCurve
from specfleet_tasks.report.predicted import PredictedCurve
from specfleet_tasks.report.views import HeatMap, TheoryRow

DPI = 110
NA_COLOUR = "#d9d9d9"
PERCENTILE_STYLE = {"p50": ":", "p95": "-", "p99": "--"}
CMAP = colormaps["RdBu"]
DODGE = 0.06  # horizontal offset between arms sharing a load, so their intervals do not hide each other


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _grid(panels: int, cols: int, width_in: float, height_in: float) -> tuple[Figure, list[Axes]]:
    """Panels on a fixed grid: spacing set by hand, since a layout engine doubles the drawing time."""
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(width_in * min(cols, panels), height_in * rows))
    fig.subplots_adjust(left=0.8 / (width_in * min(cols, panels)), right=0.98, bottom=0.45 / (height_in * rows),
                        top=1 - 0.35 / (height_in * rows), wspace=0.3, hspace=0.55)
    axes = fig.subplots(rows, min(cols, panels), squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def heat_spread(maps: Sequence[HeatMap]) -> float:
    """Half-width of the colour scale around 1.0 shared by every arm's heat map."""
    values = [abs(c.speedup.estimate - 1.0) for m in maps for c in m.cells.values() if c.speedup is not None]
    return max([0.1, *values])


def heat_map_png(m: HeatMap, spread: float) -> str:
    """Speedup per (row, load) on a diverging scale centred on 1.0, each cell in one of three states:
    adopt (its verdict in bold, '*' where its corrected interval saves a whole replica), reject
    (a solid black frame: shown not to pay, or the reason code that rejected it) and inconclusive (a
    dashed frame: the sweep could not tell); grey cells were not measured."""
    values = np.full((len(m.rows), len(m.cols)), np.nan)
    for (row, col), measured in m.cells.items():
        if measured.speedup is not None:
            values[m.rows.index(row), m.cols.index(col)] = measured.speedup.estimate
    fig = Figure(figsize=(2.2 + 1.5 * len(m.cols), 1.3 + 0.8 * len(m.rows)), layout="constrained")
    ax = fig.subplots()
    ax.set_facecolor(NA_COLOUR)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - spread, vmax=1.0 + spread)
    image = ax.imshow(values, cmap=CMAP, aspect="auto", norm=norm)
    fig.colorbar(image, ax=ax, label="speedup (x)")
    for i, row in enumerate(m.rows):
        for j, col in enumerate(m.cols):
            cell = m.cells.get((row, col))
            colour = "black"
            if cell is None or cell.speedup is None:
                text = fmt.NA + (f"\n{cell.reason_code}" if cell else "\nnot measured")
            else:
                s = cell.speedup
                # the speedup_text format, its bracket on a line of its own to fit the cell
                estimate, _, interval = fmt.speedup_range(s.estimate, s.low, s.high).partition(" ")
                outcome = cell.verdict if cell.verdict != "reject" else cell.reason_code
                star = "*" if cell.beyond_noise else ""
                text = "\n".join(part for part in (estimate + star, interval, outcome) if part)
                red, green, blue, _ = CMAP(norm(s.estimate))
                colour = "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"
                if cell.verdict != "adopt":
                    ax.add_patch(Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, edgecolor="black", linewidth=2.5,
                                           linestyle="solid" if cell.verdict == "reject" else "dashed"))
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
    ax.set_xticks(range(len(m.cols)), m.cols)
    ax.set_yticks(range(len(m.rows)), m.rows)
    ax.set_xlabel("load")
    ax.set_title(f"{m.arm}: SLO-qualified tokens/s vs baseline")
    return _png(fig)


def speedup_png(maps: Sequence[HeatMap]) -> str:
    """Speedup against load per prompt class, one line per arm, its interval as error bars, and the
    break-even (the speedup that saves a whole replica at the baseline's throughput: the same for
    every arm at a load) as a dashed line: above it speculation pays, below it it does not."""
    rows = maps[0].rows if maps else []
    fig, axes = _grid(max(len(rows), 1), 3, 4.6, 3.4)
    for ax, row in zip(axes, rows or ["(no decisions)"], strict=True):
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1, label="1.0 (no change)")
        even = {j: cell.break_even for m in maps for j, col in enumerate(m.cols)
                if (cell := m.cells.get((row, col))) and cell.break_even is not None}
        if even:
            ax.plot(*zip(*sorted(even.items()), strict=True), "k--", marker="_", markersize=14, linewidth=1,
                    label="break-even (a whole replica saved)")
        for n, m in enumerate(maps):
            x, y, err = [], [], []
            for j, col in enumerate(m.cols):
                s = (cell := m.cells.get((row, col))) and cell.speedup
                if s:
                    x.append(j + DODGE * (n - (len(maps) - 1) / 2))
                    y.append(s.estimate)
                    err.append((s.estimate - s.low if s.low is not None else 0.0,
                                s.high - s.estimate if s.high is not None else 0.0))
            if x:
                ax.errorbar(x, y, yerr=np.array(err).T, marker="o", capsize=3, label=m.arm)
        if maps:
            ax.set_xticks(range(len(maps[0].cols)), maps[0].cols)
        ax.set_title(row)
        ax.set_xlabel("load")
        ax.set_ylabel("speedup (x)")
        ax.legend(fontsize=7)
    return _png(fig)


def acceptance_png(rates: dict[str, dict[str, list[float]]]) -> str:
    """Share of drafts whose accepted prefix reached each position, per prompt class."""
    fig, axes = _grid(max(len(rates), 1), 3, 4.6, 3.2)
    for ax, (pc, per_arm) in zip(axes, list(rates.items()) or [("(no telemetry)", {})], strict=True):
        for arm, values in per_arm.items():
            ax.plot(range(1, len(values) + 1), values, marker="o", label=arm)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 1.02)
        ax.set_title(pc)
        ax.set_xlabel("draft position")
        ax.set_ylabel("accepted / drafts")
        ax.legend(fontsize=7)
    return _png(fig)


def latency_png(pairs: Sequence[tuple[LatencyCurve, LatencyCurve]]) -> str:
    """p50/p95/p99 against load per arm, TTFT and ITL, with the SLO target as a red line."""
    fig, axes = _grid(2 * max(len(pairs), 1), 2, 4.8, 2.9)
    for ax, curve in zip(axes, [c for pair in pairs for c in pair], strict=False):
        for p in PERCENTILES:
            points = [(i, v) for i, v in enumerate(curve.values_ms[p]) if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), PERCENTILE_STYLE[p], marker="o", label=p)
        ax.axhline(curve.slo_ms, color="tab:red", linewidth=1.2, label=f"SLO {curve.slo_ms:g} ms")
        ax.set_xticks(range(len(curve.loads)), curve.loads)
        ax.set_title(f"{curve.arm}: {curve.series}")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    return _png(fig)


def kv_png(rows: Sequence[KVRow]) -> str | None:
    """KV pool tokens per arm; None when no arm exposed the figure."""
    measured = [r for r in rows if r.tokens is not None]
    if not measured:
        return None
    fig = Figure(figsize=(1.6 + 1.1 * len(measured), 3.2), layout="constrained")
    ax = fig.subplots()
    bars = ax.bar([r.arm for r in measured], [r.tokens or 0 for r in measured], color="tab:blue")
    labels = [f"{r.tokens:,}" + (f"\n-{r.draft_cost:.1%}" if r.draft_cost is not None else "") for r in measured]
    ax.bar_label(bars, labels, fontsize=8)
    ax.set_ylabel("KV cache tokens")
    ax.set_title("KV cache tokens per arm (share lost to the draft)")
    ax.tick_params(axis="x", labelrotation=30)
    return _png(fig)


def energy_png(rows: Sequence[EnergyRow]) -> str | None:
    """Joules per SLO-qualified token against load per arm; None when nothing was measured."""
    measured = [r for r in rows if r.j_per_qualified_token is not None]
    if not measured:
        return None
    loads = list(dict.fromkeys(r.load for r in rows))
    fig = Figure(figsize=(5.5, 3.4), layout="constrained")
    ax = fig.subplots()
    for arm in dict.fromkeys(r.arm for r in measured):
        points = [(loads.index(r.load), r.j_per_qualified_token) for r in measured if r.arm == arm]
        ax.plot(*zip(*points, strict=True), marker="o", label=arm)
    ax.set_xticks(range(len(loads)), loads)
    ax.set_ylabel("J per SLO-qualified token")
    ax.set_title("Energy per SLO-qualified accepted token")
    ax.legend(fontsize=7)
    return _png(fig)


def theory_png(rows: Sequence[TheoryRow], ks: Sequence[int], draft_cost_ratio: float) -> str:
    """Modelled S(alpha) for each k (dashed) beside the measured speedup at the implied alpha."""
    fig = Figure(figsize=(6.8, 4.2), layout="constrained")
    ax = fig.subplots()
    alphas = np.linspace(0.0, 1.0, 101)
    colours = {k: f"C{i}" for i, k in enumerate(ks)}
    for k in ks:
        modelled = [net_speedup(ModelledAlpha(float(a)), k, draft_cost_ratio) for a in alphas]
        ax.plot(alphas, modelled, "--", color=colours[k], label=f"modelled k={k}, c={draft_cost_ratio:g}")
    labelled: set[int] = set()
    for r in rows:
        if r.implied_alpha is not None and r.measured is not None:
            m = r.measured
            err = [[m.estimate - m.low if m.low is not None else 0.0],
                   [m.high - m.estimate if m.high is not None else 0.0]]
            ax.errorbar([r.implied_alpha], [m.estimate], yerr=err, fmt="o", color=colours[r.k], capsize=3,
                        label=None if r.k in labelled else f"measured k={r.k}")
            labelled.add(r.k)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xlabel("implied alpha (model), from the measured tokens per step over all steps")
    ax.set_ylabel("speedup (x)")
    ax.set_title("Modelled speedup (lines) vs measured qualified speedup (points)")
    ax.legend(fontsize=7)
    return _png(fig)


MEASURED_COLOUR, PREDICTED_COLOUR = "black", "tab:blue"
PREDICTED_HEADER_IN = 0.95  # room above the panels for the title and the legend
PREDICTED_LEGEND = [
    Line2D([], [], color=MEASURED_COLOUR, marker="o", linestyle="none", label="measured cell, 95 % bootstrap interval"),
    Line2D([], [], color=PREDICTED_COLOUR, linestyle="--", marker="o", label=PREDICTED_LABEL),
    Patch(color=PREDICTED_COLOUR, alpha=0.2, label=f"{PREDICTED_LABEL}: interval"),
    Line2D([], [], color=PREDICTED_COLOUR, linestyle="none", marker="o", markerfacecolor="white", markersize=8,
           label=f"{PREDICTED_LABEL}: extrapolating"),
]


def _predicted_panel(ax: Axes, curve: PredictedCurve) -> None:
    """Measured cells as points with error bars; the predicted curve dashed, its interval shaded,
    its extrapolated points hollow."""
    by_k = curve.across == "k"
    x = [float(p.k or 0) if by_k else p.load_value for p in curve.predicted]
    y = [np.nan if p.qualified_tokens_per_s is None else p.qualified_tokens_per_s for p in curve.predicted]
    bounds = [p.interval.qualified_tokens_per_s for p in curve.predicted]
    low = [np.nan if b.low is None else b.low for b in bounds]
    high = [np.nan if b.high is None else b.high for b in bounds]
    ax.fill_between(x, low, high, color=PREDICTED_COLOUR, alpha=0.2, linewidth=0)
    ax.plot(x, y, "--", color=PREDICTED_COLOUR, linewidth=1.4)
    for xi, yi, p in zip(x, y, curve.predicted, strict=True):
        ax.plot([xi], [yi], "o", color=PREDICTED_COLOUR, markersize=8 if p.extrapolates else 4,
                markerfacecolor="white" if p.extrapolates else PREDICTED_COLOUR)
    for m in curve.measured:
        t = m.qualified_tokens_per_s
        err = [[t.estimate - t.low if t.low is not None else 0.0], [t.high - t.estimate if t.high is not None else 0.0]]
        mx = float(m.identity.num_speculative_tokens) if by_k else m.identity.load_value
        ax.errorbar([mx], [t.estimate], yerr=err, fmt="o", color=MEASURED_COLOUR, capsize=3, markersize=4)
    if not by_k:
        ax.set_xscale("log", base=2)
    ax.set_xticks(x, [f"{v:g}" for v in x])
    ax.set_ylim(bottom=0)
    ax.set_title(curve.title, fontsize=9)
    ax.set_xlabel("k (speculative tokens per step)" if by_k else "concurrency")
    ax.set_ylabel("SLO-qualified tok/s per replica\n(points measured, dashed predicted)", fontsize=7)


def predicted_png(curves: Sequence[PredictedCurve], across: str) -> str | None:
    """One panel per curve: measured cells beside the curve predicted by the performance model
    calibrated on this sweep; None without curves."""
    if not curves:
        return None
    fig, axes = _grid(len(curves), 4, 3.6, 2.9)
    width_in, height_in = fig.get_size_inches()
    total_in = height_in + PREDICTED_HEADER_IN
    fig.set_size_inches(width_in, total_in)
    fig.subplots_adjust(top=1 - (PREDICTED_HEADER_IN + 0.35) / total_in, bottom=0.5 / total_in)
    for ax, curve in zip(axes, curves, strict=True):
        _predicted_panel(ax, curve)
    fig.suptitle(f"Measured cells and {PREDICTED_LABEL}, across {across}", y=1 - 0.08 / total_in, va="top",
                 fontsize=10)
    fig.legend(handles=PREDICTED_LEGEND, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.35 / total_in), ncol=2,
               fontsize=7, frameon=False)
    return _png(fig)
