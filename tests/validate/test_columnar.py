"""The driver's counts (amqplens/jobs/validate/columnar.py) against the Spark tally (tally.py and the reference jobs,
the reference): every check of every table, on the fixtures' lake and on a copy whose rows were broken in the lake.

Bad rows tried (written into a copy of the lake, the demo capture's rows): a frame key twice, a frame of no
connection, a dialect outside the set, a frame a day after the capture, frames whose content did not decode, a frame
gone (its connection's bytes no longer add up, a delivery names it), a negative settle latency, a delivery naming a
frame that does not exist and one with a null element among its frames, a delivery sent two days before its capture,
flagged deliveries, a flow event of no event with an anomaly reason and one whose reason is null, a settlement rate
of 1.5 and one NaN, latency percentiles out of order and one null, a capture whose connection count is wrong, a
connection whose source is unknown and one whose codec error bytes exceed its stream, a null and a negative value in
columns read only for their not-null and not-negative checks (which statistics otherwise prove clean).
"""

from __future__ import annotations

import math
import shutil

import pytest

from amqplens.contracts import ALL_TABLES
from amqplens.contracts import expectations as ex
from amqplens.contracts.expectations import Settings
from amqplens.jobs.validate import columnar, tally
from amqplens.jobs.validate.quality import RunTables, SparkBatch, reference_jobs
from amqplens.lake.store import TableStore
from tests.validate.conftest import CAPTURES, capture_id

pytestmark = [pytest.mark.spark]

DEMO = capture_id(CAPTURES[0])


def _spark_counts(store, ids, conf, names):
    tables = RunTables(store, ids)
    try:
        out = {}
        for name in names:
            t = ALL_TABLES[name]
            elsewhere = frozenset(ex.reference_check(t, c) for c in ex.references(t))
            out[name] = tally.count(t, SparkBatch(t, tables, conf).light(), Settings(), elsewhere)
        for job in reference_jobs(tables, names):
            found = job()
            for one in out.values():
                one.add(found)
        return out
    finally:
        tables.close()


def _compare(store, ids, conf) -> dict[str, float | int | None]:
    names = [name for name in ALL_TABLES if store.rows(name, ids)]
    want = _spark_counts(store, ids, conf, names)
    got = columnar.count_tables(TableStore(None, store.root), ids, names, Settings(), conf["validate.window_slack_s"])
    assert set(got) == set(want)
    seen = {}
    for name in names:
        assert got[name].rows == want[name].rows, name
        assert got[name].means == want[name].means, name
        assert set(got[name].values) == set(want[name].values), name
        for check, value in want[name].values.items():
            mine = got[name].values[check]
            if isinstance(value, float):
                assert mine == pytest.approx(value, rel=1e-12), check
            else:
                assert mine == value, check
            seen[check] = mine
    return seen


def _ids(store):
    return sorted(store.read_arrow("captures", ["capture_id"])["capture_id"].to_pylist())


def test_the_same_counts_on_the_fixtures(quality_lake):
    conf, store = quality_lake
    seen = _compare(store, _ids(store), conf)
    # the fixtures' peers' anomalies (observations) and nothing else
    assert {check for check, n in seen.items() if n and check != "connections.codec_error_share"} == \
        {"deliveries.anomalies", "flow_events.anomalies"}
    assert len(seen) > 100


