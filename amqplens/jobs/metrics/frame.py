"""The shape every metric table shares: time buckets, entities, a row id (amqplens/contracts/metrics.py's leading columns)."""

from __future__ import annotations


class Frame:
    # the columns that place a metric row: capture, bucket, entity
    KEYS = ("capture_id", "capture_date", "bucket_start", "bucket_seconds", "entity_kind", "entity", "connection_id",
            "channel", "dialect")


def with_entities(df, specs):
    """One row per (input row, entity it counts for): the capture always, then each spec whose name is not null.

    ``specs`` are (kind, name column, connection_id column or None, channel column or None).
    """
    from pyspark.sql import functions as F

    none_s, none_i = F.lit(None).cast("string"), F.lit(None).cast("int")
    structs = [F.struct(F.lit("capture").alias("_k"), F.col("capture_id").alias("_e"), none_s.alias("_c"), none_i.alias("_ch"))]
    for kind, name, conn, ch in specs:
        structs.append(F.struct(F.lit(kind).alias("_k"), name.cast("string").alias("_e"),
                                (none_s if conn is None else conn.cast("string")).alias("_c"),
                                (none_i if ch is None else ch.cast("int")).alias("_ch")))
    # rows: df x (1 + len(specs)), a constant (at most 8 in metrics). Spread by inline, then filtered: Spark's
    # higher-order filter over the array of structs cost 27 s for 2.7M rows where inline + where cost 5.4 s
    drop = [c for c in ("connection_id", "channel") if c in df.columns]
    return (df.select("*", F.inline(F.array(*structs))).drop(*drop).where(F.col("_e").isNotNull())
            .withColumnsRenamed({"_k": "entity_kind", "_e": "entity", "_c": "connection_id", "_ch": "channel"}))


def bucket_of(ts_col, bucket_s: int):
    from pyspark.sql import functions as F

    b = bucket_s * 1_000_000
    return F.timestamp_micros(F.floor(F.unix_micros(ts_col) / b) * b)


def with_buckets(df, caps, bucket_s: int, ts: str = "ts"):
    """Two rows per input row: its time bucket (bucket_seconds = bucket_s) and the whole capture (bucket_seconds = 0).

    Joins ``caps`` (capture_id, capture_date, first_ts) for the partition column and the whole-capture bucket start.
    """
    from pyspark.sql import functions as F

    epoch = F.timestamp_micros(F.lit(0))
    buckets = F.array(
        F.struct(bucket_of(F.col(ts), bucket_s).alias("s"), F.lit(bucket_s).alias("n")),
        F.struct(F.coalesce("first_ts", epoch).alias("s"), F.lit(bucket_s * 0).alias("n")),
    )
    # rows: caps has one row per capture, so df x 2
    return (df.join(caps.select("capture_id", "capture_date", "first_ts"), "capture_id")
            .select("*", F.explode(buckets).alias("_b"))
            .select("*", F.col("_b.s").alias("bucket_start"), F.col("_b.n").cast("int").alias("bucket_seconds"))
            .drop("_b", "first_ts"))


def add_row_id(df, keys):
    """The row id, and an ``entity_label`` placeholder that ``amqplens.jobs.labels.with_labels`` fills in the metrics job."""
    from pyspark.sql import functions as F

    parts = [F.coalesce(F.col(k).cast("string"), F.lit("\\N")) for k in keys]
    return (df.withColumn("metric_row_id", F.sha2(F.concat_ws("|", *parts), 256))
            .withColumn("entity_label", F.lit(None).cast("string")))
