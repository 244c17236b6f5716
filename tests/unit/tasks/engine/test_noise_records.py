"""Recorded noise (``specfleet_tasks.engine.noise_records``): a finished sweep's own noise kept per engine,
models and settings, read back for the same models only, torn lines skipped."""

from pathlib import Path

from specfleet.stats.variance import RunNoise
from specfleet_tasks.engine.noise_records import (
    noise_key,
    record_noise,
    record_sweep_noise,
    recorded_noise,
    sweep_noise,
)
from specfleet_tasks.store.config import load_sweep_config
from tests.support.sweep_data import stored_sweep

ROOT = Path(__file__).resolve().parents[4]


def _noise(server_var: float, run_var: float, estimated: bool = True) -> RunNoise:
    return RunNoise(metric="qualified_tokens_per_s", identified="both" if estimated else "none",
                    server_var=server_var if estimated else None, run_var=run_var if estimated else None, runs=8,
                    groups=4, servers=2, relative_sd=None, relative_sd_low=None, relative_sd_high=None,
                    confidence=0.95, source="test")


def test_recorded_noise_is_read_back_for_the_same_models_only(tmp_path: Path) -> None:
    demo = load_sweep_config(ROOT / "configs" / "demo-cpu.yaml")
    other = demo.model_copy(update={"models": demo.models.model_copy(update={
        "target": demo.models.target.model_copy(update={"path": "another/target"})})})
    assert noise_key(demo) != noise_key(other)
    record_noise(demo, "s1", _noise(0.001, 0.004), tmp_path)
    record_noise(demo, "s2", _noise(0.0, 0.0, estimated=False), tmp_path)  # no estimate: nothing recorded
    record_noise(other, "s3", _noise(0.002, 0.002), tmp_path)
    path = next(tmp_path.rglob("*-noise.jsonl"))
    path.write_text(path.read_text() + '{"models": ["torn\n', encoding="utf-8")
    found = recorded_noise(demo, tmp_path)
    assert [(r.sweep, r.server_var, r.run_var, r.requests_per_cell) for r in found] == [("s1", 0.001, 0.004, 12)]
    assert [r.sweep for r in recorded_noise(other, tmp_path)] == ["s3"]


def test_a_stored_sweep_records_its_own_noise(tmp_path: Path) -> None:
    sweep = stored_sweep(tmp_path)
    config, sweep_id, noise = sweep_noise(sweep.store.dir)
    assert sweep_id == sweep.sweep_id and noise.estimated and noise.runs == 2  # opening and closing baseline
    record_sweep_noise(sweep.store.dir, tmp_path / "cache")
    found = recorded_noise(config, tmp_path / "cache")
    assert [(r.sweep, r.runs, r.config_name) for r in found] == [(sweep_id, 2, config.name)]
