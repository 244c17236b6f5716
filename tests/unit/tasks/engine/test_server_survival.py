"""After a cell, a killed server must count as dead even while the kernel is still tearing it
down: its sockets close (the load client sees refused connections) before its exit can be
reaped. ``ArmServer.survived`` waits that out; here real child processes play the server."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet_tasks.engine.ports import free_port
from specfleet_tasks.engine.server import ArmServer

SERVE_HEALTH = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""
CLOSED_THEN_EXITING = "import time; time.sleep(1.0)"  # no socket at all, exits a second later


def _server(tmp_path: Path, port: int, script: str) -> ArmServer:
    server = ArmServer([], {}, "127.0.0.1", port, tmp_path / "server.log", startup_timeout_s=10)
    server.process = subprocess.Popen([sys.executable, "-c", script, str(port)], start_new_session=True)
    return server


@pytest.fixture
def port() -> int:
    return free_port()


def test_a_server_that_answers_health_survived(tmp_path: Path, port: int) -> None:
    server = _server(tmp_path, port, SERVE_HEALTH)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert time.monotonic() < deadline, "the health server did not start"
            time.sleep(0.1)
        assert server.survived(grace_s=0.0)
    finally:
        server.kill()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_server_whose_sockets_are_gone_is_dead_once_it_exits(tmp_path: Path, port: int) -> None:
    server = _server(tmp_path, port, CLOSED_THEN_EXITING)
    assert server.alive()  # the process is still there, as a killed vLLM is for a moment
    assert not server.survived(grace_s=10.0)


def test_a_reaped_server_did_not_survive(tmp_path: Path, port: int) -> None:
    server = _server(tmp_path, port, "pass")
    assert server.process is not None
    server.process.wait(timeout=10)
    assert not server.survived(grace_s=0.0)
