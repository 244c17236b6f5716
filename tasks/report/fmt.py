"""Number formats shared by every text specfleet shows (HTML and markdown reports, the sweep summary,
the CLI tables). A missing figure prints as ``NA``, defined once here."""

import json

from specfleet.stats.bootstrap import Interval, speedup_text

NA = "n/a"


def num(value: float | int | None, spec: str = ".2f") -> str:
    return NA if value is None else f"{value:{spec}}"


def pct(value: float | None, signed: bool = True) -> str:
    return NA if value is None else f"{value:{'+' if signed else ''}.1%}"


def speedup(interval: Interval | None) -> str:
    """The speedup and its interval; an interval that states no confidence (request-level spread
    only: no run-to-run estimate) says so."""
    if interval is None:
        return NA
    text = speedup_range(interval.estimate, interval.low, interval.high)
    return text if interval.confidence is not None else f"{text} (request spread only, no stated confidence)"


def speedup_range(estimate: float | None, low: float | None, high: float | None) -> str:
    """``1.23x [1.10, 1.35]``; the bracket is left out when the interval could not be formed."""
    return NA if estimate is None else speedup_text(estimate, low, high)


def num_range(value: float | None, low: float | None, high: float | None, spec: str = ",.1f") -> str:
    """``674.2 [518.9, 932.9]``; the bracket is left out when either end is missing."""
    if value is None:
        return NA
    return f"{value:{spec}}" if low is None or high is None else f"{value:{spec}} [{low:{spec}}, {high:{spec}}]"


def difference(interval: Interval | None) -> str:
    """A score difference with its interval: ``-0.050 [-0.120, +0.000]``."""
    if interval is None:
        return NA
    bracket = "" if interval.low is None or interval.high is None else f" [{interval.low:+.3f}, {interval.high:+.3f}]"
    return f"{interval.estimate:+.3f}{bracket}"


def saving_range(low: float | None, high: float | None) -> str:
    return NA if low is None and high is None else f"[{pct(low)}, {pct(high)}]"


def config_json(config: dict[str, object] | None) -> str:
    """Valid JSON, one key a line with each value compact (a batch-size schedule stays on one line)."""
    if config is None:
        return NA
    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(config.items())) + "\n}"
