"""The fixture corpus is deterministic, covers the five classes, and the bundled prompts are held out;
the build is cached atomically."""

import fcntl
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest
from typer.testing import CliRunner

from cli import fixtures as fixtures_cli
from specfleet.contract import PromptClassSpec
from specfleet.errors import InputError
from tasks.fixtures import build
from tasks.fixtures.corpus import (
    KINDS,
    TRAIN_PER_CLASS,
    TRAIN_SEED,
    corpus_hash,
    document,
    generate,
    render_chat,
    trained_prompt_keys,
    training_corpus,
)
from tasks.fixtures.make_prompts import PROMPTS_PER_CLASS, render_prompt_file
from tasks.fixtures.make_scored_sets import ITEMS_PER_CLASS, render_scored_set
from tasks.fixtures.tokenizer import CHAT_TEMPLATE
from tasks.plan.prompt_sets import load_scored_set

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "configs" / "prompts"


def _prompt_file(kind: str) -> list[dict[str, object]]:
    lines = (PROMPTS_DIR / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_generation_is_deterministic_and_seeded() -> None:
    for kind in KINDS:
        assert generate(kind, 7, 20) == generate(kind, 7, 20)
        assert generate(kind, 7, 20) != generate(kind, 8, 20)
    assert corpus_hash(training_corpus(3, 10)) == corpus_hash(training_corpus(3, 10))
    assert corpus_hash(training_corpus(3, 10)) != corpus_hash(training_corpus(4, 10))


def test_training_corpus_covers_the_five_classes_evenly() -> None:
    samples = training_corpus(TRAIN_SEED, 25)
    assert [s.kind for s in samples[: len(KINDS)]] == list(KINDS)
    assert {kind: sum(s.kind == kind for s in samples) for kind in KINDS} == dict.fromkeys(KINDS, 25)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "chat"])
def test_prompt_completion_boundary_cannot_merge_tokens(kind: str) -> None:
    """Prompt ends in non-space, completion starts with whitespace: BPE splits them the same alone."""
    for sample in generate(kind, TRAIN_SEED, 200):
        assert sample.prompt and not sample.prompt[-1].isspace()
        assert sample.completion[:1].isspace()


