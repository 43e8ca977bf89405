"""metrics_flow: how long each channel, consumer, link, session and connection spent in each flow-control state.

A flow_events row's state lasts until the next row of the same entity, or the
end of the connection; an interval counts in the bucket it starts in and the
one it ends in, and the buckets between carry its state forward (no rows). Heartbeats come
from frames (0-9-1 heartbeat frames, 1.0 empty frames) and the negotiated
interval from connections.
"""

from __future__ import annotations

from amqplens.lake.store import conform
from amqplens.jobs.metrics.frame import Frame, add_row_id, bucket_of, with_buckets
from amqplens.contracts.metrics import METRICS_FLOW

ENTITY = ("connection_id", "entity", "channel", "consumer_tag", "link_handle")


def _intervals(flow_events, connections, frames):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*ENTITY).orderBy("ts", "stream_offset", "event_id")
    conn = connections.select("connection_id", "dialect", F.col("end_ts").alias("conn_end"))
    # the causing frame's stream_offset is the last part of its frame_id (amqplens/contracts/tables.py): no join with frames
    offset = F.element_at(F.split("frame_id", "-"), -1).cast("long")
    # rows: connection_id is unique on the right: flow_events; the window keeps them
    iv = (flow_events.withColumn("stream_offset", offset).join(conn, "connection_id", "left")
          .withColumn("t0", F.unix_micros("ts"))
          .withColumn("t1", F.unix_micros(F.coalesce(F.lead("ts").over(w), "conn_end")))
          .withColumn("t1", F.greatest("t0", F.coalesce("t1", "t0"))))
    c, ch = F.col("connection_id"), F.col("channel").cast("string")
    name = (F.when(F.col("entity") == "connection", c)
            .when(F.col("entity") == "consumer", F.concat_ws("/", c, ch, "consumer_tag"))
            # a 1.0 link by its handle, a 0-10 one (no handle) by its destination: two destinations on one session
            # are two links (plots.link_entity names them alike)
            .when(F.col("entity") == "link", F.concat_ws("/", c, ch, F.coalesce(
                F.concat(F.lit("handle "), F.col("link_handle").cast("string")),
                F.concat(F.lit("destination "), F.col("consumer_tag")))))
            .otherwise(F.concat_ws("/", c, ch)))
    return iv.withColumn("entity_kind", F.col("entity")).withColumn("entity", name) \
        .withColumn("channel", F.when(F.col("entity_kind") != "connection", F.col("channel")))


def _cut(iv, caps, bucket_s: int):
    """Each interval once in the bucket it starts in and once in the bucket it ends in (overlap_us = its part inside),
    and once for the whole capture.

    The buckets between are left out: each lies wholly inside this one interval (an entity's intervals do not
    overlap), so the entity's state there is the one of its last row before (carried forward; see the metric
    definitions). A bucket row is written where a state began or ended, never once per bucket of a long state:
    a channel idle for 30 days is 2 rows, not 43,200.
    """
    from pyspark.sql import functions as F

    b = bucket_s * 1_000_000
    # rows: one caps row per capture; then each interval in at most 2 buckets and the whole: rows <= 3 x intervals.
    # One explode for both (a null bucket start is the whole capture): as a union of two selects of the intervals,
    # Spark computed the intervals' window twice (the 300 MB lake's state metrics: 25-34 JVM CPU s)
    iv = iv.drop("capture_date").join(caps.select("capture_id", "capture_date", "first_ts"), "capture_id")
    s0 = F.floor(F.col("t0") / b) * b
    s1 = F.floor(F.greatest(F.col("t1") - 1, F.col("t0")) / b) * b
    starts = F.concat(F.array_distinct(F.array(s0, s1)), F.array(F.lit(None).cast("long")))
    whole = F.col("bs").isNull()
    return (iv.select("*", F.explode(starts).alias("bs"))
            .withColumn("overlap_us", F.when(whole, F.col("t1") - F.col("t0")).otherwise(
                F.greatest(F.lit(0), F.least(F.col("t1"), F.col("bs") + b) - F.greatest("t0", "bs"))))
            .withColumn("bucket_start", F.when(whole, F.coalesce("first_ts", F.timestamp_micros(F.lit(0))))
                        .otherwise(F.timestamp_micros("bs")))
            .withColumn("bucket_seconds", F.when(whole, F.lit(0)).otherwise(F.lit(bucket_s)).cast("int"))
            .drop("bs"))


