"""Installed versions of the parts a result depends on, read from package metadata."""

import specfleet
from specfleet_tasks.engine.distribution import distribution_version, engine_distribution


def stack_versions() -> dict[str, str | None]:
    engine, engine_version = engine_distribution()
    return {
        "specfleet": specfleet.__version__,
        engine: engine_version,
        "prefect": distribution_version("prefect"),
        "ray": distribution_version("ray"),
        "mlflow": distribution_version("mlflow", "mlflow-skinny"),
    }
