"""RequestRecords survive DataFrame and Parquet round trips exactly (ns stay int64)."""

from pathlib import Path

import pandas as pd

from specfleet.results.records import RequestRecord
from tasks.store.parquet import (
    RECORDS_SCHEMA,
    frame_to_records,
    read_records_parquet,
    records_to_frame,
    write_records_parquet,
)

BIG_NS = 2**60 + 1  # not representable in float64: a float column would round it

RECORDS = [
    RequestRecord(index=0, prompt_id="a", send_ns=BIG_NS, chunk_ns=(BIG_NS + 10, BIG_NS + 25),
                  chunk_tokens=(1, 3), end_ns=BIG_NS + 30, scheduled_ns=BIG_NS - 5, prompt_tokens=12,
                  usage_completion_tokens=4, finish_reason="length", text="héllo ✓", max_tokens=4,
                  extra={"trailing_tokens": 1.0, "spec_num_draft_tokens": 6.0}),
    RequestRecord(index=1, prompt_id="b", send_ns=7, error="HTTP 500: boom"),
]


def test_frame_round_trip_and_columns() -> None:
    frame = records_to_frame(RECORDS)
    assert list(frame.columns) == RECORDS_SCHEMA.names
    assert frame["end_ns"].dtype == "Int64"
    assert frame["end_ns"].iloc[0] == BIG_NS + 30
    assert frame_to_records(frame) == RECORDS


def test_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "records.parquet"
    write_records_parquet(path, RECORDS)
    assert read_records_parquet(path) == RECORDS
    assert frame_to_records(pd.read_parquet(path)) == RECORDS


def test_columns_keep_their_types_when_all_empty_or_missing(tmp_path: Path) -> None:
    records = [RequestRecord(index=i, prompt_id=str(i), send_ns=i, error="timed out") for i in range(3)]
    path = tmp_path / "failed.parquet"
    write_records_parquet(path, records)
    assert read_records_parquet(path) == records
    write_records_parquet(tmp_path / "none.parquet", [])
    assert read_records_parquet(tmp_path / "none.parquet") == []
