"""metrics_errors: closes with an error, frames and bytes that did not decode, what the lifecycle flagged in the peers'
traffic, counted per entity and bucket."""

from __future__ import annotations

from amqplens.decode.common.rows import STAGE_FRAME
from amqplens.lake.store import conform
from amqplens.jobs.metrics.frame import Frame, add_row_id, with_buckets, with_entities
from amqplens.contracts.metrics import METRICS_ERRORS


def peer_anomalies(deliveries, flow_events):
    """What the lifecycle flagged in the peers' traffic (kind peer_anomaly): one row per delivery flag (duplicate_tag,
    delivery_id_reused, ...) and per flow event whose reason is an anomaly (credit_exceeded, ack_of_unknown_tag, ...).
    Rows: at most the flags of the deliveries plus the flow events."""
    from pyspark.sql import functions as F

    from amqplens.jobs.validate.quality import anomaly
    from amqplens.contracts import DELIVERIES, FLOW_EVENTS

    def rows(df, condition):
        return df.select("capture_id", "ts", "dialect", F.lit("peer_anomaly").alias("kind"), "connection_id", "channel",
                         F.lit(None).cast("string").alias("raised_by"), F.lit(None).cast("int").alias("code"),
                         condition.alias("condition"))

    flagged = deliveries.where(anomaly(DELIVERIES).isNotNull()).withColumnRenamed("sent_ts", "ts")
    flow = flow_events.where(anomaly(FLOW_EVENTS).isNotNull()).withColumn("dialect", F.lit(None).cast("string"))
    return rows(flagged, F.explode("flags")).unionByName(rows(flow, anomaly(FLOW_EVENTS)))


def errors(frames, decode_errors, caps, bucket_s: int, anomalies=None):
    from pyspark.sql import functions as F

    conn, ch = F.col("connection_id"), F.col("channel")
    is_close = F.col("method_name") == "close"
    kind = (F.when((F.col("class_name") == "channel") & is_close, "channel_exception")
            .when((F.col("class_name") == "connection") & is_close, "connection_exception")
            .when(F.col("performative") == "detach", "link_error")
            .when(F.col("performative") == "end", "session_error")
            .when(F.col("performative") == "close", "connection_error"))
    closes = (
        frames.withColumn("kind", kind)
        .where(F.col("kind").isNotNull() & ((F.col("reply_code").isNotNull() & (F.col("reply_code") != 200))
                                            | F.col("error_condition").isNotNull()))
        .select("capture_id", "ts", "dialect", "kind", "connection_id", "channel",
                F.when(F.col("direction") == "to_client", "broker").otherwise("client").alias("raised_by"),
                F.col("reply_code").alias("code"),
                F.coalesce("error_condition", F.split(F.coalesce("reply_text", F.lit("")), " - ")[0]).alias("condition"))
    )
    bad_frames = frames.where(F.col("decode_error").isNotNull()).select(
        "capture_id", "ts", "dialect", F.lit("decode_error").alias("kind"), "connection_id", "channel",
        F.lit(None).cast("string").alias("raised_by"), F.lit(None).cast("int").alias("code"),
        F.concat(F.lit("frame:"), F.split("decode_error", ":")[0]).alias("condition"))
    first_ts = caps.select("capture_id", F.col("first_ts").alias("cap_ts"))
    # rows: the broadcast join meets one row per capture: decode_errors
    # stage frame repeats a frames row's decode_error (counted above, with its dialect and channel)
    decode = decode_errors.where(F.col("stage") != STAGE_FRAME).join(F.broadcast(first_ts), "capture_id").select(
        "capture_id", F.coalesce("ts", "cap_ts", F.timestamp_micros(F.lit(0))).alias("ts"),
        F.lit(None).cast("string").alias("dialect"), F.lit("decode_error").alias("kind"), "connection_id",
        F.lit(None).cast("int").alias("channel"), F.lit(None).cast("string").alias("raised_by"),
        F.lit(None).cast("int").alias("code"), F.concat_ws(":", "stage", "reason").alias("condition"))
    found = closes.unionByName(bad_frames).unionByName(decode)
    rows = with_entities(
        found if anomalies is None else found.unionByName(anomalies),
        [("connection", conn, conn, None),
         ("channel", F.when(F.col("kind") == "channel_exception", F.concat_ws("/", conn, ch)), conn, ch)])
    keys = [*Frame.KEYS, "kind", "raised_by", "code", "condition"]
    # rows: (closes + bad frames + decode_errors) x 2 entities x 2 buckets, grouped
    out = with_buckets(rows, caps, bucket_s).groupBy(*keys).agg(F.count("*").alias("count"))
    return conform(add_row_id(out, keys), METRICS_ERRORS)


