"""``specfleet plan``'s inputs: model architectures, the accelerator's roofline, prompt lengths,
and a stored sweep to calibrate on; then ``specfleet.planning.estimate`` does the arithmetic."""

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specfleet.contract import SweepConfig, arm_plans
from specfleet.errors import InputError
from specfleet.perfmodel.architectures import KNOWN_CONFIGS
from specfleet.perfmodel.calibrate import Calibration, calibrate
from specfleet.perfmodel.prior import (
    ACCELERATORS,
    CPU_DEFAULTS,
    GPU_DEFAULTS,
    ModelShape,
    Roofline,
    bytes_per_param,
    shape_from_hf_config,
)
from specfleet.planning.estimate import SweepTimes, estimate_sweep, stage_wall_s
from specfleet.planning.replicas import slots
from specfleet.planning.timing import ArmRecord, CalibratedTiming, PriorTiming
from specfleet.report.sweep_report import SweepReport
from specfleet_tasks.engine.startups import engine_import_s, recorded_startups, startup_key, startup_note
from specfleet_tasks.plan.models import FIXTURE_PREFIX, local_dir
from specfleet_tasks.plan.preflight import config_base_dir
from specfleet_tasks.plan.prompt_sets import load_prompt_class, load_scored_sets
from specfleet_tasks.store.config import load_sweep_config
from specfleet_tasks.store.sweep import StoredSweep

CHARS_PER_TOKEN = 4.0
"""Prompt length before any tokenizer ran: about four characters per token for English BPE
vocabularies (the prior's assumption; a calibrated plan reads the measured prompt tokens)."""


def model_shape(name: str, dtype: str, quantization: str | None) -> ModelShape | None:
    """From the fixture recipe, a local or cached ``config.json``, or the published table; a
    ``config.json`` the prior cannot read is an ``InputError`` naming it."""
    try:
        return _model_shape(name, dtype, quantization)
    except ValueError as err:
        raise InputError(f"{err} (the plan's prior reads it)") from None


def _model_shape(name: str, dtype: str, quantization: str | None) -> ModelShape | None:
    if name.startswith(FIXTURE_PREFIX):
        from specfleet_tasks.fixtures.build import fixture_architecture

        which = name.removeprefix(FIXTURE_PREFIX)
        return shape_from_hf_config(fixture_architecture(which), dtype, quantization, f"fixture recipe ({which})")
    directory = local_dir(name, {})
    if directory is not None and (directory / "config.json").is_file():
        cfg = json.loads((directory / "config.json").read_text())
        return shape_from_hf_config(cfg.get("text_config", cfg), dtype, quantization, f"{name}/config.json")
    if name in KNOWN_CONFIGS:
        return shape_from_hf_config(KNOWN_CONFIGS[name], dtype, quantization, f"{name} (published config.json)")
    return None


@functools.cache
def measure_cpu() -> tuple[float, float]:
    """This machine's memory bandwidth (GB/s, a 256 MiB copy) and matmul rate (TFLOP/s, float32),
    best of three: what the prior's roofline needs on the CPU build, measured in about a second,
    once per process (each budgeted stage plans again on the same machine)."""
    src = np.ones(32 * 1024 * 1024, dtype=np.float64)
    dst = np.empty_like(src)
    a = np.ones((1024, 1024), dtype=np.float32)
    copies, matmuls = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        a @ a
        matmuls.append(time.perf_counter() - t0)
    return 2 * src.nbytes / min(copies) / 1e9, 2 * 1024 ** 3 / min(matmuls) / 1e12


