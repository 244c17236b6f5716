"""`specfleet measure` refuses bad input before measuring anything (exit 2, one line)."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet_cli.main import app
from specfleet_tasks.engine.ports import free_port

runner = CliRunner()


class NotOpenAI(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>hello</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def web_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _measure(*extra: str) -> list[str]:
    return ["measure", "--model", "m", "--concurrency", "1", "--requests", "2", *extra]


def test_endpoint_that_is_not_openai_compatible(web_server: str) -> None:
    result = runner.invoke(app, _measure("--endpoint", web_server, "--prompts", "code"))
    assert result.exit_code == 2
    assert "not an OpenAI-compatible server" in result.stderr


def test_unreachable_endpoint() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, _measure("--endpoint", url, "--prompts", "code"))
    assert result.exit_code == 2 and "unreachable" in result.stderr


def test_broken_prompt_line_names_the_line(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": \n')
    result = runner.invoke(app, _measure("--endpoint", "http://127.0.0.1:9", "--prompts", str(prompts)))
    assert result.exit_code == 2
    assert f"{prompts}:2" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_needs_exactly_one_load_mode() -> None:
    result = runner.invoke(app, ["measure", "--endpoint", "http://x", "--model", "m", "--prompts", "code"])
    assert result.exit_code == 2 and "exactly one of --concurrency or --rate" in result.stderr