def _state_metrics(flow_events, connections, frames, caps, bucket_s: int):
    from pyspark.sql import functions as F

    rows = _cut(_intervals(flow_events, connections, frames), caps, bucket_s)
    ov = F.col("overlap_us")
    limited = F.col("prefetch_count") > 0
    during = lambda cond: F.sum(F.when(cond, ov).otherwise(0))  # noqa: E731
    # rows: groupBy, fewer than the cut intervals
    agg = rows.groupBy(*Frame.KEYS).agg(
        F.sum(ov).alias("obs"),
        F.sum(F.when(limited, ov)).alias("pref_obs"),
        during(limited & (F.col("in_flight") >= F.col("prefetch_count"))).alias("at_limit"),
        F.sum(F.when(limited, ov * F.col("in_flight") / F.col("prefetch_count"))).alias("util_w"),
        F.max(F.when(limited, F.col("in_flight") / F.col("prefetch_count"))).alias("util_max"),
        during(F.col("blocked")).alias("blocked"),
        during(F.col("flow_active") == F.lit(False)).alias("flow_off"),
        F.max(F.col("link_credit").isNotNull()).alias("has_credit"),
        during(F.col("link_credit") == 0).alias("zero_credit"),
        during((F.col("remote_incoming_window") == 0) | (F.col("incoming_window") == 0)).alias("zero_window"),
    )
    k = F.col("entity_kind")
    prefetch_entity = k.isin("channel", "consumer") & F.col("pref_obs").isNotNull()
    m = lambda name, cond, value, observed: F.struct(  # noqa: E731
        F.lit(name).alias("metric"), F.when(cond, value).cast("double").alias("value"), observed.cast("long").alias("observed_us"))
    metrics = F.array(
        m("prefetch_utilisation", prefetch_entity & (F.col("pref_obs") > 0), F.col("util_w") / F.col("pref_obs"), F.col("pref_obs")),
        m("prefetch_utilisation_max", prefetch_entity, F.col("util_max"), F.col("pref_obs")),
        m("at_prefetch_limit_us", prefetch_entity, F.col("at_limit"), F.col("pref_obs")),
        m("blocked_us", k == "connection", F.col("blocked"), F.col("obs")),
        m("flow_off_us", k == "channel", F.col("flow_off"), F.col("obs")),
        m("zero_credit_us", (k == "link") & F.col("has_credit"), F.col("zero_credit"), F.col("obs")),
        m("zero_window_us", k == "session", F.col("zero_window"), F.col("obs")),
    )
    return (agg.select(*Frame.KEYS, F.explode(metrics).alias("m")).select(*Frame.KEYS, "m.*")
            .where(F.col("value").isNotNull()).withColumn("direction", F.lit(None).cast("string")))


def _heartbeat_interval_s():
    from pyspark.sql import functions as F

    ten = F.col("dialect") == "1.0"
    # A 1.0 peer must hear from the other side within its own advertised idle-time-out.
    idle_ms = F.when(F.col("direction") == "to_server", F.col("server_idle_timeout_ms")).otherwise(F.col("client_idle_timeout_ms"))
    value = F.when(ten, idle_ms / 1000.0).otherwise(F.col("heartbeat").cast("double"))
    return F.when(value > 0, value)


