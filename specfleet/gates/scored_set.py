"""Held-out scored sets of the quality gate, parsed from JSONL (pure: the caller reads the file).

Seed, "An equivalence test that survives numerics": "Add a held-out task-quality gate for both
lossless and lossy methods." One JSON object per line: an ``id``, the ``prompt`` or chat
``messages``, a ``reference``, a ``scorer`` from ``specfleet.gates.scorers.SCORERS`` and that scorer's
optional parameter (``fields``, ``pattern`` or ``tolerance``). Every error is an ``InputError``
of one line, ``file:line: field: what is wrong``.
"""

import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field, JsonValue, PositiveInt, ValidationError, ValidationInfo, field_validator

from specfleet.contract.base import ContractModel
from specfleet.contract.loading import format_validation_error
from specfleet.contract.prompts import PromptItem
from specfleet.errors import InputError
from specfleet.gates.scorers import SCORERS

PARAMETER_OF: dict[str, str] = {"fields": "json_fields", "pattern": "regex", "tolerance": "numeric"}
"""Each scorer parameter and the one scorer that reads it."""

FLOAT_MAX = sys.float_info.max  # a larger JSON integer, or NaN or infinity, is not a usable number
SHAPE = '{"id": "q1", "prompt": "...", "reference": "...", "scorer": "exact"}'


class ChatTurn(ContractModel):
    """One message of a scored item's chat ``messages``."""

    role: str = Field(min_length=1)
    content: str


class ScoredItem(ContractModel):
    """One held-out item: what to ask, the reference answer, and how to score an answer.

    Field order matters: each check reads the fields declared before it.
    """

    id: str = Field(min_length=1, description="Unique in its file; pairs the baseline's and candidate's scores.")
    scorer: str = Field(description="A name in specfleet.gates.scorers.SCORERS.")
    messages: list[ChatTurn] | None = Field(None, min_length=1, description="For /v1/chat/completions.")
    prompt: str | None = Field(
        None, min_length=1, validate_default=True, description="For /v1/completions: give this or messages."
    )
    max_tokens: PositiveInt | None = Field(None, description="Output cap; default the prompt class's.")
    pattern: str | None = Field(None, description="regex: extracts the answer (see "
                                "specfleet.gates.scorers.score_regex).")
    tolerance: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="numeric: largest absolute difference that scores 1 (default 0)."
    )
    reference: JsonValue = Field(
        description="A string for exact, contains and regex; a JSON object for json_fields; a number for numeric."
    )
    fields: list[str] | None = Field(
        None, min_length=1, description="json_fields: the keys compared (default: every key of the reference)."
    )

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, name: str) -> str:
        if name not in SCORERS:
            raise ValueError(f"unknown scorer (known: {', '.join(SCORERS)})")
        return name

    @field_validator("prompt")
    @classmethod
    def _prompt_or_messages(cls, prompt: str | None, info: ValidationInfo) -> str | None:
        if "messages" in info.data and (prompt is None) == (info.data["messages"] is None):
            raise ValueError("give exactly one of prompt (a string) or messages (a list of {role, content})")
        return prompt

    @field_validator("pattern", "tolerance", "fields")
    @classmethod
    def _parameter_of_the_scorer(cls, value: object, info: ValidationInfo) -> object:
        owner, scorer = PARAMETER_OF[str(info.field_name)], info.data.get("scorer")
        if value is not None and scorer is not None and scorer != owner:
            raise ValueError(f"a parameter of the {owner} scorer, not of {scorer}")
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str | None) -> str | None:
        return None if pattern is None else _compiled(pattern)

    @field_validator("reference")
    @classmethod
    def _reference_fits_the_scorer(cls, reference: JsonValue, info: ValidationInfo) -> JsonValue:
        scorer = info.data.get("scorer")
        if scorer == "json_fields":
            if not (isinstance(reference, dict) and reference):
                raise ValueError("json_fields needs a non-empty JSON object")
        elif scorer == "numeric":
            if isinstance(reference, bool) or not (isinstance(reference, int | float) and abs(reference) <= FLOAT_MAX):
                raise ValueError("numeric needs a finite JSON number")
        elif scorer is not None:
            if not (isinstance(reference, str) and reference.strip()):
                raise ValueError(f"{scorer} needs a non-empty string")
            if scorer == "regex" and "pattern" in info.data and info.data["pattern"] is None:
                _compiled(reference)
        return reference

    @field_validator("fields")
    @classmethod
    def _fields_in_the_reference(cls, fields: list[str] | None, info: ValidationInfo) -> list[str] | None:
        reference = info.data.get("reference")
        missing = [name for name in fields or [] if isinstance(reference, dict) and name not in reference]
        if missing:
            raise ValueError(f"{', '.join(map(repr, missing))} not a key of the reference")
        return fields

    def score(self, answer: str) -> float:
        """This item's scorer on ``answer``: in [0, 1], 0 for a malformed answer."""
        return SCORERS[self.scorer](answer, self)

    def as_prompt(self) -> PromptItem:
        """The request to generate this item's answer, as the load client sends any prompt."""
        messages = [{"role": t.role, "content": t.content} for t in self.messages] if self.messages else None
        return PromptItem(id=self.id, prompt=self.prompt, messages=messages, max_tokens=self.max_tokens)


def _compiled(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as err:
        raise ValueError(f"not a valid regular expression ({err})") from None
    return pattern


def parse_scored_set(text: str, source: str) -> list[ScoredItem]:
    """One JSON object per non-blank line of ``text`` (named ``source`` in messages); ids unique."""
    items: list[ScoredItem] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        item = _item(line, f"{source}:{lineno}")
        if item.id in first_line:
            raise InputError(f"{source}:{lineno}: id: {item.id!r} is already the id on line {first_line[item.id]}")
        first_line[item.id] = lineno
        items.append(item)
    if not items:
        raise InputError(f"{source}: no scored items (expected one JSON object per line like {SHAPE})")
    return items


@dataclass(frozen=True)
class ScoredSet:
    """One prompt class's scored set as a sweep uses it: its file, the file's digest, its items."""

    source: str
    sha256: str
    """Of the file's text: answers stored by two arms are compared only when both answered the same set."""
    items: list[ScoredItem]

    @classmethod
    def parse(cls, text: str, source: str) -> "ScoredSet":
        return cls(source, hashlib.sha256(text.encode()).hexdigest(), parse_scored_set(text, source))


def _item(line: str, where: str) -> ScoredItem:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: (top level): not valid JSON ({err.msg}, column {err.colno})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: (top level): expected a JSON object like {SHAPE}, got {type(obj).__name__}")
    try:
        return ScoredItem.model_validate(obj)
    except ValidationError as err:
        keys = f"an item's keys are {', '.join(ScoredItem.model_fields)}"
        raise InputError(format_validation_error(err, where, schema=keys)) from None


def score_answers(items: Sequence[ScoredItem], answers: Mapping[str, str | None]) -> dict[str, float | None]:
    """Each item's score by id; None where the arm gave no answer (the gate names it, never scores 0)."""
    unknown = sorted(set(answers) - {item.id for item in items})
    if unknown:
        raise InputError(f"answers for ids that are not in the scored set: {', '.join(unknown)}")
    return {item.id: None if (answer := answers.get(item.id)) is None else item.score(answer) for item in items}
