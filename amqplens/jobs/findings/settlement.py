"""What happened to messages: unsettled_at_end, returned_unroutable, publish_nacked, rejected_by_consumer (one
aggregate of deliveries for all four), redelivery_loop, slow_settle."""

from __future__ import annotations

from amqplens.jobs.findings.rows import counted, finding, seconds

UNSETTLED = ("unconfirmed_at_close", "requeued_on_close", "unsettled_at_close", "open_at_capture_end")
REJECTED = ("rejected", "modified", "rejected_drop", "nacked_drop")
# outcome -> the kind it is a finding of
OUTCOME_KIND = {**dict.fromkeys(UNSETTLED, "unsettled_at_end"), "returned": "returned_unroutable",
                "nacked_by_broker": "publish_nacked", **dict.fromkeys(REJECTED, "rejected_by_consumer")}

# outcome -> what happened to those messages (the summary's words)
WORDS = {
    "unconfirmed_at_close": "never confirmed by the broker before their channel closed: the publisher does not know "
                            "whether they arrived",
    "requeued_on_close": "delivered but never acknowledged when their channel closed: the broker requeues them",
    "unsettled_at_close": "never settled when their link, session or connection closed",
    "open_at_capture_end": "still unsettled when the capture ended",
    "returned": "returned by the broker as unroutable (basic.return): no queue was bound for them",
    "nacked_by_broker": "nacked by the broker (basic.nack): it did not take responsibility for them",
    "rejected": "settled rejected", "modified": "settled modified (to be delivered again elsewhere or never)",
    "rejected_drop": "rejected by the consumer without requeue (dropped or dead-lettered)",
    "nacked_drop": "nacked by the consumer without requeue (dropped or dead-lettered)",
}


def outcomes(inp):
    """One aggregate of deliveries by (connection, direction, outcome) for the outcomes OUTCOME_KIND names."""
    from pyspark.sql import functions as F

    kind = F.create_map(*[F.lit(x) for pair in OUTCOME_KIND.items() for x in pair])[F.col("outcome")]
    # rows: <= connections x 2 directions x len(OUTCOME_KIND) (a groupBy of the deliveries with these outcomes)
    groups = (inp.deliveries.where(F.col("outcome").isin(*OUTCOME_KIND))
              .groupBy("capture_id", "connection_id", "direction", "outcome")
              .agg(F.count("*").alias("n"), F.min("sent_ts").alias("first_ts"),
                   F.max(F.coalesce("settled_ts", "sent_ts")).alias("last_ts"),
                   F.min("delivery_id").alias("first_id"), F.max("delivery_id").alias("last_id"),
                   F.min("exchange").alias("exchange"), F.min("routing_key").alias("routing_key"),
                   F.min("queue").alias("queue"), F.min("dialect").alias("dialect"))
              .withColumn("kind", kind))
    groups = groups.where((F.col("kind") != "unsettled_at_end") | (F.col("n") >= inp.conf["findings.min_unsettled"]))
    groups = groups.join(F.broadcast(inp.conn_times()), "connection_id", "left")  # rows: one time row per connection
    what = F.when(F.col("direction") == "to_broker", counted(F, F.col("n"), "publish", "publishes")).otherwise(
        counted(F, F.col("n"), "delivery", "deliveries"))
    where = F.when(F.col("routing_key").isNotNull(), F.format_string(
        " (e.g. exchange '%s', routing key '%s')", F.coalesce("exchange", F.lit("")), F.col("routing_key"))) \
        .when(F.col("queue").isNotNull(), F.format_string(" (e.g. '%s')", F.col("queue"))).otherwise(F.lit(""))
    text = F.create_map(*[F.lit(x) for pair in WORDS.items() for x in pair])[F.col("outcome")]
    summary = F.format_string("%s %s%s.", what, text, where)
    evidence = F.format_string("deliveries outcome=%s connection_id=%s direction=%s (%d rows: delivery_id=%s .. %s)",
                               F.col("outcome"), F.col("connection_id"), F.col("direction"), F.col("n"),
                               F.col("first_id"), F.col("last_id"))
    start = F.greatest("first_ts", F.coalesce("conn_start", "first_ts"))
    end = F.when(F.col("kind") == "unsettled_at_end", F.coalesce("conn_end", "last_ts")).otherwise(F.col("last_ts"))
    return finding(groups, F.col("kind"), entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start=start, end=end, summary=summary, evidence=evidence, count="n",
                   key=F.concat_ws("/", "direction", "outcome"))


