"""The fixture cache's own logic with a stand-in build step (the real build trains models and
is covered by the integration tests): reuse, atomic replace, failure cleanup, private dirs."""

import stat
from pathlib import Path

import pytest

from tasks.fixtures import build
from tasks.fixtures.build import MANIFEST, PARTS, build_fixtures


class FakeBuild:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self, out: Path, *_args: object) -> None:
        self.calls += 1
        for part in PARTS:
            (out / part).mkdir(mode=0o700)
        if self.fail:
            raise RuntimeError("training diverged")
        (out / MANIFEST).write_text("{}")


def test_built_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(build, "_build", fake)
    first = build_fixtures(tmp_path)
    second = build_fixtures(tmp_path)
    assert fake.calls == 1 and not first.reused and second.reused
    assert first.target == second.target and first.target.parent.name == first.content_hash
    fixtures = tmp_path / "fixtures"
    assert [p.name for p in fixtures.iterdir() if not p.name.endswith(".lock")] == [first.content_hash]
    assert stat.S_IMODE(fixtures.stat().st_mode) & 0o077 == 0


def test_a_failed_build_leaves_nothing_that_looks_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_build", FakeBuild(fail=True))
    with pytest.raises(RuntimeError, match="diverged"):
        build_fixtures(tmp_path)
    assert [p.name for p in (tmp_path / "fixtures").iterdir() if not p.name.endswith(".lock")] == []
    fake = FakeBuild()
    monkeypatch.setattr(build, "_build", fake)
    assert not build_fixtures(tmp_path).reused and fake.calls == 1


def test_an_incomplete_cache_entry_is_rebuilt_and_stale_staging_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(build, "_build", fake)
    digest = build_fixtures(tmp_path).content_hash
    final = tmp_path / "fixtures" / digest
    (final / MANIFEST).unlink()  # a copy interrupted before its manifest
    stale = tmp_path / "fixtures" / f".{digest}.tmp-999999"
    stale.mkdir()
    rebuilt = build_fixtures(tmp_path)
    assert not rebuilt.reused and fake.calls == 2 and (final / MANIFEST).is_file()
    assert not stale.exists()
