"""Errors by code: connection_error, channel_error, link_error from metrics_errors (time-bucket rows: when), and
consumer_cancelled from the broker's basic.cancel frames."""

from __future__ import annotations

from amqplens.jobs.findings.rows import finding

# metrics_errors kind -> finding kind; 403/530 and amqp:unauthorized-access are access_refused (connections.py)
ERROR_KIND = {"channel_exception": "channel_error", "connection_exception": "connection_error",
              "connection_error": "connection_error", "link_error": "link_error", "session_error": "link_error"}
WHAT = {"channel_exception": "channel", "connection_exception": "connection", "connection_error": "connection",
        "link_error": "link (detach)", "session_error": "session (end)"}


def errors(inp):
    from pyspark.sql import functions as F

    refused = (F.col("kind").isin("connection_exception", "connection_error")
               & (F.col("code").isin(403, 530) | (F.col("condition") == "amqp:unauthorized-access")))
    keys = ["capture_id", "connection_id", "kind", "raised_by", "code", "condition"]
    # rows: the connection rows of metrics_errors in time buckets, one per (connection, error) after the groupBy
    rows = (inp.read("metrics_errors").where((F.col("entity_kind") == "connection") & (F.col("bucket_seconds") > 0)
                                             & F.col("kind").isin(*ERROR_KIND) & ~refused
                                             # reply-code 0: pika's normal channel.close (BlockingChannel.close())
                                             & (F.coalesce(F.col("code"), F.lit(-1)) != 0))
            .groupBy(*keys)
            .agg(F.sum("count").alias("n"), F.min("bucket_start").alias("b0"),
                 F.max(F.timestamp_micros(F.unix_micros("bucket_start") + F.col("bucket_seconds") * 1_000_000)).alias("b1"),
                 F.min("metric_row_id").alias("row_id"))
            .join(F.broadcast(inp.conn_times()), "connection_id", "left"))  # rows: one time row per connection
    fkind = F.create_map(*[F.lit(x) for pair in ERROR_KIND.items() for x in pair])[F.col("kind")]
    what = F.create_map(*[F.lit(x) for pair in WHAT.items() for x in pair])[F.col("kind")]
    name = F.concat_ws(" ", F.col("code").cast("string"), F.col("condition"))
    summary = F.format_string("The %s closed %d %s%s with %s.", F.coalesce("raised_by", F.lit("peer")), F.col("n"), what,
                              F.when(F.col("n") > 1, F.lit("s")).otherwise(F.lit("")), name)
    evidence = F.format_string("metrics_errors kind=%s connection_id=%s code=%s condition=%s (first metric_row_id=%s)",
                               F.col("kind"), F.col("connection_id"), F.coalesce(F.col("code").cast("string"), F.lit("-")),
                               F.col("condition"), F.col("row_id"))
    # a connection closed by the broker with an error is critical (the kind's severity); a client's own is a warning
    sev = F.when((fkind == "connection_error") & (F.col("raised_by") != "broker"), F.lit("warning"))
    return finding(rows, fkind, entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start=F.greatest("b0", F.coalesce("conn_start", "b0")), end=F.least("b1", F.coalesce("conn_end", "b1")),
                   summary=summary, evidence=evidence, count="n", severity=sev,
                   key=F.concat_ws("/", "kind", "raised_by", F.col("code").cast("string"), "condition"))


def consumer_cancelled(inp):
    """basic.cancel sent by the broker (to the client): the consumer's queue was deleted or it failed over."""
    from pyspark.sql import functions as F

    rows = inp.control.where((F.col("class_name") == "basic") & (F.col("method_name") == "cancel")
                             & (F.col("direction") == "to_client"))
    # rows: one queue per (connection, consumer tag)
    queues = (inp.control.where((F.col("class_name") == "basic") & (F.col("method_name") == "consume"))
              .groupBy("connection_id", "consumer_tag").agg(F.first("queue", ignorenulls=True).alias("q")))
    rows = rows.join(F.broadcast(queues), ["connection_id", "consumer_tag"], "left")
    summary = F.format_string("The broker cancelled consumer '%s'%s (basic.cancel): its queue was deleted or became "
                              "unavailable; it receives nothing more.", F.coalesce("consumer_tag", F.lit("")),
                              F.when(F.col("q").isNotNull(), F.format_string(" on queue '%s'", F.col("q"))).otherwise(F.lit("")))
    entity = F.concat_ws("/", "connection_id", F.col("channel").cast("string"), "consumer_tag")
    return finding(rows, "consumer_cancelled", entity_kind="consumer", entity=entity, connection_id="connection_id",
                   channel="channel", start="ts", end="ts", summary=summary,
                   evidence=F.concat(F.lit("frames frame_id="), F.col("frame_id")), count=F.lit(1), key=F.col("frame_id"))


RULES = (errors, consumer_cancelled)
