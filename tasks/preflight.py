"""Checks before any server starts: speculators share the target's vocabulary."""

import json
from pathlib import Path

from specfleet.contract import SweepConfig, arm_plans
from tasks.models import local_dir


def vocabulary(directory: Path) -> dict[str, int] | None:
    """Token -> id from ``tokenizer.json`` (with added tokens) or ``vocab.json``; None if neither."""
    try:
        if (directory / "tokenizer.json").exists():
            data = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = data["model"]["vocab"]
            table = dict(vocab) if isinstance(vocab, dict) else {str(t[0]): i for i, t in enumerate(vocab)}
            table.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
            return table
        if (directory / "vocab.json").exists():
            return dict(json.loads((directory / "vocab.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def tokenizer_warnings(config: SweepConfig, resolved: dict[str, str]) -> list[str]:
    """One loud line per draft model whose vocabulary differs from the target's.

    A draft with another vocabulary proposes tokens the target rejects: acceptance collapses
    (seed: "Tokenizer and vocabulary"). Unreadable tokenizers are not guessed at.
    """
    target_dir = local_dir(config.models.target.tokenizer_path, resolved)
    target_vocab = vocabulary(target_dir) if target_dir else None
    if target_vocab is None:
        return []
    warnings = []
    for arm in arm_plans(config):
        model = (arm.speculative_config or {}).get("model")
        if not isinstance(model, str) or arm.method not in ("draft_model",):
            continue
        draft_dir = local_dir(model, resolved)
        draft_vocab = vocabulary(draft_dir) if draft_dir else None
        if draft_vocab is not None and draft_vocab != target_vocab:
            warnings.append(
                f"WARNING: arm {arm.arm}: the draft {model!r} has a different vocabulary from the target "
                f"{config.models.target.path!r}; acceptance will collapse"
            )
    return sorted(set(warnings))


def config_base_dir(config_path: Path) -> Path:
    """Relative prompt and model paths in a config resolve against its folder."""
    return config_path.resolve().parent