def redelivery_loop(inp):
    """Messages delivered with redelivered set findings.redelivery_loop_min times or more in one queue."""
    from pyspark.sql import functions as F

    msg = F.coalesce(F.col("message_id"), F.concat_ws("|", "body_sha256", "exchange", "routing_key"))
    # rows: a groupBy of the redelivered deliveries: <= their count, one per (queue, message)
    loops = (inp.deliveries.where(F.col("redelivered") & (F.col("direction") == "from_broker"))
             .join(F.broadcast(_consumer_queues(inp)), ["connection_id", "consumer_tag"], "left")  # rows: <= 1 per consumer
             .withColumn("q", F.coalesce("queue", "consumer_queue", F.lit("")))
             .withColumn("msg", msg)
             .groupBy("capture_id", "q", "msg")
             .agg(F.count("*").alias("n"), F.min("sent_ts").alias("first_ts"), F.max("sent_ts").alias("last_ts"),
                  F.min("connection_id").alias("c0"), F.max("connection_id").alias("c1"),
                  F.min("delivery_id").alias("first_id"), F.max("delivery_id").alias("last_id"),
                  F.min("message_id").alias("message_id"))
             .where(F.col("n") >= inp.conf["findings.redelivery_loop_min"]))
    one = F.when(F.col("c0") == F.col("c1"), F.col("c0"))
    summary = F.format_string("One message%s was delivered again %d times (redelivered) from queue '%s' over %s: it goes "
                              "round in a requeue loop.",
                              F.when(F.col("message_id").isNotNull(), F.format_string(" (message-id '%s')", F.col("message_id")))
                              .otherwise(F.lit("")), F.col("n"), F.col("q"),
                              seconds(F, F.unix_micros("last_ts") - F.unix_micros("first_ts")))
    evidence = F.format_string("deliveries redelivered=true queue=%s (%d rows: delivery_id=%s .. %s)", F.col("q"),
                               F.col("n"), F.col("first_id"), F.col("last_id"))
    return finding(loops, "redelivery_loop", entity_kind="queue", entity=F.col("q"), connection_id=one, start="first_ts",
                   end="last_ts", summary=summary, evidence=evidence, count="n", key=F.sha2(F.col("msg"), 256))


def _consumer_queues(inp):
    from pyspark.sql import functions as F

    # rows: one per (connection, consumer tag)
    return (inp.control.where((F.col("class_name") == "basic") & (F.col("method_name") == "consume")
                              & F.col("consumer_tag").isNotNull())
            .groupBy("connection_id", "consumer_tag").agg(F.first("queue", ignorenulls=True).alias("consumer_queue")))


def slow_settle(inp):
    """Confirms and acks slower than findings.slow_settle_factor times the capture's own median (metrics_latency's
    capture row) and findings.slow_settle_min_ms, counted per consumer, link or channel."""
    from pyspark.sql import functions as F

    c = inp.conf
    keys = ["capture_id", "metric", "direction", "method"]
    # rows: one per (capture, metric, direction, method): the capture rows of the settle latencies
    medians = (inp.read("metrics_latency").where((F.col("bucket_seconds") == 0) & (F.col("entity_kind") == "capture")
                                                 & F.col("metric").isin("publish_confirm", "deliver_settle", "transfer_settle")
                                                 & (F.col("count") >= c["findings.slow_settle_min_count"]))
               .select(*keys, F.col("p50_us").alias("cap_p50"), F.col("count").alias("cap_count")))
    metric = (F.when(F.col("dialect") == "1.0", F.lit("transfer_settle"))
              .when(F.col("direction") == "to_broker", F.lit("publish_confirm")).otherwise(F.lit("deliver_settle")))
    mode = (F.col("dialect") == "1.0") | F.col("settle_mode").isin("confirm", "manual_ack")
    d = (inp.deliveries.where(F.col("settle_latency_us").isNotNull() & mode).withColumn("metric", metric)
         # rows: one median per (capture, metric, direction, method): the deliveries
         .join(F.broadcast(medians), keys)
         .where((F.col("settle_latency_us") >= c["findings.slow_settle_factor"] * F.col("cap_p50"))
                & (F.col("settle_latency_us") >= c["findings.slow_settle_min_ms"] * 1000)))
    kind = (F.when(F.col("consumer_tag").isNotNull(), F.lit("consumer")).when(F.col("link_name").isNotNull(), F.lit("link"))
            .otherwise(F.lit("channel")))
    entity = F.concat_ws("/", "connection_id", F.col("channel").cast("string"), F.coalesce("consumer_tag", "link_name"))
    # rows: one per (entity, metric) after the groupBy of the slow ones
    rows = (d.withColumn("ek", kind).withColumn("e", entity)
            .groupBy("capture_id", "connection_id", "channel", "ek", "e", "metric", "direction", "method", "cap_p50", "cap_count")
            .agg(F.count("*").alias("n"), F.min("settle_latency_us").alias("lo"), F.max("settle_latency_us").alias("hi"),
                 F.min("sent_ts").alias("first_ts"), F.max("settled_ts").alias("last_ts"),
                 F.min("delivery_id").alias("first_id"), F.max("delivery_id").alias("last_id")))
    what = F.when(F.col("metric") == "publish_confirm", F.lit("confirms")).when(
        F.col("metric") == "deliver_settle", F.lit("acks")).otherwise(F.lit("settlements"))
    summary = F.format_string("%d %s took %s to %s, more than %s times the capture's median of %s (%d in all).",
                              F.col("n"), what, seconds(F, F.col("lo")), seconds(F, F.col("hi")),
                              F.lit(f"{c['findings.slow_settle_factor']:g}"), seconds(F, F.col("cap_p50")), F.col("cap_count"))
    evidence = F.format_string("deliveries settle_latency_us>=%d (%d rows: delivery_id=%s .. %s)",
                               F.greatest(F.lit(c["findings.slow_settle_min_ms"] * 1000),
                                          (c["findings.slow_settle_factor"] * F.col("cap_p50")).cast("long")),
                               F.col("n"), F.col("first_id"), F.col("last_id"))
    return finding(rows, "slow_settle", entity_kind=F.col("ek"), entity="e", connection_id="connection_id",
                   channel="channel", start="first_ts", end="last_ts", summary=summary, evidence=evidence, count="n",
                   key=F.concat_ws("/", "metric", "direction", "method"))


RULES = (outcomes, redelivery_loop, slow_settle)
