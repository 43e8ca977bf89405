"""frame_rows: the lifecycle's Arrow -> dict hand-off, column by column with all-null columns from a template."""

from __future__ import annotations

import pyarrow as pa

from amqplens.lifecycle.batches import FRAME_COLUMNS, frame_rows


def _reference(batch: pa.RecordBatch) -> list[dict]:
    """What pyarrow itself gives for the same columns (the plain, slower conversion)."""
    return batch.select([c for c in FRAME_COLUMNS if c in batch.schema.names]).to_pylist()


def test_rows_equal_pyarrows_own_conversion_key_order_included():
    batch = pa.RecordBatch.from_pylist([
        {"connection_id": "A", "direction": "to_server", "stream_offset": 8, "ts_us": 5, "frame_type": "method",
         "channel": 1, "delivery_tag": 7, "redelivered": None, "performative": None, "not_a_frame_column": 1},
        {"connection_id": "A", "direction": "to_client", "stream_offset": 0, "ts_us": 6, "frame_type": "body",
         "channel": None, "delivery_tag": None, "redelivered": True, "performative": None, "not_a_frame_column": 2},
    ])
    rows = frame_rows(batch)
    assert rows == _reference(batch)
    assert [list(r) for r in rows] == [list(r) for r in _reference(batch)]
    assert rows[0]["performative"] is None and "not_a_frame_column" not in rows[0]
    rows[0]["channel"] = 99  # each row is its own dict, never the shared template
    assert rows[1]["channel"] is None


def test_a_batch_whose_every_column_is_null_still_gives_one_row_each():
    batch = pa.RecordBatch.from_pydict({"connection_id": pa.nulls(3, pa.string()), "ts_us": pa.nulls(3, pa.int64())})
    assert frame_rows(batch) == [{"connection_id": None, "ts_us": None}] * 3


def test_timestamps_become_ts_us():
    ts = pa.array([1_700_000_000_123_456], pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({"connection_id": ["A"], "ts": ts})
    assert frame_rows(batch) == [{"connection_id": "A", "ts_us": 1_700_000_000_123_456}]
