"""The environment build's own lines: what pip is doing, read off pip's output, and the time left."""

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("python_env", Path(__file__).parents[3] / "infra" / "python_env.py")
assert spec is not None and spec.loader is not None
python_env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(python_env)


def test_the_phase_follows_the_installers_own_lines() -> None:
    phase = python_env._Phase("installing specfleet")
    assert phase.describe() == "installing specfleet"
    assert phase.read("Collecting prefect<4,>=3.4") is None and phase.read("  Downloading prefect.whl (5.9 MB)") is None
    assert phase.describe() == "installing specfleet: 1 packages collected"
    resolved = "installing specfleet: Resolved 270 packages in 2.31s, fetching them"
    assert phase.read("Resolved 270 packages in 2.31s") == resolved
    compiling = "installing specfleet: Installed 270 packages in 1.48s, compiling them to bytecode"
    assert phase.read("Installed 270 packages in 1.48s") == compiling == phase.describe()
    compiled = "Bytecode compiled 41057 files in 38.2s"
    assert phase.read(compiled) == f"installing specfleet: {compiled}"
    assert phase.read("Installing collected packages: ray, prefect, specfleet") == phase.describe()
    assert phase.describe() == "installing specfleet: installing 3 packages"


def test_uv_is_given_pips_settings_and_defaults_without_the_local_ones_that_do_not_exist(tmp_path: Path) -> None:
    """pip's defaults too: its best match across indexes, and bytecode (without it, a vLLM server
    start imports for 33 s instead of 14 s where PYTHONDONTWRITEBYTECODE is set)."""
    settings = {"extra-index-url": ["https://download.pytorch.org/whl/cpu", f"file://{tmp_path}/missing"],
                "find-links": [str(tmp_path)], "constraint": [str(tmp_path / "absent.txt")], "cert": ["/etc/ca.pem"]}
    assert python_env.uv_options(settings) == [
        "--compile-bytecode", "--index-strategy", "unsafe-best-match", "--extra-index-url", "https://download.pytorch.org/whl/cpu",
        "--find-links", str(tmp_path)]


def test_the_expected_time_is_this_machines_last_build_else_a_first_builds(tmp_path: Path) -> None:
    assert python_env._expected_s(tmp_path) == python_env.FIRST_BUILD_S
    python_env._record(tmp_path, 187.26)
    assert json.loads((tmp_path / python_env.TIMES_FILE).read_text()) == {"last_build_s": 187.3}
    assert python_env._expected_s(tmp_path) == 187.3
    (tmp_path / python_env.TIMES_FILE).write_text("not json")
    assert python_env._expected_s(tmp_path) == python_env.FIRST_BUILD_S
