"""Held-out scored sets: parsing, and errors of one line naming file, line and field."""

import json

import pytest

from specfleet.contract.prompts import PromptItem
from specfleet.errors import InputError
from specfleet.gates.scored_set import ChatTurn, ScoredItem, parse_scored_set, score_answers

FINE = '{"id": "ok", "prompt": "2+2=", "reference": 4, "scorer": "numeric"}'


def _line(**fields: object) -> str:
    return json.dumps({"id": "q", "prompt": "Say hi", "reference": "hi", "scorer": "exact", **fields})


def test_items_of_every_scorer_parse() -> None:
    text = "\n".join([
        FINE,
        "",
        '{"id": "chat", "messages": [{"role": "user", "content": "Hi"}], "reference": "hello", '
        '"scorer": "contains", "max_tokens": 8}',
        '{"id": "re", "prompt": "x", "reference": "Paris", "scorer": "regex", "pattern": "(?i)answer: (\\\\w+)"}',
        '{"id": "js", "prompt": "x", "reference": {"a": 1, "b": [2]}, "scorer": "json_fields", "fields": ["a"]}',
        '{"id": "num", "prompt": "x", "reference": 2.5, "scorer": "numeric", "tolerance": 0.1}',
    ])
    items = parse_scored_set(text, "s.jsonl")
    assert [i.id for i in items] == ["ok", "chat", "re", "js", "num"]
    assert items[0] == ScoredItem(id="ok", prompt="2+2=", reference=4, scorer="numeric")
    assert items[1].messages == [ChatTurn(role="user", content="Hi")]
    assert items[2].pattern == "(?i)answer: (\\w+)"
    assert items[3].fields == ["a"] and items[4].tolerance == 0.1


def test_an_item_is_a_prompt_for_the_load_client() -> None:
    chat, plain = parse_scored_set(
        '{"id": "c", "messages": [{"role": "user", "content": "Hi"}], "reference": "x", "scorer": "exact"}\n'
        + _line(max_tokens=5), "s.jsonl")
    assert chat.as_prompt() == PromptItem(id="c", messages=[{"role": "user", "content": "Hi"}])
    assert plain.as_prompt() == PromptItem(id="q", prompt="Say hi", max_tokens=5)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"id": "a", "prompt": "x"', r"^s\.jsonl:2: \(top level\): not valid JSON \("),
        ('["x"]', r"^s\.jsonl:2: \(top level\): expected a JSON object .* got list$"),
        (_line(scorer="bleu"), r"^s\.jsonl:2: scorer: unknown scorer \(known: exact, contains, .*\) \(got 'bleu'\)$"),
        ('{"id": "q", "prompt": "x", "scorer": "exact"}', r"^s\.jsonl:2: reference: Field required$"),
        ('{"id": "q", "reference": "x", "scorer": "exact"}', r"^s\.jsonl:2: prompt: give exactly one of prompt"),
        (_line(messages=[{"role": "user", "content": "x"}]), r"^s\.jsonl:2: prompt: give exactly one of"),
        (_line(messages=[{"role": "user"}], prompt=None), r"^s\.jsonl:2: messages\[0\]\.content: Field required"),
        ('{"prompt": "x", "reference": "x", "scorer": "exact"}', r"^s\.jsonl:2: id: Field required$"),
        (_line(id=7), r"^s\.jsonl:2: id: Input should be a valid string \(got 7\)$"),
        (_line(reference="  "), r"^s\.jsonl:2: reference: exact needs a non-empty string"),
        (_line(scorer="json_fields"), r"^s\.jsonl:2: reference: json_fields needs a non-empty JSON object"),
        (_line(scorer="numeric", reference="4"), r"^s\.jsonl:2: reference: numeric needs a finite JSON number"),
        (_line(scorer="numeric", reference=True), r"reference: numeric needs a finite JSON number"),
        (_line(scorer="numeric", reference=10**400), r"reference: numeric needs a finite JSON number"),
        (_line(scorer="regex", reference="("), r"^s\.jsonl:2: reference: not a valid regular expression"),
        (_line(scorer="regex", pattern="[a"), r"^s\.jsonl:2: pattern: not a valid regular expression"),
        (_line(pattern="x"), r"^s\.jsonl:2: pattern: a parameter of the regex scorer, not of exact"),
        (_line(tolerance=0.1), r"^s\.jsonl:2: tolerance: a parameter of the numeric scorer, not of exact"),
        (_line(scorer="numeric", reference=1, tolerance=-1), r"^s\.jsonl:2: tolerance: .*greater than or equal"),
        (_line(scorer="json_fields", reference={"a": 1}, fields=["a", "b"]),
         r"^s\.jsonl:2: fields: 'b' not a key of the reference"),
        (_line(scorer="json_fields", reference={"a": 1}, fields=[]), r"^s\.jsonl:2: fields: List should have"),
        (_line(max_tokens=0), r"^s\.jsonl:2: max_tokens: Input should be greater than 0"),
        (_line(answer="hi"), r"^s\.jsonl:2: answer: unknown key \(check the spelling; an item's keys are id, "),
    ],
)
def test_a_bad_line_names_file_line_and_field(line: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected) as caught:
        parse_scored_set(FINE + "\n" + line, "s.jsonl")
    assert "\n" not in str(caught.value)


def test_duplicate_ids_and_empty_files_are_rejected() -> None:
    with pytest.raises(InputError, match=r"^s\.jsonl:3: id: 'q' is already the id on line 1$"):
        parse_scored_set(_line() + "\n\n" + _line(), "s.jsonl")
    with pytest.raises(InputError, match=r"^s\.jsonl: no scored items \(expected one JSON object per line"):
        parse_scored_set("\n  \n", "s.jsonl")


def test_answers_are_scored_per_item_and_a_missing_answer_is_none_not_zero() -> None:
    items = parse_scored_set(_line(id="a") + "\n" + _line(id="b") + "\n" + _line(id="c"), "s.jsonl")
    assert score_answers(items, {"a": " hi\n", "b": "bye", "c": None}) == {"a": 1.0, "b": 0.0, "c": None}
    assert score_answers(items, {})["a"] is None
    with pytest.raises(InputError, match="not in the scored set: z"):
        score_answers(items, {"a": "hi", "z": "hi"})
