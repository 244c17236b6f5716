"""Load a prompt class from the bundled sets, a JSONL file or a ShareGPT file."""

import os
from pathlib import Path

from specfleet.contract import PromptClassSpec
from specfleet.errors import InputError
from specfleet.prompts import PromptItem, parse_prompts_jsonl, parse_sharegpt

REPO_ROOT = Path(__file__).resolve().parents[2]


def bundled_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_PROMPTS_DIR", REPO_ROOT / "configs" / "prompts"))


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled_dir().glob("*.jsonl"))


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as err:
        raise InputError(f"{path}: cannot read {what} ({type(err).__name__})") from None


def load_prompt_file(path: Path) -> list[PromptItem]:
    """A JSONL file (``{"prompt": ...}`` or ``{"messages": [...]}`` per line) or ShareGPT JSON."""
    text = _read(path, "prompt file")
    if path.suffix == ".json":
        return parse_sharegpt(text, str(path))
    return parse_prompts_jsonl(text, str(path))


def load_prompt_class(spec: PromptClassSpec, base_dir: Path | None = None) -> list[PromptItem]:
    """The prompts of one class; relative file paths resolve against ``base_dir`` (the config's folder)."""
    if spec.source == "bundled":
        name = spec.path or spec.name
        path = bundled_dir() / f"{name}.jsonl"
        if not path.exists():
            raise InputError(
                f"prompt_classes.{spec.name}: no bundled prompt set {name!r} (bundled: {', '.join(bundled_names())})"
            )
        return parse_prompts_jsonl(path.read_text(encoding="utf-8"), str(path))
    assert spec.path is not None
    path = Path(spec.path).expanduser()
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    text = _read(path, f"prompt file of class {spec.name!r}")
    if spec.source == "sharegpt":
        return parse_sharegpt(text, str(path))
    return parse_prompts_jsonl(text, str(path))


def resolve_prompts(name_or_file: str) -> list[PromptItem]:
    """For ``specfleet measure --prompts``: a bundled class name or a file path."""
    if (bundled_dir() / f"{name_or_file}.jsonl").exists() and not Path(name_or_file).exists():
        path = bundled_dir() / f"{name_or_file}.jsonl"
        return parse_prompts_jsonl(path.read_text(encoding="utf-8"), str(path))
    path = Path(name_or_file)
    if not path.exists():
        raise InputError(
            f"--prompts: {name_or_file!r} is neither a file nor a bundled class ({', '.join(bundled_names())})"
        )
    return load_prompt_file(path)
