"""Baseline runs with known server-life and run-to-run variances, for the noise and decision-rule tests."""

import numpy as np

from specfleet.stats.runs import ConfigKey, RunValue

SERVER_VAR, RUN_VAR = 0.004, 0.009


def config(i: int) -> ConfigKey:
    return (f"class{i % 3}", "concurrency", float(1 + i // 3), "greedy")


def runs(rng: np.random.Generator, server_var: float = SERVER_VAR, run_var: float = RUN_VAR) -> list[RunValue]:
    """A sweep-like design: ten baseline configurations, each opened on one of five server lives and
    closed on the next; every other one repeated on its opening server; plus one unrepeated arm."""
    offset = {f"s{s}": rng.normal(0.0, np.sqrt(server_var)) for s in range(6)}
    out = []
    for i in range(10):
        servers = [f"s{i % 5}", f"s{(i + 1) % 5}"] + ([f"s{i % 5}"] if i % 2 == 0 else [])
        mu = 4.0 + 0.1 * i
        out += [RunValue("qualified_tokens_per_s", f"base-{i}-{n}", "baseline", config(i), s,
                         mu + offset[s] + rng.normal(0.0, np.sqrt(run_var))) for n, s in enumerate(servers)]
        out.append(RunValue("qualified_tokens_per_s", f"draft-{i}", "draft", config(i), "s5",
                            mu + 0.05 + offset["s5"] + rng.normal(0.0, np.sqrt(run_var))))
    return out
