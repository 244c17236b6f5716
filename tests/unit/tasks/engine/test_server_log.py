"""The root cause of a failed server start, found in a vLLM log shaped as vLLM writes it."""

from pathlib import Path

from specfleet_tasks.engine.server import first_error, log_tail, start_failure

EARLIER_START = "RuntimeError: from an earlier start of the same arm\n"
LOG = """(APIServer pid=1) WARNING 11-30 00:27:23 [system_utils.py:255] fd limit errors like `OSError: [Errno 24]`
(Worker pid=2) ERROR 11-30 00:27:54 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=2) ERROR 11-30 00:27:54 [multiproc_executor.py:1063]     raise ValueError(
(Worker pid=2) ERROR 11-30 00:27:54 [multiproc_executor.py:1063] ValueError: Available memory on node 0 is less
(EngineCore pid=3) ERROR 11-30 00:27:54 [core.py:1510] RuntimeError: Worker failed with error 'Available memory'
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_first_exception_of_this_start_is_the_cause(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(EARLIER_START + LOG)
    assert first_error(log, offset=len(EARLIER_START)) == "ValueError: Available memory on node 0 is less"
    assert first_error(log) == EARLIER_START.strip()


def test_no_exception_and_no_log_give_none(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG.splitlines()[0] + "\nINFO: started\n")
    assert first_error(log) is None
    assert first_error(tmp_path / "missing.log") is None


# What vLLM CPU 0.32 wrote when a start failed, kept from real starts (paths replaced by <tmp>,
# <fixtures>, <site-packages>): the integration tests start one failing server for real (a
# taken port); every start failure takes the same path, so the others are checked on their logs.
DATA = Path(__file__).parent / "data"
EXITED = "vLLM server exited with code 1 before becoming healthy"


def test_a_folder_that_is_not_a_model_names_vllms_own_error() -> None:
    log = DATA / "vllm_start_not_a_model.log"
    assert first_error(log) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    message = start_failure(EXITED, log, 0)
    assert message.startswith(f"{EXITED}: pydantic_core._pydantic_core.ValidationError")
    assert f"; log {log} ends:\n" in message
    assert "Should have a `model_type` key in its config.json" in message.split("ends:", 1)[1]


def test_a_kv_cache_larger_than_memory_names_the_workers_error_not_the_engines() -> None:
    """The worker's ValueError is the root cause; the engine core's and the API server's
    RuntimeErrors after it only repeat it, and vLLM's own tail is the last of them."""
    log = DATA / "vllm_start_kv_cache_too_large.log"
    cause = first_error(log)
    assert cause is not None and cause.startswith("ValueError: Available memory on node 0")
    assert "less than requested memory for kv (4096.0 GiB)" in cause
    assert log_tail(log).splitlines()[-1] != cause
    assert start_failure(EXITED, log, 0).startswith(f"{EXITED}: {cause}; log {log} ends:")


def test_a_start_that_wrote_no_exception_says_so_with_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO: loading\nINFO: still loading\n")
    assert start_failure("vLLM server not healthy within 300s", log, 0) == (
        f"vLLM server not healthy within 300s; log {log} ends:\nINFO: loading\nINFO: still loading")
