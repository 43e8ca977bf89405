"""metrics_flow's time-in-state metrics on hand-made flow_events, where no fixture has the state.

No real fixture has channel.flow off or a zero session window (RabbitMQ 3.10 never sends
channel.flow active=false; proton keeps its windows open), so these rows are written by hand
and the expected durations are read off them: a state lasts until the entity's next row,
the last one until the connection ends.
"""

from __future__ import annotations

import datetime as dt

import pytest

from amqplens.jobs.metrics.flow import _state_metrics
from amqplens.contracts import FLOW_EVENTS, FRAMES

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def rows_of(table, rows: list[dict]) -> list[tuple]:
    return [tuple(r.get(c) for c in table.column_names) for r in rows]


def event(n: int, seconds: float, entity: str, **values) -> dict:
    return {"event_id": f"e{n}", "connection_id": "c1", "capture_id": "cap", "capture_date": T0.date(), "ts": at(seconds),
            "frame_id": f"c1-s-{n}", "entity": entity, "event": values.pop("event", "flow"), **values}


@pytest.fixture
def metrics(spark):
    events = [
        # channel 1: channel.flow off from 1 s to 3.5 s, then on until the connection ends at 10 s
        event(1, 0.0, "channel", channel=1, flow_active=True),
        event(2, 1.0, "channel", channel=1, flow_active=False),
        event(3, 3.5, "channel", channel=1, flow_active=True),
        # 1.0 session on channel 0: the peer's incoming window is 0 from 2 s to 6 s
        event(4, 0.5, "session", channel=0, event="window", incoming_window=100, remote_incoming_window=10),
        event(5, 2.0, "session", channel=0, event="window", incoming_window=100, remote_incoming_window=0),
        event(6, 6.0, "session", channel=0, event="window", incoming_window=100, remote_incoming_window=5),
    ]
    fe = spark.createDataFrame(rows_of(FLOW_EVENTS, events), FLOW_EVENTS.spark_schema())
    # the connections columns the metric reads (the connection ends at 10 s)
    conns = spark.createDataFrame([("c1", "1.0", at(10))], "connection_id string, dialect string, end_ts timestamp")
    frames = spark.createDataFrame([], FRAMES.spark_schema())
    caps = spark.createDataFrame([("cap", T0.date(), at(0))], "capture_id string, capture_date date, first_ts timestamp")
    out = _state_metrics(fe, conns, frames, caps, 60).where("bucket_seconds = 0").collect()
    return {(r.entity_kind, r.metric): (r.value, r.observed_us) for r in out}


def test_time_with_channel_flow_off(metrics):
    assert metrics[("channel", "flow_off_us")] == (2.5e6, 10e6)  # off 1 s .. 3.5 s, observed 0 .. 10 s


def test_time_at_zero_session_window(metrics):
    assert metrics[("session", "zero_window_us")] == (4e6, 9.5e6)  # zero 2 s .. 6 s, observed 0.5 s .. 10 s


def test_a_state_of_two_days_is_written_where_it_begins_and_ends(spark):
    """Channel flow off from 30 s for two days, then on; the connection ends 90 s later. Rows are written for the
    buckets where a state began or ended (3 of the 2,882 one-minute buckets the connection spans), and the
    buckets between carry the state forward: written rows plus whole carried buckets give the whole-capture value
    (an oracle independent of the bucketing: the durations read off the events). Before, every bucket had a row."""
    day = 86_400
    events = [
        event(1, 0.0, "channel", channel=1, flow_active=True),
        event(2, 30.0, "channel", channel=1, flow_active=False),
        event(3, 30.0 + 2 * day, "channel", channel=1, flow_active=True),
    ]
    end = 30.0 + 2 * day + 90
    fe = spark.createDataFrame(rows_of(FLOW_EVENTS, events), FLOW_EVENTS.spark_schema())
    conns = spark.createDataFrame([("c1", "0-9-1", at(end))], "connection_id string, dialect string, end_ts timestamp")
    frames = spark.createDataFrame([], FRAMES.spark_schema())
    caps = spark.createDataFrame([("cap", T0.date(), at(0))], "capture_id string, capture_date date, first_ts timestamp")
    rows = _state_metrics(fe, conns, frames, caps, 60).where("metric = 'flow_off_us'").collect()
    whole = [r for r in rows if r.bucket_seconds == 0]
    assert [(r.value, r.observed_us) for r in whole] == [(2 * day * 1e6, end * 1e6)]
    since = lambda t: (t.replace(tzinfo=None) - T0.replace(tzinfo=None)).total_seconds()  # noqa: E731  (Spark: naive UTC)
    per = sorted((since(r.bucket_start), r.value, r.observed_us) for r in rows if r.bucket_seconds == 60)
    # bucket 0: on 0..30 s, off 30..60 s; the off state's last bucket; the on state's first and last bucket
    assert per == [(0, 30e6, 60e6), (2 * day, 30e6, 60e6), (2 * day + 60, 0.0, 60e6)]
    carried = 2 * day // 60 - 1  # the whole buckets between, off all through
    assert sum(v for _, v, _ in per) + carried * 60e6 == whole[0].value
