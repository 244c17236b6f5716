"""Checks before any server starts: inputs that exist and parse, speculators that share the
target's vocabulary."""

import json
import os
from pathlib import Path

from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.server_args import server_env
from specfleet.errors import InputError
from specfleet_tasks.loadgen.endpoint import verifying_context
from specfleet_tasks.plan.engine_support import check_engine_support
from specfleet_tasks.plan.models import FIXTURE_PREFIX, check_fixture_names, local_dir, looks_local
from specfleet_tasks.plan.prompt_sets import load_prompt_class
from specfleet_tasks.store.config import load_sweep_config


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


DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


def prefix_cache_warnings(config: SweepConfig) -> list[str]:
    """One line when some arm's server will have no ``POST /reset_prefix_cache`` (a dev endpoint,
    on only with ``VLLM_SERVER_DEV_MODE=1``, which specfleet sets on a loopback bind): its cells
    cannot clear the previous cell's cached prefixes, and each says so (``prefix_cache_not_reset``)."""
    without = [arm.arm for arm in arm_plans(config)
               if (server_env(config.engine, arm).get(DEV_MODE_ENV) or os.environ.get(DEV_MODE_ENV)) != "1"]
    if not without:
        return []
    return [f"WARNING: arms {', '.join(without)}: their servers bind engine.host {config.engine.host!r} without "
            f"{DEV_MODE_ENV}=1, so vLLM answers POST /reset_prefix_cache with 404 and each cell may start on the "
            "previous cell's cached prefixes (set it in engine.env to clear them on a host you trust)"]


def config_base_dir(config_path: Path) -> Path:
    """Relative prompt and model paths in a config resolve against its folder."""
    return config_path.resolve().parent


def model_fields(config: SweepConfig) -> list[tuple[str, str]]:
    """(config field, model path or id) of every model the sweep names."""
    fields = []
    for role in ("target", "draft"):
        ref = getattr(config.models, role)
        if ref is not None:
            fields.append((f"models.{role}.path", ref.path))
            if ref.tokenizer:
                fields.append((f"models.{role}.tokenizer", ref.tokenizer))
    for index, arm in enumerate(config.arms):
        if arm.model:
            fields.append((f"arms[{index}].model", arm.model))
    return fields


def check_inputs(config_path: Path) -> SweepConfig:
    """What can be wrong with the input, checked before Prefect, Ray or an engine starts: the
    config, every prompt file, every local model path, the CA bundle, arms the installed engine
    cannot run. Raises ``InputError``
    naming the field."""
    config = load_sweep_config(config_path)
    check_fixture_names(config)
    for spec in config.prompt_classes:
        load_prompt_class(spec, config_base_dir(config_path))
    for field, name in model_fields(config):
        if not name.startswith(FIXTURE_PREFIX) and looks_local(name) and not Path(name).expanduser().exists():
            raise InputError(f"{config_path}: {field}: {name!r} does not exist (expected a model directory or hub id)")
    if config.engine.ca_bundle is not None:
        verifying_context(Path(config.engine.ca_bundle), field=f"{config_path}: engine.ca_bundle:")
    check_engine_support(config, config_path)
    return config
