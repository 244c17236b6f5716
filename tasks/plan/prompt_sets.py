"""Load a prompt class from the bundled sets, a JSONL file or a ShareGPT file, and its held-out
scored set (the quality gate's items): the class's ``scored_set`` file or, for a bundled class,
the bundled one in ``configs/prompts/scored/`` (made by ``tasks/fixtures/make_scored_sets.py``)."""

import os
from pathlib import Path

from specfleet.contract import PromptClassSpec, SweepConfig
from specfleet.contract.prompts import PromptItem, parse_prompts_jsonl, parse_sharegpt
from specfleet.errors import InputError
from specfleet.gates.scored_set import ScoredSet

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
    path = _config_relative(spec.path, base_dir)
    text = _read(path, f"prompt file of class {spec.name!r}")
    if spec.source == "sharegpt":
        return parse_sharegpt(text, str(path))
    return parse_prompts_jsonl(text, str(path))


def _config_relative(name: str, base_dir: Path | None) -> Path:
    """A path from the config: as given when it exists, else against the config's folder."""
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return path


def load_scored_set(spec: PromptClassSpec, base_dir: Path | None = None) -> ScoredSet | None:
    """The class's scored set; None when it has none (its quality gate cannot run, and says so)."""
    if spec.scored_set is not None:
        path = _config_relative(spec.scored_set, base_dir)
        return ScoredSet.parse(_read(path, f"scored set of class {spec.name!r}"), str(path))
    bundled = bundled_dir() / "scored" / f"{spec.path or spec.name}.jsonl"
    if spec.source == "bundled" and bundled.is_file():
        return ScoredSet.parse(_read(bundled, "bundled scored set"), str(bundled))
    return None


def load_scored_sets(config: SweepConfig, base_dir: Path | None = None) -> dict[str, ScoredSet | None]:
    """Every prompt class's scored set by class name, each checked line by line (exit 2 on a bad one)."""
    return {pc.name: load_scored_set(pc, base_dir) for pc in config.prompt_classes}


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