def _break(spark, store):
    """Write broken copies of the demo capture's rows of several tables into ``store`` (a copy of the lake)."""
    from pyspark.sql import functions as F

    def rows(name):
        return store.read(name, [DEMO])

    def write(name, df):
        store.write(name, df.localCheckpoint(), units={DEMO: f"test/broken-{name}"})

    frames = rows("frames")
    ids = [r.frame_id for r in frames.orderBy("frame_id").limit(20).collect()]
    fid = F.col("frame_id")
    write("frames", frames.union(frames.where(fid == ids[0])).where(fid != ids[5])
          .withColumn("connection_id", F.when(fid == ids[1], F.lit("no-such-connection")).otherwise(F.col("connection_id")))
          .withColumn("dialect", F.when(fid == ids[2], F.lit("0-9-2")).otherwise(F.col("dialect")))
          .withColumn("ts", F.when(fid == ids[3], F.col("ts") + F.expr("INTERVAL 1 DAY")).otherwise(F.col("ts")))
          .withColumn("decode_error", F.when(fid.isin(*ids[6:12]), F.lit("field_table: broken")).otherwise(F.col("decode_error")))
          # a not-null column read only for that check (its statistics no longer prove it clean)
          .withColumn("stream_offset", F.when(fid == ids[13], F.lit(None).cast("long")).otherwise(F.col("stream_offset"))))

    d = rows("deliveries")
    dids = [r.delivery_id for r in d.where(F.col("settle_latency_us").isNotNull()).orderBy("delivery_id").limit(6).collect()]
    did = F.col("delivery_id")
    write("deliveries", d
          .withColumn("settle_latency_us", F.when(did == dids[0], F.lit(-5)).otherwise(F.col("settle_latency_us")))
          .withColumn("frame_ids", F.when(did == dids[1], F.array_append("frame_ids", F.lit("no-such-frame")))
                      .when(did == dids[2], F.array_append("frame_ids", F.lit(None).cast("string")))
                      .when(did == dids[3], F.array_append("frame_ids", F.lit(ids[5])))
                      .otherwise(F.col("frame_ids")))
          .withColumn("settled_by_frame_id", F.when(did == dids[3], F.lit("no-such-frame")).otherwise(F.col("settled_by_frame_id")))
          .withColumn("sent_ts", F.when(did == dids[3], F.col("sent_ts") - F.expr("INTERVAL 2 DAYS")).otherwise(F.col("sent_ts")))
          .withColumn("flags", F.when(did.isin(*dids[4:6]), F.array(F.lit("duplicate_tag"))).otherwise(F.col("flags")))
          .withColumn("channel", F.when(did == dids[5], F.lit(None).cast("int")).otherwise(F.col("channel")))
          .withColumn("body_size", F.when(did == dids[4], F.lit(-1).cast("long")).otherwise(F.col("body_size"))))

    fe = rows("flow_events")
    eids = [r.event_id for r in fe.orderBy("event_id").limit(3).collect()]
    eid = F.col("event_id")
    write("flow_events", fe
          .withColumn("event", F.when(eid == eids[0], F.lit(None).cast("string")).otherwise(F.col("event")))
          .withColumn("reason", F.when(eid == eids[0], F.lit("credit_exceeded")).when(eid == eids[1], F.lit(None).cast("string"))
                      .when(eid == eids[2], F.lit("credit")).otherwise(F.col("reason"))))

    s = rows("metrics_settlement")
    sids = [r.metric_row_id for r in s.orderBy("metric_row_id").limit(2).collect()]
    sid = F.col("metric_row_id")
    write("metrics_settlement", s.withColumn("rate", F.when(sid == sids[0], F.lit(1.5)).when(sid == sids[1], F.lit(float("nan")))
                                             .otherwise(F.col("rate"))))

    lat = rows("metrics_latency")
    lids = [r.metric_row_id for r in lat.orderBy("metric_row_id").limit(2).collect()]
    lid = F.col("metric_row_id")
    write("metrics_latency", lat.withColumn("p50_us", F.when(lid == lids[0], F.col("max_us") + 1).otherwise(F.col("p50_us")))
          .withColumn("p90_us", F.when(lid == lids[1], F.lit(None).cast("long")).otherwise(F.col("p90_us"))))

    write("captures", rows("captures").withColumn("connections", F.col("connections") + 1))

    c = rows("connections")
    # the last connections: the first holds the broken frames, whose byte accounting its source must not hide
    cids = [r.connection_id for r in c.orderBy(F.desc("connection_id")).limit(2).collect()]
    cid = F.col("connection_id")
    write("connections", c.withColumn("source", F.when(cid == cids[0], F.lit(None).cast("string")).otherwise(F.col("source")))
          .withColumn("codec_error_bytes_to_server", F.when(cid == cids[1], F.col("bytes_to_server") * 10)
                      .otherwise(F.col("codec_error_bytes_to_server"))))


def test_the_same_counts_on_broken_rows(spark, quality_lake, tmp_path):
    conf, store = quality_lake
    lake = tmp_path / "lake"
    shutil.copytree(store.root, lake, ignore=shutil.ignore_patterns("_quality"))
    copy = TableStore(spark, str(lake))
    _break(spark, copy)
    seen = _compare(copy, _ids(copy), conf.with_overrides(lake__root=str(lake)))
    # the key sets by Arrow's kernels (the reference of keyset.py's compiled table) count the same
    names = [name for name in ALL_TABLES if copy.rows(name, _ids(copy))]
    counted = {compiled: columnar.count_tables(TableStore(None, str(lake)), _ids(copy), names, Settings(),
                                               conf["validate.window_slack_s"], compiled=compiled) for compiled in (True, False)}
    assert {n: t.values for n, t in counted[True].items()} == {n: t.values for n, t in counted[False].items()}
    # each break was counted (not a comparison of zeros): by the Spark tally, which the driver's equals
    for check, least in (("frames.key_unique", 1), ("frames.ref.connection_id", 1), ("frames.enum.dialect", 1),
                         ("frames.in_capture_window", 1), ("frames.decode_error_share", 6), ("deliveries.non_negative", 1),
                         ("deliveries.ref.frame_ids", 3), ("deliveries.ref.settled_by_frame_id", 1),
                         ("deliveries.in_capture_window", 1), ("deliveries.anomalies", 2), ("flow_events.anomalies", 1),
                         ("flow_events.enum.event", 0), ("flow_events.required", 1), ("metrics_settlement.rate_range", 2),
                         ("metrics_latency.percentile_order", 1), ("metrics_latency.required", 0), ("captures.connections", 1),
                         ("request_responses.ref.request_frame_id", 0), ("frames.required", 1), ("deliveries.required", 1)):
        assert seen[check] >= least, (check, seen[check])
    assert sum(seen[f"connections.byte_accounting.{d}"] for d in ex.TO_SERVER_CLIENT) >= 1
    assert seen["connections.codec_error_share"] > 0 and not math.isnan(seen["connections.codec_error_share"])
