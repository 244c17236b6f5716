"""RequestRecords survive DataFrame and Parquet round trips exactly (ns stay int64), and a cell's
stored Parquet has the fixed schema whatever its records hold."""

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from specfleet.results.records import RequestRecord
from specfleet_tasks.store.parquet import (
    RECORDS_SCHEMA,
    frame_to_records,
    read_records_parquet,
    records_parquet_bytes,
    records_to_frame,
)
from specfleet_tasks.store.results import ResultsStore

BIG_NS = 2**60 + 1  # not representable in float64: a float column would round it

RECORDS = [
    RequestRecord(index=0, prompt_id="a", send_ns=BIG_NS, chunk_ns=(BIG_NS + 10, BIG_NS + 25),
                  chunk_tokens=(1, 3), end_ns=BIG_NS + 30, scheduled_ns=BIG_NS - 5, prompt_tokens=12,
                  usage_completion_tokens=4, finish_reason="length", text="héllo ✓", max_tokens=4,
                  extra={"trailing_tokens": 1.0, "spec_num_draft_tokens": 6.0}),
    RequestRecord(index=1, prompt_id="b", send_ns=7, error="HTTP 500: boom"),
]
ALL_FAILED = [RequestRecord(index=i, prompt_id=str(i), send_ns=i, error="timed out") for i in range(3)]
NO_ERRORS = [RequestRecord(index=i, prompt_id=str(i), send_ns=i, chunk_ns=(i + 1,), chunk_tokens=(1,), end_ns=i + 2,
                           finish_reason="length", text="x") for i in range(2)]


def test_frame_round_trip_and_columns() -> None:
    frame = records_to_frame(RECORDS)
    assert list(frame.columns) == RECORDS_SCHEMA.names
    assert frame["end_ns"].dtype == "Int64"
    assert frame["end_ns"].iloc[0] == BIG_NS + 30
    assert frame_to_records(frame) == RECORDS


def test_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "records.parquet"
    path.write_bytes(records_parquet_bytes(RECORDS))
    assert read_records_parquet(path) == RECORDS
    assert frame_to_records(pd.read_parquet(path)) == RECORDS


@pytest.mark.parametrize("records", [RECORDS, ALL_FAILED, NO_ERRORS, []], ids=["mixed", "all-failed", "no-errors",
                                                                             "none"])
def test_a_stored_cell_has_exactly_the_fixed_schema(tmp_path: Path, records: list[RequestRecord]) -> None:
    """All-failed cells have only null optional columns, error-free ones a null ``error`` column
    and an empty cell empty lists: without the schema Parquet would type those columns null."""
    store = ResultsStore(tmp_path, "sweep")
    stored = store.dir / store.write_records("k", records)
    assert stored == store.records_path("k")
    assert pq.read_schema(stored).remove_metadata() == RECORDS_SCHEMA
    assert read_records_parquet(stored) == records
