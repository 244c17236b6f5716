"""The root cause of a failed server start, found in a vLLM log shaped as vLLM writes it."""

from pathlib import Path

from tasks.engine.server import first_error

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
