"""Prompt files: JSONL and ShareGPT parsing, and errors that name the file, line and expectation."""

import json

import pytest

from specfleet.contract.prompts import PromptItem, parse_prompts_jsonl, parse_sharegpt
from specfleet.errors import InputError


def test_jsonl_prompts_and_messages() -> None:
    text = "\n".join([
        '{"id": "a", "prompt": "Hello", "max_tokens": 8}',
        "",
        '{"messages": [{"role": "user", "content": "Hi"}]}',
        '{"id": 7, "prompt": "x", "category": "ignored"}',
    ])
    assert parse_prompts_jsonl(text, "p.jsonl") == [
        PromptItem(id="a", prompt="Hello", max_tokens=8),
        PromptItem(id="3", messages=[{"role": "user", "content": "Hi"}]),  # id defaults to the line
        PromptItem(id="7", prompt="x"),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"id": "a", "prompt": "x"', r"p\.jsonl:2: not valid JSON .*expected one object per line"),
        ('["x"]', r"p\.jsonl:2: expected a JSON object .* got list"),
        ('{"id": "b"}', r"p\.jsonl:2: expected exactly one of 'prompt' .* or 'messages'"),
        ('{"prompt": "x", "messages": []}', r"p\.jsonl:2: expected exactly one of"),
        ('{"prompt": ""}', r"p\.jsonl:2: 'prompt' must be a non-empty string"),
        ('{"messages": [{"role": "user"}]}', r"p\.jsonl:2: messages\[0\] must be \{'role': str"),
        ('{"messages": "hi"}', r"p\.jsonl:2: 'messages' must be a non-empty list"),
        ('{"prompt": "x", "max_tokens": 0}', r"p\.jsonl:2: 'max_tokens' must be .* \(got 0\)"),
        ('{"prompt": "x", "max_tokens": true}', r"p\.jsonl:2: 'max_tokens' must be a positive integer"),
        ('{"id": [1], "prompt": "x"}', r"p\.jsonl:2: 'id' must be a non-empty string or an integer"),
    ],
)
def test_jsonl_errors_name_file_line_and_expectation(line: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected):
        parse_prompts_jsonl('{"prompt": "fine"}\n' + line, "p.jsonl")


def test_jsonl_rejects_duplicate_ids_and_empty_files() -> None:
    with pytest.raises(InputError, match=r"p\.jsonl: prompt id 'a' appears twice"):
        parse_prompts_jsonl('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}', "p.jsonl")
    with pytest.raises(InputError, match=r"p\.jsonl: no prompts found"):
        parse_prompts_jsonl("\n  \n", "p.jsonl")


def _conversation(id_: str, *turns: tuple[str, str]) -> dict[str, object]:
    return {"id": id_, "conversations": [{"from": who, "value": text} for who, text in turns]}


def test_sharegpt_keeps_turns_up_to_the_last_human_one() -> None:
    data = [
        _conversation("c1", ("system", "Be brief."), ("human", "Q1"), ("gpt", "A1"),
                      ("human", "Q2"), ("gpt", "A2")),
        _conversation("c2", ("gpt", "orphan answer")),  # no human turn: skipped
        _conversation("c3", ("human", "Only")),
    ]
    items = parse_sharegpt(json.dumps(data), "sg.json")
    assert [item.id for item in items] == ["c1", "c3"]
    assert items[0].messages == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"},
    ]
    assert items[0].prompt is None
    assert items[1].messages == [{"role": "user", "content": "Only"}]


def test_sharegpt_as_jsonl_names_lines() -> None:
    text = json.dumps(_conversation("a", ("human", "hi"))) + "\n" + '{"conversations": [{"from": "alien"}]}'
    with pytest.raises(InputError, match=r"sg\.jsonl:2: conversations\[0\] must be \{'from': one of"):
        parse_sharegpt(text, "sg.jsonl")
    assert parse_sharegpt(text.splitlines()[0], "sg.jsonl")[0].id == "a"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"id": "a",\n "conversations": [}]', r"sg\.json:2: not valid JSON"),
        ('[{"id": "a"}]', r"sg\.json: entry \[0\]: expected \{'id': \.\.\., 'conversations'"),
        ('[{"conversations": [{"from": "human", "value": 3}]}]', r"entry \[0\]: conversations\[0\]"),
        ('[{"conversations": [{"from": "gpt", "value": "x"}]}]', r"sg\.json: no prompts found"),
    ],
)
def test_sharegpt_errors(text: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected):
        parse_sharegpt(text, "sg.json")
