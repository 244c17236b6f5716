"""`specfleet validate` and `specfleet version`: exit codes and one-line errors."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet_cli.main import app

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


@pytest.mark.parametrize("name", ["demo-cpu.yaml", "demo-policy-cpu.yaml", "llama70b-h200.yaml",
                                  "llama70b-h200-nightly.yaml"])
def test_shipped_configs_exit_0(name: str) -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "configs" / name), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cells"] > 0


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("requests_per_cell", "requests_per_cel", "load.requests_per_cel"),
        ("concurrency: [1, 4, 8]", "concurrency: [-1, 4, 8]", "load.concurrency[0]"),
        ("k: [2, 4]", 'k: [2, "x"]', "arms[1].k[1]"),
        ("{code: 0.5, extraction: 0.2, chat: 0.3}", "{code: 0.5, extraction: 0.2, chat: 0.2}",
         "traffic: prompt_classes: shares sum to 0.9"),
        ("concurrency: {1: 0.3, 4: 0.4, 8: 0.3}", "concurrency: {1: 0.3, 16: 0.4, 8: 0.3}",
         "traffic: concurrency.16: not a load"),
        ("sampling: {greedy: 1.0}", "sampling: {greedy: 0.9}", "traffic: sampling: shares sum to 0.9"),
        ("sampling: {greedy: 1.0}", "sampling: {t1: 1.0}", "traffic: sampling.t1: not a sampling mode of the sweep"),
        ("sampling: {greedy: 1.0}", "sampling: {greedy: 1.5}", "traffic.sampling.greedy"),
        ("{code: 0.5, extraction: 0.2, chat: 0.3}", "{code: 0.5, extraction: -0.2, chat: 0.7}",
         "traffic.prompt_classes.extraction"),
    ],
)
def test_bad_config_exits_2_naming_the_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs" / "demo-cpu.yaml").read_text().replace(old, new))
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert field in result.stderr and str(bad) in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_validate_names_each_class_scored_set() -> None:
    demo = runner.invoke(app, ["validate", str(ROOT / "configs" / "demo-cpu.yaml"), "--json"])
    assert json.loads(demo.stdout)["scored_items"] == {"code": 20, "extraction": 20, "chat": 20}
    pilot = runner.invoke(app, ["validate", str(ROOT / "configs" / "llama70b-h200.yaml"), "--json"])
    assert set(json.loads(pilot.stdout)["scored_items"].values()) == {None}  # its decisions: quality gate not run


def test_a_bad_scored_set_line_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text((ROOT / "configs" / "demo-cpu.yaml").read_text().replace(
        "{name: chat, max_output_tokens: 48}", "{name: chat, max_output_tokens: 48, scored_set: chat-scored.jsonl}"))
    (tmp_path / "chat-scored.jsonl").write_text('{"id": "a", "prompt": "hi", "reference": "Hello", "scorer": "exact"}\n'
                                                '{"id": "b", "prompt": "hi", "scorer": "exact"}\n')
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{tmp_path / 'chat-scored.jsonl'}:2: reference:" in result.stderr


def test_missing_config_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "not found" in result.stderr


def test_version_names_the_stack() -> None:
    result = runner.invoke(app, ["version", "--json"])
    assert result.exit_code == 0
    versions = json.loads(result.stdout)
    assert {"specfleet", "prefect", "ray", "mlflow"} <= set(versions)
    assert versions["prefect"] and versions["ray"] and versions["mlflow"]


@pytest.mark.parametrize("argv", [["calc", "speedup", "--alpha", "abc", "-k", "4", "-c", "0.05"], ["nosuch"]])
def test_console_entry_turns_usage_errors_into_one_line(argv: list[str]) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from specfleet_cli.main import entry; entry()", *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("configured", [None, "7"])
def test_the_embedded_prefect_server_gets_two_minutes_to_start_unless_configured(
        configured: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import sys

    from specfleet_cli.main import entry

    name = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    if configured is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, configured)
    monkeypatch.setattr(sys, "argv", ["specfleet", "calc", "speedup", "--alpha", "0.7", "-k", "4", "-c", "0.05"])
    with pytest.raises(SystemExit) as done:
        entry()
    assert done.value.code == 0
    assert os.environ[name] == (configured or "120")


@pytest.mark.parametrize("name", ["llama70b-h200.yaml", "llama70b-h200-nightly.yaml"])
def test_json_shows_each_arms_server_command_as_the_sweep_starts_it(name: str) -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "configs" / name), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    servers = {server["arm"]: server for server in shown["servers"]}
    assert list(servers) == shown["arms"]
    for arm, server in servers.items():
        args = server["command"].split()
        assert args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
        assert args[args.index("--tensor-parallel-size") + 1] == "2", arm
        assert args[args.index("--model") + 1] == "meta-llama/Llama-3.3-70B-Instruct"
        assert "--port" not in args and ("--speculative-config" in args) == (arm != "baseline")
        assert "VLLM_USE_V2_MODEL_RUNNER" not in server["env"]  # vLLM's own runner on the GPU build
