"""metrics_errors' decode-error rows on hand-made decode_errors (the broker fixtures decode cleanly)."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.metrics import errors
from schemas import DECODE_ERRORS, FRAMES

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_decode_errors_counted_by_stage_and_reason_per_capture_and_connection(spark):
    def err(n, stage, reason, connection_id, seconds):
        return (f"e{n}", "cap", T0.date(), connection_id, "to_server" if connection_id else None, stage, n * 100, 10,
                reason, "detail", T0 + dt.timedelta(seconds=seconds) if connection_id else None, b"", 10, None)

    rows = [
        err(1, "tcp", "tcp_missing_segment", "c1", 1),
        err(2, "tcp", "tcp_missing_segment", "c1", 2),
        err(3, "codec", "bad_frame_end", "c2", 3),
        err(4, "capture", "bad_record_header", None, 0),  # no connection, no time: counted at the capture's start
    ]
    decode_errors = spark.createDataFrame(rows, DECODE_ERRORS.spark_schema())
    frames = spark.createDataFrame([], FRAMES.spark_schema())
    caps = spark.createDataFrame([("cap", T0.date(), T0)], "capture_id string, capture_date date, first_ts timestamp")
    out = errors(frames, decode_errors, caps, 60).where("bucket_seconds = 0").collect()
    whole = {r.condition: r["count"] for r in out if r.entity_kind == "capture"}
    assert whole == {"tcp:tcp_missing_segment": 2, "codec:bad_frame_end": 1, "capture:bad_record_header": 1}
    per_conn = {(r.connection_id, r.condition): r["count"] for r in out if r.entity_kind == "connection"}
    assert per_conn == {("c1", "tcp:tcp_missing_segment"): 2, ("c2", "codec:bad_frame_end"): 1}
    assert {r.kind for r in out} == {"decode_error"}
