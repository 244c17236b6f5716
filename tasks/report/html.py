"""The self-contained HTML report: one Jinja2 template, figures inlined as base64 PNG,
styles inline, nothing fetched when the file is opened. Its sections of the sweep's report come first,
in the one order (``specfleet_tasks.report.sections``), then the figures."""

from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from specfleet.contract import load_label
from specfleet.verdicts.table import DecisionRow
from specfleet_tasks.report import fmt, plots
from specfleet_tasks.report.content import ReportContent
from specfleet_tasks.report.headline import (
    INCONCLUSIVE_TITLE,
    MIX_CLASS_COLUMNS,
    MIX_COLUMNS,
    MIX_TITLE,
    class_figures,
    look_lines,
    mix_description,
    mix_verdict_lines,
    noise_lines,
)
from specfleet_tasks.report.predicted import MEASURED_COLUMNS, PREDICTED_COLUMNS, caption, table_title
from specfleet_tasks.report.sections import TITLES
from specfleet_tasks.report.tables import (
    ACCEPTANCE_CAPTION,
    ACCEPTANCE_COLUMNS,
    ACCEPTANCE_TITLE,
    NEGATIVE_COLUMNS,
    not_measured_line,
    not_measured_title,
)

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class Figures:
    heat_maps: list[tuple[str, str]]
    speedup: str
    acceptance: str
    latency: str
    kv: str | None
    energy: str | None
    theory: str
    predicted_concurrency: str | None
    predicted_k: str | None


def draw(content: ReportContent) -> Figures:
    view = content.predicted
    return Figures(
        heat_maps=[(m.arm, plots.heat_map_png(m, plots.heat_spread(content.maps))) for m in content.maps],
        speedup=plots.speedup_png(content.maps),
        acceptance=plots.acceptance_png(content.acceptance),
        latency=plots.latency_png(content.latency),
        kv=plots.kv_png(content.kv),
        energy=plots.energy_png(content.energy),
        theory=plots.theory_png(content.theory, content.grid_ks, content.draft_cost_ratio),
        predicted_concurrency=plots.predicted_png(view.across_concurrency, "concurrency") if view else None,
        predicted_k=plots.predicted_png(view.across_k, "k") if view else None,
    )


def _negative_cells(row: DecisionRow) -> list[str]:
    """A negative cell's row as the markdown files show it (``tables.NEGATIVE_COLUMNS``)."""
    return [render(row) for _, render in NEGATIVE_COLUMNS]


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("specfleet_tasks.report", "templates"), autoescape=select_autoescape(["j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=fmt.num, pct=fmt.pct, speedup=fmt.speedup, config_json=fmt.config_json,
                       saving_range=fmt.saving_range, difference=fmt.difference, not_measured=not_measured_line)
    env.globals.update(load_label=load_label, negative_columns=[name for name, _ in NEGATIVE_COLUMNS],
                       negative_cells=_negative_cells, zip=zip, na=fmt.NA, mix_title=MIX_TITLE,
                       inconclusive_title=INCONCLUSIVE_TITLE, titles=TITLES,
                       mix_description=mix_description, mix_verdict_lines=mix_verdict_lines, noise_lines=noise_lines,
                       look_lines=look_lines,
                       mix_columns=MIX_COLUMNS, mix_class_columns=MIX_CLASS_COLUMNS, class_figures=class_figures,
                       not_measured_title=not_measured_title, predicted_caption=caption,
                       predicted_title=table_title, measured_columns=MEASURED_COLUMNS,
                       predicted_columns=PREDICTED_COLUMNS, acceptance_title=ACCEPTANCE_TITLE,
                       acceptance_caption=ACCEPTANCE_CAPTION, acceptance_columns=ACCEPTANCE_COLUMNS)
    return env


def render_html(content: ReportContent) -> str:
    return _environment().get_template(TEMPLATE).render(c=content, d=content.report, sweep=content.sweep,
                                                                fig=draw(content))
