"""Scorers of the held-out quality gate: one answer against one item's reference, a score in [0, 1].

Seed, "An equivalence test that survives numerics": "Add a held-out task-quality gate for both
lossless and lossy methods." A malformed answer scores 0: a scorer never raises on an answer.
The item's reference and parameters were checked for its scorer when the set was parsed
(``specfleet.gates.scored_set``), which is why the scorers cast the reference to its type.
"""

import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from pydantic import JsonValue

if TYPE_CHECKING:
    from specfleet.gates.scored_set import ScoredItem

Scorer = Callable[[str, "ScoredItem"], float]

# The first number: an optional sign, digits (commas between groups of three are dropped),
# an optional fraction and exponent. "1,234.5" reads 1234.5; "1, 2" reads 1.
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?")


def score_exact(answer: str, item: "ScoredItem") -> float:
    """1 when the answer equals the reference, both stripped of surrounding whitespace."""
    return float(answer.strip() == cast(str, item.reference).strip())


def score_contains(answer: str, item: "ScoredItem") -> float:
    """1 when the reference appears anywhere in the answer (case and whitespace as given)."""
    return float(cast(str, item.reference) in answer)


def score_regex(answer: str, item: "ScoredItem") -> float:
    """Without ``pattern``: 1 when the reference, read as a pattern, matches anywhere in the answer.

    With ``pattern``: its first match in the answer extracts the answer (group 1 when the
    pattern has a group, else the whole match); 1 when that, stripped, equals the reference.
    Python ``re`` syntax; flags inline, e.g. ``(?i)``.
    """
    reference = cast(str, item.reference)
    if item.pattern is None:
        return float(re.search(reference, answer) is not None)
    found = re.search(item.pattern, answer)
    if found is None:
        return 0.0
    extracted = found.group(1) if found.re.groups else found.group(0)
    return float(extracted is not None and extracted.strip() == reference.strip())


def score_json_fields(answer: str, item: "ScoredItem") -> float:
    """The fraction of ``fields`` (default: every key of the reference object) whose value in
    the answer's first JSON object equals the reference's (Python ``==`` on the parsed values)."""
    reference = cast(dict[str, JsonValue], item.reference)
    names = item.fields or list(reference)
    found = first_json_object(answer)
    if found is None:
        return 0.0
    return sum(name in found and found[name] == reference[name] for name in names) / len(names)


def score_numeric(answer: str, item: "ScoredItem") -> float:
    """1 when the first number in the answer is within ``tolerance`` (absolute; default 0,
    exact) of the reference."""
    found = NUMBER.search(answer)
    if found is None:
        return 0.0
    value = float(found.group().replace(",", ""))
    reference = cast(float, item.reference)
    tolerance = 0.0 if item.tolerance is None else item.tolerance  # exact unless the item allows more
    return float(math.isfinite(value) and abs(value - reference) <= tolerance)


def first_json_object(text: str) -> dict[str, JsonValue] | None:
    """The first ``{...}`` in ``text`` that parses as a JSON object, or None."""
    decoder = json.JSONDecoder()
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)  # from a "{", a success is an object
        except (ValueError, RecursionError):  # malformed, an over-long integer, or nested too deep
            continue
        return cast(dict[str, JsonValue], value)
    return None


SCORERS: dict[str, Scorer] = {
    "exact": score_exact,
    "contains": score_contains,
    "regex": score_regex,
    "json_fields": score_json_fields,
    "numeric": score_numeric,
}