def roofline(config: SweepConfig) -> Roofline:
    hw = config.hardware
    if hw.on_cpu:
        bandwidth, tflops = hw.memory_bandwidth_gb_per_s, hw.peak_tflops
        source = "configured"
        if bandwidth is None or tflops is None:
            measured_bw, measured_tflops = measure_cpu()
            bandwidth, tflops = bandwidth or measured_bw, tflops or measured_tflops
            source = "measured on this machine when planning"
        return Roofline(bandwidth, tflops, 1, CPU_DEFAULTS,
                        f"cpu: {bandwidth:.1f} GB/s, {tflops:.2f} TFLOP/s ({source})")
    spec = next((s for key, s in ACCELERATORS.items() if hw.accelerator.lower().startswith(key)), None)
    bandwidth = hw.memory_bandwidth_gb_per_s or (spec.memory_bandwidth_gb_per_s if spec else None)
    quantization = config.models.target.quantization
    try:  # the peak's precision class: FP8 for 8-bit (or narrower) weights, else the BF16/FP16 peak
        fp8 = quantization is not None and bytes_per_param("bfloat16", quantization) <= 1.0
    except ValueError as err:
        raise InputError(f"models.target: {err}") from None
    weight_bytes = 1.0 if fp8 else 2.0
    tflops = hw.peak_tflops or (spec.peak_tflops(weight_bytes) if spec else None)
    if bandwidth is None or tflops is None:
        raise InputError(f"hardware.accelerator {hw.accelerator!r}: the plan's prior has no roofline for it; set "
                         "hardware.memory_bandwidth_gb_per_s and hardware.peak_tflops")
    source = spec.source if spec and not hw.memory_bandwidth_gb_per_s else "configured"
    return Roofline(bandwidth, tflops, hw.tensor_parallel_size, GPU_DEFAULTS, source)


def _prompt_tokens(config: SweepConfig, base_dir: Path) -> tuple[dict[str, float], list[str]]:
    """Mean prompt tokens per class from the prompt files' characters; a class whose file is not
    here counts its ``max_input_tokens``, or no prefill at all (said in a note)."""
    out, notes = {}, []
    for pc in config.prompt_classes:
        try:
            items = load_prompt_class(pc, base_dir)
        except InputError as err:
            out[pc.name] = float(pc.max_input_tokens or 0)
            notes.append(f"{err}: its prompts counted as {pc.max_input_tokens or 0} tokens "
                         f"({'max_input_tokens' if pc.max_input_tokens else 'prefill left out of the plan'})")
            continue
        chars = [len(i.prompt or "") + sum(len(str(m.get("content", ""))) for m in (i.messages or [])) for i in items]
        tokens = sum(chars) / max(1, len(chars)) / CHARS_PER_TOKEN
        out[pc.name] = min(tokens, float(pc.max_input_tokens)) if pc.max_input_tokens else tokens
    return out, notes


def prior_timing(config: SweepConfig, base_dir: Path) -> PriorTiming:
    target_spec = config.models.target
    target = model_shape(target_spec.path, target_spec.dtype, target_spec.quantization)
    if target is None:
        raise InputError(f"models.target.path {target_spec.path!r}: the plan's prior needs its config.json (not "
                         "on this machine and not in the published table)")
    drafts = {}
    for arm in arm_plans(config):
        if arm.method != "draft_model":
            continue
        name = str((arm.speculative_config or {}).get("model") or (config.models.draft.path if config.models.draft
                                                                     else ""))
        dtype = config.models.draft.dtype if config.models.draft else target_spec.dtype
        shape = model_shape(name, dtype, None)
        if shape is None:
            raise InputError(f"arm {arm.spec_name}: the plan's prior needs the draft model's config.json ({name!r})")
        drafts[arm.spec_name] = shape
    prompt_tokens, notes = _prompt_tokens(config, base_dir)
    startups = {arm.arm: recorded_startups(startup_key(config, arm)) for arm in arm_plans(config)}
    note = startup_note(startups)
    return PriorTiming(target=target, drafts=drafts, roofline=lambda: roofline(config),
                       prompt_tokens_by_class=prompt_tokens, recorded_startups_s=startups,
                       engine_import=engine_import_s if config.hardware.on_cpu else lambda: None,
                       notes=(*PriorTiming.notes, *notes, *([note] if note else [])))


def arm_records(summary: SweepReport | None, config: SweepConfig) -> list[ArmRecord]:
    """The arms' timing records of a stored sweep's summary (none while it runs)."""
    methods = {a.arm: a.method for a in arm_plans(config)}
    return [ArmRecord(arm=a.arm, method=methods.get(a.arm, ""), phase=a.phase, timing=a.timing)
            for a in (summary.arms if summary is not None else []) if a.timing is not None]


