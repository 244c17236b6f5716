"""Run-to-run noise of finished sweeps recorded on this machine, per engine version, the models the
sweep loads and its engine settings, as start-ups are (``specfleet_tasks.engine.startups``): what
``specfleet plan`` states each claim's minimum detectable saving from before a sweep of a config
exists (``specfleet.planning.power``; the stated prior only where nothing was recorded)."""

import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from specfleet.contract import SweepConfig, arm_plans
from specfleet.planning.power import RecordedNoise
from specfleet.stats.samples import CellSample
from specfleet.stats.variance import RunNoise, estimate_noise
from specfleet.verdicts.evidence import earlier_runs
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.engine.startups import STARTUPS_DIR
from specfleet_tasks.fixtures.build import default_cache_root
from specfleet_tasks.store.sweep import StoredSweep

KEEP = 20
"""The newest recorded sweeps of the same models and settings that count."""


def noise_key(config: SweepConfig) -> list[str]:
    """What recorded noise is matched on: the target, every draft an arm loads, and the engine's
    settings (hashed, as start-ups: an argument or a variable may hold a credential)."""
    models = ((arm.speculative_config or {}).get("model") for arm in arm_plans(config))
    drafts = sorted({m for m in models if isinstance(m, str)})
    settings = json.dumps([config.engine.extra_args, sorted(config.engine.env.items())])
    return [config.models.target.path, *drafts, f"settings:{hashlib.sha256(settings.encode()).hexdigest()[:16]}"]


def _path(cache_root: Path | None) -> Path:
    engine, version = engine_distribution()
    return (cache_root or default_cache_root()) / STARTUPS_DIR / f"{engine}-{version}-noise.jsonl"


def sweep_noise(sweep_dir: Path) -> tuple[SweepConfig, str, RunNoise]:
    """A stored sweep's own SLO-qualified tokens/s noise: its repeated runs alone, none of the
    history its verdicts pooled (each recorded sweep counts once)."""
    sweep = StoredSweep(sweep_dir)
    config, records = sweep.config, sweep.usable_records
    samples = {c.key: CellSample.from_records(c, records[c.key], config.slo) for c in sweep.cells if c.key in records}
    runs = [r for r in earlier_runs(sweep.id, sweep.cells, samples, config.slo, config.analysis)
            if r.metric == "qualified_tokens_per_s"]
    return config, sweep.id, estimate_noise(runs, "qualified_tokens_per_s", config.analysis.confidence)


def record_sweep_noise(sweep_dir: Path, cache_root: Path | None = None) -> None:
    """Record a finished sweep's own noise; best effort, never a reason for a sweep to fail."""
    try:
        config, sweep_id, noise = sweep_noise(sweep_dir)
    except (OSError, ValueError):
        return
    record_noise(config, sweep_id, noise, cache_root)


def record_noise(config: SweepConfig, sweep_id: str, found: RunNoise, cache_root: Path | None = None) -> None:
    """Append a sweep's SLO-qualified tokens/s noise (one short line) where it has an estimate."""
    if not found.estimated:
        return
    server_var, run_var = found.parts()
    entry = RecordedNoise(sweep=sweep_id, config_name=config.name, server_var=server_var, run_var=run_var,
                          runs=found.runs, requests_per_cell=config.load.requests_per_cell)
    path = _path(cache_root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"models": noise_key(config), **entry.model_dump(mode="json")}) + "\n")
    except OSError:
        pass


def recorded_noise(config: SweepConfig, cache_root: Path | None = None) -> list[RecordedNoise]:
    """The newest ``KEEP`` recorded noises of sweeps with the same models and settings, oldest first."""
    try:
        lines = _path(cache_root).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    key, found = noise_key(config), []
    for line in lines:
        try:
            entry = json.loads(line)
            if entry.pop("models", None) == key:
                found.append(RecordedNoise.model_validate(entry))
        except (ValueError, ValidationError, AttributeError):  # a torn or foreign line
            continue
    return found[-KEEP:]
