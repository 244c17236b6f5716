"""``RequestRecord`` <-> pandas DataFrame (list columns) for per-request Parquet files.

Nanosecond timestamps stay int64 (nullable ``Int64`` where a field may be None): a
float64 column would round them. ``extra`` is stored as a JSON object string.
"""

import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from specfleet.results.records import RequestRecord

OPTIONAL_INT_COLUMNS = ("end_ns", "scheduled_ns", "prompt_tokens", "usage_completion_tokens", "max_tokens")

RECORDS_SCHEMA = pa.schema([
    ("index", pa.int64()),
    ("prompt_id", pa.string()),
    ("send_ns", pa.int64()),
    ("chunk_ns", pa.list_(pa.int64())),
    ("chunk_tokens", pa.list_(pa.int64())),
    *((name, pa.int64()) for name in OPTIONAL_INT_COLUMNS),
    ("finish_reason", pa.string()),
    ("text", pa.string()),
    ("error", pa.string()),
    ("extra", pa.string()),
])


def records_to_frame(records: Sequence[RequestRecord]) -> pd.DataFrame:
    """One row per record, columns in ``RECORDS_SCHEMA`` order."""
    ints = {name: pd.array([getattr(r, name) for r in records], dtype="Int64")
            for name in OPTIONAL_INT_COLUMNS}
    return pd.DataFrame({
        "index": pd.array([r.index for r in records], dtype="int64"),
        "prompt_id": _objects([r.prompt_id for r in records]),
        "send_ns": pd.array([r.send_ns for r in records], dtype="int64"),
        "chunk_ns": _objects([list(r.chunk_ns) for r in records]),
        "chunk_tokens": _objects([list(r.chunk_tokens) for r in records]),
        **ints,
        "finish_reason": _objects([r.finish_reason for r in records]),
        "text": _objects([r.text for r in records]),
        "error": _objects([r.error for r in records]),
        "extra": _objects([json.dumps(r.extra, sort_keys=True) for r in records]),
    })


def frame_to_records(frame: pd.DataFrame) -> list[RequestRecord]:
    """Inverse of ``records_to_frame``, also for a frame read back from Parquet."""
    return [
        RequestRecord(
            index=int(row["index"]),
            prompt_id=str(row["prompt_id"]),
            send_ns=int(row["send_ns"]),
            chunk_ns=_int_tuple(row["chunk_ns"]),
            chunk_tokens=_int_tuple(row["chunk_tokens"]),
            end_ns=_optional_int(row["end_ns"]),
            scheduled_ns=_optional_int(row["scheduled_ns"]),
            prompt_tokens=_optional_int(row["prompt_tokens"]),
            usage_completion_tokens=_optional_int(row["usage_completion_tokens"]),
            max_tokens=_optional_int(row["max_tokens"]),
            finish_reason=_optional_str(row["finish_reason"]),
            text=str(row["text"]),
            error=_optional_str(row["error"]),
            extra={str(k): float(v) for k, v in json.loads(str(row["extra"])).items()},
        )
        for row in frame.to_dict("records")
    ]


def records_parquet_bytes(records: Sequence[RequestRecord]) -> bytes:
    """The one Parquet writer: with the fixed schema, so an all-empty or all-None column keeps
    its type. Bytes, so the results store can write them atomically."""
    buffer = io.BytesIO()
    records_to_frame(records).to_parquet(buffer, engine="pyarrow", schema=RECORDS_SCHEMA, index=False)
    return buffer.getvalue()


def read_records_parquet(path: Path) -> list[RequestRecord]:
    return frame_to_records(pd.read_parquet(path, engine="pyarrow"))


def _objects(values: list[object]) -> pd.Series:
    """An object column, also when empty (pandas would make an empty list float64)."""
    return pd.Series(values, dtype=object)


def _int_tuple(value: object) -> tuple[int, ...]:
    if isinstance(value, np.ndarray | list | tuple):
        return tuple(int(v) for v in value)
    return ()


def _optional_int(value: object) -> int | None:
    if value is None or value is pd.NA or _is_nan(value):
        return None
    if isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    raise TypeError(f"expected an integer or a missing value, got {value!r}")


def _optional_str(value: object) -> str | None:
    return None if value is None or value is pd.NA or _is_nan(value) else str(value)


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and np.isnan(value)
