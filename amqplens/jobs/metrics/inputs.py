"""What the metric tables read: the entities a delivery counts for, the control frames, deliveries with their queue."""

from __future__ import annotations

def delivery_entities(F):
    """(kind, name, connection, channel) of every entity a delivery row counts for."""
    conn, ch = F.col("connection_id"), F.col("channel")
    name = lambda *parts: F.concat_ws("/", *parts)  # noqa: E731
    ten = F.col("dialect") == "1.0"
    return [
        ("connection", conn, conn, None),
        ("channel", name(conn, ch), conn, ch),
        ("consumer", F.when(F.col("consumer_tag").isNotNull(), name(conn, ch, "consumer_tag")), conn, ch),
        ("link", F.when(F.col("link_name").isNotNull(), name(conn, ch, "link_name")), conn, ch),
        ("queue", F.when(~ten, F.col("queue")), None, None),
        ("address", F.when(ten, F.col("queue")), None, None),
        ("exchange", F.when(F.col("exchange") == "", F.lit("(default)")).otherwise(F.col("exchange")), None, None),
    ]


CONTROL_COLUMNS = ("capture_id", "connection_id", "ts", "dialect", "direction", "channel", "class_name", "method_name",
                   "performative", "consumer_tag", "queue", "reply_code", "reply_text", "error_condition", "decode_error",
                   "handle", "link_name")


# what latency and settlement read of deliveries (not frame_ids, properties_json, trace_json: the bulk of a row)
DELIVERY_COLUMNS = ("delivery_id", "capture_id", "connection_id", "dialect", "direction", "channel", "consumer_tag",
                    "link_name", "method", "exchange", "routing_key", "queue", "message_id", "body_sha256", "redelivered",
                    "settle_mode", "sent_ts", "settled_ts", "settle_latency_us", "outcome")


def control_frames(frames):
    """The frames metrics reads besides flow's: basic.consume, the opens, attaches and closes, and those with a
    decode_error (the attaches name the links in ``amqplens.jobs.labels``)."""
    from pyspark.sql import functions as F

    cm = lambda c, m: (F.col("class_name") == c) & (F.col("method_name") == m)  # noqa: E731
    return frames.where(
        cm("basic", "consume") | cm("connection", "open-ok") | cm("connection", "close") | cm("channel", "close")
        | F.col("performative").isin("open", "attach", "detach", "end", "close") | F.col("decode_error").isNotNull()
    ).select(*CONTROL_COLUMNS)


def deliveries_with_queue(deliveries, frames):
    """0-9-1 deliveries to a consumer carry no queue: take it from the consumer's basic.consume."""
    from pyspark.sql import functions as F

    # rows: groupBy <= the basic.consume frames; the left join meets at most one row per (connection, tag): deliveries
    consumes = (
        frames.where((F.col("class_name") == "basic") & (F.col("method_name") == "consume") & F.col("consumer_tag").isNotNull()
                     & (F.col("consumer_tag") != ""))
        .groupBy("connection_id", "consumer_tag").agg(F.first("queue").alias("consume_queue"))
    )
    return (deliveries.join(consumes, ["connection_id", "consumer_tag"], "left")
            .withColumn("queue", F.coalesce("queue", "consume_queue")).drop("consume_queue"))


