"""A draft whose vocabulary differs from the target's is called out before anything starts."""

import json
from pathlib import Path

import pytest

from specfleet.contract import parse_sweep_config
from specfleet.errors import InputError
from specfleet_tasks.plan.preflight import check_inputs, prefix_cache_warnings, tokenizer_warnings, vocabulary

ROOT = Path(__file__).resolve().parents[4]


def _tokenizer(directory: Path, vocab: dict[str, int]) -> Path:
    directory.mkdir()
    data = {"model": {"type": "BPE", "vocab": vocab}, "added_tokens": [{"content": "</s>", "id": len(vocab)}]}
    (directory / "tokenizer.json").write_text(json.dumps(data))
    return directory


def _config(target: Path, draft: Path) -> str:
    text = (ROOT / "configs" / "demo-cpu.yaml").read_text()
    return text.replace('"fixture:target-wide"', str(target)).replace('"fixture:draft"', str(draft))


def test_mismatched_vocabulary_warns_per_draft_arm(tmp_path: Path) -> None:
    target = _tokenizer(tmp_path / "target", {"a": 0, "b": 1})
    draft = _tokenizer(tmp_path / "draft", {"a": 0, "c": 1})
    config = parse_sweep_config(_config(target, draft), "x")
    warnings = tokenizer_warnings(config, {})
    assert len(warnings) == 2
    assert all("different vocabulary" in w and "acceptance will collapse" in w for w in warnings)
    assert {w.split(":")[1].strip().split()[1] for w in warnings} == {"draft-k2", "draft-k4"}


def test_same_vocabulary_is_quiet(tmp_path: Path) -> None:
    target = _tokenizer(tmp_path / "target", {"a": 0, "b": 1})
    draft = _tokenizer(tmp_path / "draft", {"a": 0, "b": 1})
    assert tokenizer_warnings(parse_sweep_config(_config(target, draft), "x"), {}) == []
    assert vocabulary(target) == {"a": 0, "b": 1, "</s>": 2}


def test_unreadable_tokenizer_is_not_guessed(tmp_path: Path) -> None:
    assert vocabulary(tmp_path) is None


def test_a_ca_bundle_that_is_missing_or_not_pem_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    text = (ROOT / "configs" / "demo-cpu.yaml").read_text().replace(
        "engine:\n", f"engine:\n  ca_bundle: {tmp_path / 'ca.pem'}\n", 1)
    assert "ca_bundle" in text
    config.write_text(text)
    with pytest.raises(InputError, match=rf"^{config}: engine\.ca_bundle: {tmp_path / 'ca.pem'}: no such file$"):
        check_inputs(config)
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(InputError, match=r"engine\.ca_bundle: .*ca\.pem: not a PEM certificate bundle"):
        check_inputs(config)


def test_a_public_bind_without_dev_endpoints_warns_that_prefix_caches_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    text = (ROOT / "configs" / "demo-cpu.yaml").read_text()
    assert prefix_cache_warnings(parse_sweep_config(text, "demo")) == []  # loopback: specfleet turns them on
    public = text.replace("engine:\n", "engine:\n  host: 0.0.0.0\n")
    (warning,) = prefix_cache_warnings(parse_sweep_config(public, "demo"))
    assert warning.startswith("WARNING: arms baseline, ") and "404" in warning and "'0.0.0.0'" in warning
    trusted = public.replace("  env:\n", "  env:\n    VLLM_SERVER_DEV_MODE: \"1\"\n")
    assert prefix_cache_warnings(parse_sweep_config(trusted, "demo")) == []
