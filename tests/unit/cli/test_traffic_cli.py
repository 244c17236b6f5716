"""`specfleet traffic` refuses bad input in one line and exit 2, never showing URL credentials.
What a real Prometheus answers (several models, none, no samples) is tested against one in
``tests/integration/test_traffic_prometheus.py``."""

import re
from pathlib import Path

from typer.testing import CliRunner

from specfleet_cli.main import app
from specfleet_tasks.engine.ports import free_port

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


def test_a_config_without_concurrency_levels(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    text = (root / "configs" / "demo-cpu.yaml").read_text()
    config = tmp_path / "rates.yaml"
    without_traffic = re.sub(r"\ntraffic:\n(  .*\n)+", "\n", text)
    config.write_text(without_traffic.replace("concurrency: [1, 4, 8]", "rates_per_s: [2.0]"))
    result = runner.invoke(app, ["traffic", "--prometheus", "http://127.0.0.1:9", "--config", str(config)])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == (f"error: {config}: load.concurrency is empty: "
                                        "the estimate snaps to the config's levels")
