"""`specfleet traffic` refuses bad input in one line and exit 2, never showing URL credentials.
The answers of a real Prometheus are in ``tests/integration/test_traffic_prometheus.py``; the
stand-in here answers only the first question (which models ran in the window)."""

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tasks.engine.ports import free_port

runner = CliRunner()


def _one_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_a_bad_since_names_the_flag() -> None:
    result = runner.invoke(app, ["traffic", "--prometheus", "http://127.0.0.1:9", "--since", "7days"])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == "error: --since: '7days' is not a duration like 30s, 90m, 7h or 1d"


def test_an_unreachable_prometheus_names_the_url_without_credentials() -> None:
    url = f"http://admin:s3cret@127.0.0.1:{free_port()}/prom"
    result = runner.invoke(app, ["traffic", "--prometheus", url, "--since", "1h"])
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert line.startswith(f"error: http://127.0.0.1:{url.rsplit(':', 1)[1]}: Prometheus unreachable (")
    assert "s3cret" not in result.output and "admin" not in result.output


def test_not_an_http_url() -> None:
    result = runner.invoke(app, ["traffic", "--prometheus", "prometheus:9090"])
    assert result.exit_code == 2 and "not an http(s) URL of a Prometheus server" in _one_line(result.stderr)


class ModelsInWindow(BaseHTTPRequestHandler):
    """Answers every instant query with one series per model in ``models``."""

    models: list[str] = []

    def do_GET(self) -> None:
        result = [{"metric": {"model_name": m}, "value": [1.8e9, "10"]} for m in self.models]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@dataclass(frozen=True)
class StandIn:
    url: str
    models: list[str]


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    models: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (ModelsInWindow,), {"models": models}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield StandIn(f"http://127.0.0.1:{server.server_address[1]}", models)
    server.shutdown()
    server.server_close()


def test_several_models_need_model(stand_in: StandIn) -> None:
    stand_in.models.extend(["llama-70b", "qwen-7b"])
    result = runner.invoke(app, ["traffic", "--prometheus", stand_in.url, "--since", "90m"])
    assert result.exit_code == 2
    assert _one_line(result.stderr).endswith("several models in the last 90m (llama-70b, qwen-7b): "
                                             "choose one with --model")
    result = runner.invoke(app, ["traffic", "--prometheus", stand_in.url, "--model", "mistral"])
    assert result.exit_code == 2
    assert _one_line(result.stderr).startswith("error: --model mistral: no samples of vllm:num_requests_running")


def test_no_samples_in_the_window(stand_in: StandIn) -> None:
    result = runner.invoke(app, ["traffic", "--prometheus", stand_in.url, "--since", "30s"])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == f"error: {stand_in.url}: no samples of vllm:num_requests_running in the last 30s"


def test_a_config_without_concurrency_levels(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    text = (root / "configs" / "demo-cpu.yaml").read_text()
    config = tmp_path / "rates.yaml"
    config.write_text(text.replace("concurrency: [1, 4]", "rates_per_s: [2.0]"))
    result = runner.invoke(app, ["traffic", "--prometheus", "http://127.0.0.1:9", "--config", str(config)])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == (f"error: {config}: load.concurrency is empty: "
                                        "the estimate snaps to the config's levels")