def _heartbeat_metrics(connections, frames, caps, bucket_s: int, counted: bool = True):
    """Heartbeat frames sent and heartbeats missed (each gap between two frames of a direction longer than the
    interval misses floor(gap / interval)) per connection, direction and bucket.

    ``counted``: the frames are first counted map-side per (connection, direction, bucket, slot), a slot being no
    wider than the interval (at most 1 s): a gap inside a slot is shorter than the interval and misses nothing, so
    only the gaps between a slot's last frame and the next slot's first can miss, and the window orders slots, not
    frames. A connection's frames share its dialect (the decoder's), so the dialect rides along in the slot key.
    Else each frame is a slot of its own (a shuffle fewer, for small captures); the same rows either way.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    conn = connections.select("connection_id", "heartbeat", "server_idle_timeout_ms", "client_idle_timeout_ms")
    us = F.unix_micros("ts")
    # a slot is the start of its time range, in integers (pmod floors for times before 1970 too): exact at any ts
    slot_us = F.greatest(F.lit(1), F.floor(F.least(F.coalesce("interval_s", F.lit(1.0)), F.lit(1.0)) * 1_000_000))
    # rows: connection_id is unique in connections: frames, grouped before any shuffle into slots (<= frames;
    # about the capture's duration per second and connection for a busy one, a few per short one)
    hb = F.col("frame_type").isin("heartbeat", "empty").cast("long")
    slots = (frames.select("capture_id", "connection_id", "direction", "dialect", "ts", "frame_type")
             .join(conn, "connection_id").withColumn("interval_s", _heartbeat_interval_s()))
    slots = (slots.groupBy("capture_id", "connection_id", "direction", "dialect", "interval_s",
                           bucket_of(F.col("ts"), bucket_s).alias("_bucket"), (us - F.pmod(us, slot_us)).alias("_slot"))
             .agg(F.min("ts").alias("ts"), F.max("ts").alias("_last_ts"), F.sum(hb).alias("is_hb")) if counted else
             slots.select("capture_id", "connection_id", "direction", "dialect", "interval_s", "ts",
                          F.col("ts").alias("_last_ts"), hb.alias("is_hb")))
    w = Window.partitionBy("connection_id", "direction").orderBy("ts", "_last_ts")
    # rows: the slots, each once
    f = (slots.withColumn("gap_s", (us - F.unix_micros(F.lag("_last_ts").over(w))) / 1e6)
         .withColumn("missed", F.when(F.col("gap_s") > F.col("interval_s"), F.floor(F.col("gap_s") / F.col("interval_s"))).otherwise(0))
         .withColumn("entity_kind", F.lit("connection")).withColumn("entity", F.col("connection_id"))
         .withColumn("channel", F.lit(None).cast("int")))
    agg = with_buckets(f, caps, bucket_s).groupBy(*Frame.KEYS, "direction").agg(
        F.sum("is_hb").alias("sent"), F.sum("missed").alias("missed"), F.max("interval_s").alias("interval_s"))
    m = lambda name, value: F.struct(F.lit(name).alias("metric"), value.cast("double").alias("value"))  # noqa: E731
    metrics = F.array(m("heartbeats_sent", F.col("sent")), m("heartbeat_interval_s", F.col("interval_s")),
                      m("missed_heartbeats", F.when(F.col("interval_s").isNotNull(), F.col("missed"))))
    return (agg.select(*Frame.KEYS, "direction", F.explode(metrics).alias("m")).select(*Frame.KEYS, "direction", "m.*")
            .where(F.col("value").isNotNull()).withColumn("observed_us", F.lit(None).cast("long")))


def flow(flow_events, connections, frames, caps, bucket_s: int, counted: bool = True):
    out = _state_metrics(flow_events, connections, frames, caps, bucket_s).unionByName(
        _heartbeat_metrics(connections, frames, caps, bucket_s, counted))
    return conform(add_row_id(out, [*Frame.KEYS, "metric", "direction"]), METRICS_FLOW)
