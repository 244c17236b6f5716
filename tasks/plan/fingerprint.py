"""Compute the sweep fingerprint from the files and the installed engine."""

from pathlib import Path

from specfleet.contract import SweepConfig, arm_plans
from specfleet.contract.fingerprint import Fingerprint
from specfleet_tasks.engine.distribution import engine_distribution
from specfleet_tasks.plan.models import TOKENIZER_FILES, local_dir, tree_hash

LAYOUT_FIELDS = {"nodes", "accelerators_per_node", "memory_bandwidth_gb_per_s", "peak_tflops"}
"""Hardware fields only the plan reads (cluster size, the prior's roofline): they change no measurement."""


def compute_fingerprint(config: SweepConfig, resolved: dict[str, str]) -> Fingerprint:
    target = config.models.target
    target_dir = local_dir(target.path, resolved)
    tokenizer_dir = local_dir(target.tokenizer_path, resolved)
    drafts: dict[str, str | None] = {}
    methods: dict[str, object] = {}
    for arm in arm_plans(config):
        methods[arm.arm] = arm.speculative_config
        model = (arm.speculative_config or {}).get("model")
        if isinstance(model, str):
            draft_dir = local_dir(model, resolved)
            drafts[model] = tree_hash(draft_dir) if draft_dir else None
    engine, engine_version = engine_distribution()
    return Fingerprint(
        target=tree_hash(target_dir) if target_dir else None,
        tokenizer=tree_hash(tokenizer_dir, TOKENIZER_FILES) if tokenizer_dir else None,
        drafts=drafts,
        engine=engine,
        engine_version=engine_version,
        methods=methods,
        hardware=config.hardware.model_dump(mode="json", exclude=LAYOUT_FIELDS) | {"host": _host_description()},
    )


def _host_description() -> str:
    """CPU model of this machine (the GPU model is the config's, checked by NVML when present)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