@functools.lru_cache(maxsize=8)
def _calibration(sweep_dir: Path, stamp: tuple[tuple[str, int], ...], config_json: str,
                 overhead_ms: float | None) -> Calibration:
    """The performance model fitted to a stored sweep's cells, once per process for the same stored
    contents (``stamp``): a budgeted sweep times each stage on the same earlier sweep. ``overhead_ms``:
    the overhead its summary kept (the fit's search, which simulates every cell a dozen times, is
    then skipped)."""
    config = SweepConfig.model_validate_json(config_json)
    sweep = StoredSweep(sweep_dir, config=config)
    return calibrate(sweep.id, config, sweep.cells, sweep.records, seed=config.analysis.seed, overhead_ms=overhead_ms)


def calibrated_timing(sweep: StoredSweep, prior: PriorTiming, history: Sequence[SweepReport] = ()) -> CalibratedTiming:
    """The model calibrated on ``sweep``'s cells and records with its arms' timing records (no
    analysis: nothing here reads a gate or a decision); ``history``: the summaries of other recent
    sweeps of the config, for the budget's slowest start and longest aggregation."""
    config = sweep.config
    summary = sweep.summary  # None while a sweep runs: no timing records yet
    cal = _calibration(sweep.dir, sweep.contents_stamp(), config.model_dump_json(),
                       summary.model_overhead_ms if summary is not None else None)
    methods = {a.arm: a.method for a in arm_plans(config)}
    records = arm_records(summary, config)
    outside = None
    if summary is not None and summary.wall_s is not None:
        parallel, _ = slots(config)
        stages = [[r.timing.wall_s for r in records if (r.phase == "baseline_end") == end and
                   (methods.get(r.arm) == "baseline") == base] for end, base in ((False, True), (False, False),
                                                                                   (True, True))]
        outside = max(0.0, summary.wall_s - sum(stage_wall_s(s, parallel) for s in stages))
    return CalibratedTiming(
        calibration=cal, records=records, outside_arms_s=outside, prior=prior,
        after_stages_recorded_s=summary.after_stages_s if summary is not None else None,
        history=[record for other in history for record in arm_records(other, config)],
        history_after_stages_s=[other.after_stages_s for other in history if other.after_stages_s])


@dataclass(frozen=True)
class PlanInputs:
    """What a plan of CONFIG is computed from: the config, its timing and its scored sets' sizes."""

    config: SweepConfig
    prior: PriorTiming
    timing: PriorTiming | CalibratedTiming
    scored: dict[str, int]

    def estimate(self, config: SweepConfig, budget_s: float | None = None) -> SweepTimes:
        """The plan of ``config`` (this one, or a variant of its design) on the same timing."""
        return estimate_sweep(self.timing, config, self.scored, budget_s)


def plan_inputs(config_path: Path, from_sweep: str | None, results_dir: Path) -> PlanInputs:
    """CONFIG with its timing, on the prior or calibrated on ``from_sweep``."""
    config = load_sweep_config(config_path)
    base_dir = config_base_dir(config_path)
    scored = {name: len(s.items) for name, s in load_scored_sets(config, base_dir).items() if s is not None}
    prior = prior_timing(config, base_dir)
    timing: PriorTiming | CalibratedTiming = prior
    if from_sweep is not None:
        timing = calibrated_timing(StoredSweep.find(from_sweep, results_dir), prior)
    return PlanInputs(config, prior, timing, scored)


def plan_sweep_estimate(config_path: Path, budget_s: float | None, from_sweep: str | None,
                        results_dir: Path) -> tuple[SweepTimes, list[str]]:
    """The plan of CONFIG, on the prior or calibrated on ``from_sweep``; with the timing's notes."""
    inputs = plan_inputs(config_path, from_sweep, results_dir)
    config, prior, timing = inputs.config, inputs.prior, inputs.timing
    if budget_s is None and config.budget is not None:  # the flag wins over the config's block
        budget_s = float(config.budget.duration_s)
    times = inputs.estimate(config, budget_s)
    startup = prior.startup_estimate_note()
    notes = [*times.estimate.notes, *timing.notes, f"roofline: {prior.hardware.source}",
             *([startup] if startup else [])]
    times.estimate.notes[:] = notes
    return times, notes
