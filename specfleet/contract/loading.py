"""Parse a YAML sweep config into a ``SweepConfig`` with errors that name the line and field."""

from typing import Any

import yaml
from pydantic import ValidationError

from specfleet.contract.sweep import SweepConfig
from specfleet.errors import InputError

Path_ = tuple[str | int, ...]


def parse_sweep_config(text: str, source: str) -> SweepConfig:
    """Safe-load ``text`` (named ``source`` in messages) and validate it as the contract."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(f"{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping of config sections at the top level")
    lines = _line_index(node)
    for index, arm in enumerate(data.get("arms") or []):
        if isinstance(arm, dict) and "policy_of" in arm:  # only a sweep's own policy stage sets it
            line = _nearest_line(lines, ("arms", index, "policy_of"))
            raise InputError(f"{source}:{line}: arms[{index}].policy_of: set by the sweep for a measured k policy "
                             "(policy.measure), never in a config")
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source, lines)) from None


SWEEP_SCHEMA = "see configs/demo-cpu.yaml for the schema"


def format_validation_error(
    err: ValidationError, source: str, lines: dict[Path_, int] | None = None, schema: str = SWEEP_SCHEMA
) -> str:
    """All errors on one line: ``file:line: field.path: what is wrong (got value)``.

    ``schema`` tells where the known keys are, after an unknown key.
    """
    parts = []
    for item in err.errors(include_url=False):
        loc = tuple(item["loc"])
        field = _dotted(loc) or "(top level)"
        line = _nearest_line(lines or {}, loc)
        where = f"{source}:{line}" if line else source
        got = f" (got {item['input']!r})" if item["type"] not in {"missing"} and _short(item["input"]) else ""
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = f"unknown key (check the spelling; {schema})"
            got = ""
        parts.append(f"{where}: {field}: {message}{got}")
    return "; ".join(parts)


def _dotted(loc: Path_) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> bool:
    return not isinstance(value, dict | list) and len(repr(value)) <= 80


def _nearest_line(lines: dict[Path_, int], loc: Path_) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _line_index(node: yaml.Node | None, path: Path_ = ()) -> dict[Path_, int]:
    """Map every key path in the YAML document to its 1-based line."""
    index: dict[Path_, int] = {}
    if node is None:
        return index
    index[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            index.update(_line_index(value, child))
            index[child] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, value in enumerate(node.value):
            index.update(_line_index(value, (*path, i)))
    return index
