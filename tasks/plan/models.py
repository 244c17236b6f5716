"""Resolve model names to what the server loads, and hash checkpoints and tokenizers."""

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from specfleet.contract import SweepConfig, arm_plans
from specfleet.errors import InputError

if TYPE_CHECKING:
    from specfleet_tasks.fixtures.build import BuildProgress

FIXTURE_PREFIX = "fixture:"
WIDE = "target-wide"
"""The wide fixture (benchmarks, the k-policy demo): the target with its MLPs widened, same function
(``tasks/fixtures/wide.py``)."""
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model", "vocab.json", "merges.txt",
)
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".json", ".model")


def model_names(config: SweepConfig) -> list[str]:
    """Every model path or id the sweep loads, target first."""
    names = [config.models.target.path]
    if config.models.target.tokenizer:
        names.append(config.models.target.tokenizer)
    for arm in arm_plans(config):
        model = (arm.speculative_config or {}).get("model")
        if isinstance(model, str) and model not in names:
            names.append(model)
    return names


FIXTURES = ("target", "draft", "tokenizer", WIDE)


def check_fixture_names(config: SweepConfig) -> None:
    """Every ``fixture:`` name is one ``resolve_models`` builds (checked without building any)."""
    for name in model_names(config):
        if name.startswith(FIXTURE_PREFIX) and name.removeprefix(FIXTURE_PREFIX) not in FIXTURES:
            raise InputError(f"models: unknown fixture {name!r} (expected fixture:{'|'.join(FIXTURES)})")


def named_models(config: SweepConfig) -> dict[str, str]:
    """What ``resolve_models`` maps each local path to, without building the fixtures (their
    names stay as they are)."""
    return {name: str(Path(name).expanduser()) for name in model_names(config)
            if not name.startswith(FIXTURE_PREFIX) and looks_local(name)}


def resolve_models(config: SweepConfig, cache_root: Path | None = None,
                   progress: "BuildProgress | None" = None) -> dict[str, str]:
    """Map ``fixture:target|draft|tokenizer`` to built fixture dirs (building them the first time,
    reporting to ``progress``) and ``fixture:target-wide`` to the target widened
    next to them (``tasks/fixtures/wide.py``); check local paths exist."""
    check_fixture_names(config)
    resolved: dict[str, str] = {}
    names = model_names(config)
    if any(n.startswith(FIXTURE_PREFIX) for n in names):
        from specfleet_tasks.fixtures.build import build_fixtures

        fixtures = build_fixtures(cache_root, progress=progress)
        table = {"target": fixtures.target, "draft": fixtures.draft, "tokenizer": fixtures.tokenizer}
        for name in names:
            if name.startswith(FIXTURE_PREFIX):
                which = name.removeprefix(FIXTURE_PREFIX)
                if which == WIDE:
                    from specfleet_tasks.fixtures.wide import widen

                    resolved[name] = str(widen(fixtures.target, fixtures.target.with_name(WIDE)))
                    continue
                resolved[name] = str(table[which])
    for name in names:
        if name in resolved:
            continue
        if looks_local(name) and not Path(name).expanduser().exists():
            raise InputError(f"models: path {name!r} does not exist")
        resolved[name] = str(Path(name).expanduser()) if looks_local(name) else name
    return resolved


def looks_local(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hash(root: Path, names: tuple[str, ...] | None = None) -> str | None:
    """sha256 over (relative path, file sha256) of a checkpoint directory; None if unreadable."""
    if not root.is_dir():
        return None
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and (p.name in names if names else p.suffix in CHECKPOINT_SUFFIXES)
    )
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(json.dumps([str(path.relative_to(root)), _file_sha256(path)]).encode())
    return digest.hexdigest()


def local_dir(name: str, resolved: dict[str, str]) -> Path | None:
    """The local directory for a model name: a path, or the Hugging Face cache snapshot if present."""
    path = Path(resolved.get(name, name)).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not in the local cache: the hash stays unknown (None), never guessed
        return None
