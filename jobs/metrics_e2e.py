"""End-to-end latency: each delivery from the broker matched to its publish, in linear time.

The rule (docs: schemas/metrics.py, metric ``end_to_end``):

- A message's match key is its message-id where it has one, else its body
  hash with where it was sent: (exchange, routing key) for 0-8/0-9/0-9-1 and
  0-10, the link address for 1.0.
- Queues are FIFO: in each queue, the first deliveries (``redelivered`` not
  set) of a key take the publishes of that key in time order. The n-th first
  delivery takes the n-th publish, unless fewer publishes of the key had been
  sent by the time of the delivery; then it is unmatched (published before the
  capture started, or by a client not captured) and takes none.
- A redelivery takes the message of a requeued delivery of its key and queue
  (nack/reject with requeue, basic.recover, unacked at close, 1.0/0-10
  released or modified), in the same way and order, and so the publish of
  that delivery's message.
- Unmatched deliveries have no value and count in ``missing``; nothing is
  guessed.

Every step is a window over a key or an equi-join on (key, rank), so the row
counts stay within the input's: the largest intermediate is the union of the
publishes and the deliveries.
"""

from __future__ import annotations

REQUEUED = ("nacked_requeue", "rejected_requeue", "recovered", "requeued_on_close", "released", "modified")
# Requeues of one message followed back to its first delivery (one equi-join each); a redelivery
# further down a chain counts in missing. Requeue chains are short: a consumer that requeues a
# message for ever shows in the redelivered rate.
HOPS = 4


def match_key(F):
    """The message's identity as far as the wire shows it (null: cannot be matched)."""
    ten = F.col("dialect") == "1.0"
    where = F.when(ten, F.concat_ws("\x1f", F.lit("1.0"), F.coalesce("queue", F.lit("")))).otherwise(
        F.concat_ws("\x1f", F.lit("x"), F.coalesce("exchange", F.lit("")), F.coalesce("routing_key", F.lit(""))))
    by_body = F.when(F.col("body_sha256").isNotNull(), F.concat_ws("\x1f", F.lit("b"), where, "body_sha256"))
    return F.when(F.col("message_id").isNotNull(), F.concat(F.lit("m\x1f"), F.col("message_id"))).otherwise(by_body)


def fifo_take(supply, demand, key, sub):
    """Each demand row's rank among the supply of its key in FIFO order, or null when none was left.

    supply: (key..., ts, id); demand: (key..., sub..., ts, id, more). Within each (key, sub) the j-th
    demand row takes the next supply row not yet taken, provided it was there at the demand's ts.
    With P_k the supply of the key at the time of the k-th demand, the number taken after j demands
    is m_j = j + min(0, min_{k<=j}(P_k - k)), so the j-th takes rank m_j when m_j > m_{j-1}.
    Rows: supply + demand (one window each, no join).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    both = supply.select(*key, "ts", "id", F.lit(1).alias("_s")).unionByName(
        demand.select(*key, "ts", "id", F.lit(0).alias("_s")))
    # supply before demand at the same instant: a publish and its delivery can share a microsecond
    upto = Window.partitionBy(*key).orderBy("ts", F.desc("_s"), "id").rowsBetween(Window.unboundedPreceding, 0)
    avail = both.withColumn("_p", F.sum("_s").over(upto)).where(F.col("_s") == 0).select("id", "_p")
    # rows: demand (the join is on the demand's own unique id)
    d = demand.join(avail, "id")
    w = Window.partitionBy(*key, *sub).orderBy("ts", "id")
    d = d.withColumn("_j", F.row_number().over(w))
    d = d.withColumn("_lo", F.min(F.col("_p") - F.col("_j")).over(w.rowsBetween(Window.unboundedPreceding, 0)))
    d = d.withColumn("_m", F.col("_j") + F.least(F.lit(0), F.col("_lo")))
    took = F.col("_m") > F.coalesce(F.lag("_m").over(w), F.lit(0))
    return d.withColumn("rank", F.when(took, F.col("_m"))).drop("_p", "_j", "_lo", "_m")


def ranked(rows, key):
    """rows with ``rank``: their place among the rows of their key in time order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return rows.withColumn("rank", F.row_number().over(Window.partitionBy(*key).orderBy("ts", "id")))


def end_to_end(deliveries):
    """The from_broker deliveries with ``p_ts``: the time of the publish they were matched to (null: unmatched)."""
    from pyspark.sql import functions as F

    d = deliveries.withColumn("_key", match_key(F))
    key = ["capture_id", "_key"]
    pubs = d.where((F.col("direction") == "to_broker") & F.col("_key").isNotNull()).select(
        *key, F.col("sent_ts").alias("ts"), F.col("delivery_id").alias("id"))
    dels = d.where(F.col("direction") == "from_broker")
    # a delivery's queue; without one (its basic.consume not captured), its consumer stands for it
    dels = dels.withColumn("_q", F.coalesce("queue", F.concat_ws("/", "connection_id", "channel", "consumer_tag", "link_name")))
    sub = ["_q"]
    demand = dels.where(F.col("_key").isNotNull()).select(
        *key, *sub, F.col("sent_ts").alias("ts"), F.col("delivery_id").alias("id"),
        F.coalesce("redelivered", F.lit(False)).alias("_re"),
        F.when(F.col("outcome").isin(*REQUEUED), F.coalesce("settled_ts", "sent_ts")).alias("_rq_ts"))

    # first deliveries take publishes; rows: publishes + first deliveries, then a join on (key, rank)
    # whose output is at most one row per first delivery (rank is unique within a key)
    first = fifo_take(pubs, demand.where(~F.col("_re")), key, sub)
    first = first.join(ranked(pubs, key).select(*key, "rank", F.col("ts").alias("p_ts")), [*key, "rank"], "left")
    origin = first.select("id", "p_ts")

    # redeliveries take requeued deliveries of their key and queue: link = (redelivery id, requeued delivery id)
    qkey = [*key, *sub]
    requeues = demand.where(F.col("_rq_ts").isNotNull()).select(*qkey, F.col("_rq_ts").alias("ts"), "id")
    again = fifo_take(requeues, demand.where(F.col("_re")).select(*qkey, "ts", "id"), qkey, [])
    link = again.where(F.col("rank").isNotNull()).join(
        ranked(requeues, qkey).select(*qkey, "rank", F.col("id").alias("prev")), [*qkey, "rank"]).select("id", "prev")
    origin = origin.unionByName(_resolve(link, origin))
    # rows: deliveries (origin holds at most one row per delivery id)
    return dels.join(origin, F.col("delivery_id") == F.col("id"), "left").drop("id", "_key", "_q")


def _resolve(link, origin):
    """p_ts of each redelivery: follow prev back to a first delivery, at most HOPS requeues deep.

    Each hop is an equi-join on a delivery id, at most one row on the right: rows <= redeliveries.
    """
    from pyspark.sql import functions as F

    step = link.select(F.col("id").alias("_via"), F.col("prev").alias("_up"))
    for _ in range(HOPS - 1):
        link = (link.join(step, F.col("prev") == F.col("_via"), "left")
                .select("id", F.coalesce("_up", "prev").alias("prev")))
    return link.join(origin.withColumnRenamed("id", "prev"), "prev").select("id", "p_ts")
