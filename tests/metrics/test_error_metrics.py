"""metrics_errors' decode-error rows on hand-made decode_errors (the broker fixtures decode cleanly)."""

from __future__ import annotations

import datetime as dt

import pytest

from amqplens.jobs.metrics import errors
from amqplens.contracts import DECODE_ERRORS, FRAMES

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
        err(5, "frame", "malformed_arguments", "c2", 4),  # repeats a frames row's decode_error: counted from frames only
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


def test_unsettled_at_close_counts_and_rate(spark):
    """4 deliveries on one channel: 1 acked, 1 requeued at close, 1 unconfirmed at close, 1 open at capture end."""
    from amqplens.contracts import DELIVERIES

    from amqplens.jobs.metrics import settlement

    def d(n, direction, outcome):
        row = {c: None for c in DELIVERIES.column_names}
        row.update(delivery_id=f"d{n}", connection_id="c1", capture_id="cap", capture_date=T0.date(), dialect="0-9-1",
                   direction=direction, channel=1, method="deliver" if direction == "from_broker" else "publish",
                   sent_ts=T0 + dt.timedelta(seconds=n), outcome=outcome, frame_ids=[f"f{n}"], exchange="x", source="capture")
        return tuple(row[c] for c in DELIVERIES.column_names)

    rows = [d(1, "from_broker", "acked"), d(2, "from_broker", "requeued_on_close"),
            d(3, "to_broker", "unconfirmed_at_close"), d(4, "from_broker", "open_at_capture_end")]
    deliveries = spark.createDataFrame(rows, DELIVERIES.spark_schema())
    caps = spark.createDataFrame([("cap", T0.date(), T0)], "capture_id string, capture_date date, first_ts timestamp")
    out = settlement(deliveries, caps, 60).where(
        "bucket_seconds = 0 AND entity_kind = 'channel' AND measure = 'unsettled_at_close'").collect()
    got = {r.direction: (r["count"], r.messages, r.rate) for r in out}
    assert got == {"from_broker": (2, 3, 2 / 3), "to_broker": (1, 1, 1.0)}
