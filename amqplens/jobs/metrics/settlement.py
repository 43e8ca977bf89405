"""metrics_settlement: outcome, settle mode, redelivery and unsettled-at-close counts and rates per entity and bucket."""

from __future__ import annotations

from amqplens.lake.store import conform
from amqplens.jobs.metrics.frame import Frame, add_row_id, bucket_of, with_buckets, with_entities
from amqplens.jobs.metrics.inputs import delivery_entities
from amqplens.contracts.metrics import METRICS_SETTLEMENT

UNSETTLED_AT_CLOSE = ("unconfirmed_at_close", "unsettled_at_close", "requeued_on_close", "open_at_capture_end")


def settlement(deliveries, caps, bucket_s: int):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Counts add up: deliveries alike in every column an entity, a bucket or a measure reads are counted once
    # first (the "atoms", by map-side aggregation), and only the atoms are spread over entities and buckets.
    atom = ["capture_id", "dialect", "direction", "connection_id", "channel", "consumer_tag", "link_name", "queue",
            "exchange", "outcome", "settle_mode"]
    # rows: <= deliveries (grouped before any shuffle)
    atoms = (deliveries.withColumn("ts", bucket_of(F.col("sent_ts"), bucket_s)).groupBy(*atom, "ts")
             .agg(F.count("*").alias("n"), F.sum(F.coalesce("redelivered", F.lit(False)).cast("int")).alias("n_re"),
                  F.sum(F.col("outcome").isin(*UNSETTLED_AT_CLOSE).cast("int")).alias("n_un")))
    measures = F.array(
        F.struct(F.lit("outcome").alias("measure"), F.col("outcome").alias("value"), F.col("n").alias("w")),
        F.struct(F.lit("settle_mode").alias("measure"), F.coalesce("settle_mode", F.lit("unknown")).alias("value"),
                 F.col("n").alias("w")),
        F.struct(F.lit("redelivered").alias("measure"), F.lit("true").alias("value"), F.col("n_re").alias("w")),
        F.struct(F.lit("unsettled_at_close").alias("measure"), F.lit("true").alias("value"), F.col("n_un").alias("w")),
    )
    rows = with_entities(atoms, delivery_entities(F))
    rows = with_buckets(rows, caps, bucket_s).select("*", F.explode(measures).alias("m")).select("*", "m.*")
    group = [*Frame.KEYS, "direction"]
    keys = [*group, "measure", "value"]
    # rows: atoms (<= deliveries) x entities (<= 8) x 2 buckets x 4 measures, then groupBy and a window over its groups
    out = rows.groupBy(*keys).agg(F.sum("w").cast("long").alias("count"), F.sum("n").alias("rows"))
    out = out.withColumn("messages", F.max(F.when(F.col("measure") == "redelivered", F.col("rows"))).over(Window.partitionBy(*group)))
    out = out.withColumn("rate", F.col("count") / F.col("messages"))
    return conform(add_row_id(out, keys), METRICS_SETTLEMENT)


