"""Idle vLLM servers for tests that send requests to a server nobody else is loading."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specfleet.contract import SweepConfig, arm_plans, parse_sweep_config
from specfleet.contract.server_args import server_args
from specfleet_tasks.arm.lifecycle import SERVED_MODEL_NAME
from specfleet_tasks.engine.features import per_request_spec_metrics
from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import ArmServer
from specfleet_tasks.engine.synthetic_plugin import arm_server_env
from tests.integration.sweep_configs import fast_start

SERVER_CONFIG = """
name: test-servers
models: {target: {path: "fixture:target", dtype: float32}, draft: {path: "fixture:draft", dtype: float32}}
engine: {max_model_len: 1024, max_num_seqs: 8, cpu_kvcache_space_gib: 1, startup_timeout_s: 400,
         env: {VLLM_USE_V2_MODEL_RUNNER: "0"}}
arms:
  - {name: baseline, method: baseline}
  - {name: draft, method: draft_model, k: [3]}
  - {name: ngram, method: ngram, k: [3], prompt_lookup_min: 2, prompt_lookup_max: 5}
  - {name: synth, method: draft_model, k: [3], synthetic_acceptance: {acceptance_rates: [1.0, 1.0, 0.0]}}
load: {concurrency: [1], requests_per_cell: 1, request_timeout_s: 120}
prompt_classes: [{name: code, max_output_tokens: 32}]
slo: {ttft_ms: 60000, itl_ms: 60000}
hardware: {accelerator: cpu, accelerator_hour_usd: 1.0, peak_demand_tokens_per_s: 100}
"""


def server_config() -> SweepConfig:
    """The three arm kinds on the fixture models, and a draft arm at synthetic acceptance (every
    draft accepted at positions 1 and 2, none at 3), with test servers' engine settings."""
    config = parse_sweep_config(SERVER_CONFIG, "test-servers")
    return config.model_copy(update={"engine": fast_start(config.engine)})


class IdleServers:
    """Healthy vLLM servers on the fixture models, one per arm kind (baseline, draft, ngram, synth; k=3),
    with the sweep's own server arguments (served as ``SERVED_MODEL_NAME``). ``idle_server(kind)``
    starts one the first time a test asks for it; ``start(*kinds)`` starts several side by side
    (a start is mostly single-threaded imports, so two cores start them faster together). They
    are launched from this thread, which outlives them (``ArmServer.launch``)."""

    def __init__(self, fixture_models: dict[str, str], logs: Path) -> None:
        config = server_config()
        self.engine, self.target = config.engine, config.models.target
        self.arms = {arm.arm.split("-")[0]: arm for arm in arm_plans(config)}
        self.fixture_models, self.logs = fixture_models, logs
        self.started: dict[str, ArmServer] = {}

    def __call__(self, kind: str) -> ArmServer:
        """The idle server of ``kind`` (started now if need be), or a variant started under that name."""
        if kind not in self.started:
            self.start(kind)
        return self.started[kind]

    def variant(self, kind: str, name: str, env: dict[str, str]) -> ArmServer:
        """An idle server of ``kind`` started as ``name`` with ``env`` added to its environment."""
        if name not in self.started:
            self._start({name: self._server(kind, name, env)})
        return self.started[name]

    def variants(self, kind: str, *names: str) -> None:
        """Idle servers of ``kind`` started side by side as ``names`` (``idle_server(name)`` returns one)."""
        self._start({name: self._server(kind, name) for name in names if name not in self.started})

    def start(self, *kinds: str) -> None:
        self._start({kind: self._server(kind, kind) for kind in kinds if kind not in self.started})

    def _start(self, new: dict[str, ArmServer]) -> None:
        for server in new.values():
            server.launch()
        try:
            for server in new.values():
                server.wait_healthy()  # a failed start stops its server and raises
        except BaseException:
            for server in new.values():
                server.stop()
            raise
        self.started |= new

    def stop(self) -> None:
        with ThreadPoolExecutor(max_workers=len(self.started) or 1) as pool:
            list(pool.map(ArmServer.stop, self.started.values()))

    def _server(self, kind: str, name: str, env: dict[str, str] | None = None) -> ArmServer:
        arm, port = self.arms[kind], free_port()
        args = server_args(self.engine, self.target, arm, self.fixture_models, port, SERVED_MODEL_NAME,
                           tensor_parallel_size=1, per_request_spec_metrics=per_request_spec_metrics(arm))
        return ArmServer(args, arm_server_env(self.engine, arm) | (env or {}), "127.0.0.1", port,
                         self.logs / f"{name}.log", self.engine.startup_timeout_s)