def test_chat_samples_alternate_and_end_with_the_assistant() -> None:
    for sample in generate("chat", TRAIN_SEED, 200):
        roles = [role for role, _ in sample.messages]
        assert roles == ["user", "assistant"] * (len(roles) // 2)
        assert document(sample) == render_chat(sample.messages, add_generation_prompt=False)


def test_jinja_chat_template_matches_the_training_format() -> None:
    # transformers renders chat templates with these settings.
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(CHAT_TEMPLATE)
    for sample in generate("chat", TRAIN_SEED, 50):
        messages = [{"role": role, "content": text} for role, text in sample.messages]
        for upto, generation_prompt in ((len(messages), False), (len(messages) - 1, True)):
            rendered = template.render(
                messages=messages[:upto], bos_token="<s>", eos_token="</s>", add_generation_prompt=generation_prompt
            )
            assert rendered == render_chat(sample.messages[:upto], add_generation_prompt=generation_prompt)


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_files_parse_and_have_enough_prompts(kind: str) -> None:
    records = _prompt_file(kind)
    assert len(records) >= 30
    assert [r["id"] for r in records] == [f"{kind}-{i:03d}" for i in range(1, len(records) + 1)]
    for record in records:
        if kind == "chat":
            messages = record["messages"]
            assert isinstance(messages, list) and messages[-1]["role"] == "user"
            assert all(set(m) == {"role", "content"} for m in messages)
            text = "".join(m["content"] for m in messages)
        else:
            assert isinstance(record["prompt"], str)
            text = record["prompt"]
        assert 0 < len(text) < 1500  # a few hundred tokens at most


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_files_are_regenerated_identically(kind: str) -> None:
    text = (PROMPTS_DIR / f"{kind}.jsonl").read_text(encoding="utf-8")
    assert text == render_prompt_file(kind)
    assert len(text.splitlines()) == PROMPTS_PER_CLASS


def test_prompts_are_held_out_from_training() -> None:
    training_keys = trained_prompt_keys(training_corpus(TRAIN_SEED, TRAIN_PER_CLASS))
    for kind in KINDS:
        for record in _prompt_file(kind):
            if kind == "chat":
                turns = tuple((m["role"], m["content"]) for m in record["messages"])  # type: ignore[attr-defined]
                key = render_chat(turns, add_generation_prompt=True)
            else:
                key = str(record["prompt"])
            assert key not in training_keys, record["id"]


@pytest.mark.parametrize("kind", KINDS)
def test_bundled_scored_sets_are_regenerated_identically_and_load_for_the_bundled_class(kind: str) -> None:
    path = PROMPTS_DIR / "scored" / f"{kind}.jsonl"
    assert path.read_text(encoding="utf-8") == render_scored_set(kind)
    scored = load_scored_set(PromptClassSpec(name=kind))
    assert scored is not None and scored.source == str(path) and len(scored.items) == ITEMS_PER_CLASS
    assert load_scored_set(PromptClassSpec(name=kind, source="jsonl", path=str(PROMPTS_DIR / f"{kind}.jsonl"))) is None


def test_scored_items_are_held_out_from_training_and_from_the_bundled_prompts() -> None:
    training_keys = trained_prompt_keys(training_corpus(TRAIN_SEED, TRAIN_PER_CLASS))
    for kind in KINDS:
        scored = load_scored_set(PromptClassSpec(name=kind))
        assert scored is not None
        bundled = {json.dumps(r.get("messages") or r["prompt"]) for r in _prompt_file(kind)}
        for item in scored.items:
            turns = tuple((t.role, t.content) for t in item.messages or [])
            assert (render_chat(turns, add_generation_prompt=True) if turns else item.prompt) not in training_keys
            assert json.dumps([t.model_dump() for t in item.messages] if item.messages else item.prompt) not in bundled


# --- the cache around the build (the training itself is covered by the integration test) -------


def _fake_build(out: Path, *_args: object) -> None:
    for part in build.PARTS:
        (out / part).mkdir(mode=0o700)
    (out / build.MANIFEST).write_text("{}")


def test_build_is_cached_private_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_build", _fake_build)
    first = build.build_fixtures(tmp_path / "cache")
    assert not first.reused
    assert first.target == tmp_path / "cache" / "fixtures" / first.content_hash / "target"
    assert (tmp_path / "cache" / "fixtures").stat().st_mode & 0o777 == 0o700
    assert first.target.parent.stat().st_mode & 0o777 == 0o700
    assert build.build_fixtures(tmp_path / "cache") == replace(first, reused=True)


def test_a_failed_build_leaves_nothing_that_looks_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(out: Path, *_args: object) -> None:
        (out / "target").mkdir()
        raise RuntimeError("killed")

    monkeypatch.setattr(build, "_build", crash)
    with pytest.raises(RuntimeError):
        build.build_fixtures(tmp_path)
    assert [p for p in (tmp_path / "fixtures").iterdir() if not p.name.endswith(".lock")] == []


def test_cache_root_env_and_bad_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_build", _fake_build)
    monkeypatch.setenv("SPECFLEET_CACHE_DIR", str(tmp_path / "env-cache"))
    assert build.build_fixtures().tokenizer.is_relative_to(tmp_path / "env-cache")
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError):
        build.build_fixtures(tmp_path / "file")


def test_cli_json_prints_exactly_the_dirs_and_bad_input_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "_build", _fake_build)
    result = CliRunner().invoke(fixtures_cli.app, ["build", "--json", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    paths = build.build_fixtures(tmp_path)
    assert json.loads(result.stdout) == {
        "target": str(paths.target),
        "draft": str(paths.draft),
        "tokenizer": str(paths.tokenizer),
    }
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(fixtures_cli.app, ["build", "--cache-dir", str(tmp_path / "file")])
    assert result.exit_code == 2


def test_a_second_builder_waits_and_reuses_the_first_ones_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "_build", _fake_build)
    recipe = build.Recipe()
    digest = build.content_hash(recipe, corpus_hash(training_corpus(recipe.corpus_seed, recipe.per_class)))
    fixtures_dir = tmp_path / "fixtures"
    fixtures_dir.mkdir()
    messages: list[str] = []
    results: list[build.FixturePaths] = []

    class Notes:
        def note(self, message: str) -> None:
            messages.append(message)

        def step(self, done: object) -> None:
            raise AssertionError("a build that waits trains nothing")

    with open(fixtures_dir / f".{digest}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another builder is at work
        waiter = threading.Thread(
            target=lambda: results.append(build.build_fixtures(tmp_path, progress=Notes()))
        )
        waiter.start()
        deadline = time.monotonic() + 30
        while not messages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert messages and messages[0].startswith("waiting for another build")
        final = fixtures_dir / digest
        final.mkdir()
        _fake_build(final)
    waiter.join(timeout=30)
    assert results and results[0].reused and results[0].content_hash == digest
