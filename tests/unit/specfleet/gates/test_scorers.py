"""The quality gate's scorers: scores in [0, 1], and a malformed answer scores 0 without raising."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from specfleet.gates.scored_set import ScoredItem
from specfleet.gates.scorers import SCORERS, first_json_object


def _item(scorer: str, reference: JsonValue, **params: object) -> ScoredItem:
    return ScoredItem.model_validate({"id": "q", "prompt": "x", "scorer": scorer, "reference": reference, **params})


@pytest.mark.parametrize(
    ("item", "answer", "score"),
    [
        (_item("exact", "Paris"), "  Paris\n", 1.0),
        (_item("exact", "Paris"), "Paris.", 0.0),
        (_item("contains", "Paris"), "The capital is Paris.", 1.0),
        (_item("contains", "Paris"), "the capital is paris", 0.0),
        (_item("regex", r"\bPar(is)?\b"), "It is Paris", 1.0),
        (_item("regex", r"^Paris$"), "It is Paris", 0.0),
        (_item("regex", "Paris", pattern=r"(?i)answer:\s*(\w+)"), "ANSWER: Paris!", 1.0),
        (_item("regex", "Paris", pattern=r"(?i)answer:\s*(\w+)"), "answer: Rome", 0.0),
        (_item("regex", "Paris", pattern=r"answer:(\s*x)?"), "answer: Paris", 0.0),  # group 1 did not match
        (_item("regex", "answer: Paris", pattern=r"answer: \w+"), "so answer: Paris", 1.0),  # whole match
        (_item("json_fields", {"name": "Ada", "year": 1815}), 'Here: {"name": "Ada", "year": 1815.0}', 1.0),
        (_item("json_fields", {"name": "Ada", "year": 1815}), '{"name": "Ada", "year": 1816} {"year": 1815}', 0.5),
        (_item("json_fields", {"name": "Ada", "year": 1815}, fields=["year"]), '{"name": "Bob", "year": 1815}', 1.0),
        (_item("json_fields", {"name": "Ada"}), 'bad {"name": } then {"name": "Ada"}', 1.0),
        (_item("json_fields", {"name": "Ada"}), '{"name": "Ada"', 0.0),
        (_item("json_fields", {"name": "Ada"}), "[1, 2]", 0.0),
        (_item("numeric", 42), "The answer is 42.", 1.0),
        (_item("numeric", 42), "41 or 42", 0.0),  # the first number counts
        (_item("numeric", 1234.5), "about 1,234.5 units", 1.0),
        (_item("numeric", -0.5), "x = -.5", 1.0),
        (_item("numeric", 3.0), "3.04", 0.0),
        (_item("numeric", 3.0, tolerance=0.05), "3.04", 1.0),
        (_item("numeric", 1e300), "1e999", 0.0),  # overflows to infinity: not a usable number
        (_item("numeric", 1), "no number here", 0.0),
    ],
)
def test_scores(item: ScoredItem, answer: str, score: float) -> None:
    assert item.score(answer) == score


def test_first_json_object_survives_deep_nesting_and_long_integers() -> None:
    assert first_json_object("{" + '"a":[' * 100_000) is None
    assert first_json_object('{"n": ' + "9" * 5000 + "}") is None
    assert first_json_object('x {"a": {"b": 1}} y') == {"a": {"b": 1}}


ITEMS = [_item("exact", "a"), _item("contains", "a"), _item("regex", "a+"), _item("regex", "a", pattern="(a)"),
         _item("json_fields", {"a": 1, "b": "x"}), _item("numeric", 1.5, tolerance=0.5)]


@given(answer=st.text(max_size=80) | st.from_regex(r"\{.*\}|[-+.,\deE]+", fullmatch=False))
def test_any_answer_scores_in_0_1_without_raising(answer: str) -> None:
    assert {item.scorer for item in ITEMS} == set(SCORERS)
    assert all(0.0 <= item.score(answer) <= 1.0 for item in ITEMS)
