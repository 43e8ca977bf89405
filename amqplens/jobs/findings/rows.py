"""The shape every rule returns: a few rows per capture, before labels, ids and the partial flag (job.py adds them)."""

from __future__ import annotations

from amqplens.contracts.findings import SEVERITY

# what each rule's DataFrame holds; ``key`` tells two findings of one kind and entity apart (a reply code, a start time)
RAW = ("capture_id", "kind", "severity", "entity_kind", "entity", "connection_id", "channel", "start_ts", "end_ts",
       "summary", "evidence", "count", "key")


def _col(F, value, cast: str):
    if value is None:
        return F.lit(None).cast(cast)
    return (F.col(value) if isinstance(value, str) else value).cast(cast)


def finding(df, kind, *, entity_kind, entity, connection_id, start, end, summary, evidence, count,
            channel=None, key=None, severity=None):
    """``df``'s rows as findings of ``kind`` (a kind, or a Column of kinds: one query for several); each argument a
    column name or a Column (``entity_kind`` a literal string or a Column); severity defaults to the kind's
    (amqplens/contracts/findings.py)."""
    from pyspark.sql import functions as F

    kinds = F.lit(kind) if isinstance(kind, str) else kind
    default = F.create_map(*[F.lit(x) for pair in SEVERITY.items() for x in pair])[kinds]
    return df.select(
        F.col("capture_id"),
        kinds.alias("kind"),
        (default if severity is None else F.coalesce(severity, default)).alias("severity"),
        (F.lit(entity_kind) if isinstance(entity_kind, str) else entity_kind).alias("entity_kind"),
        _col(F, entity, "string").alias("entity"),
        _col(F, connection_id, "string").alias("connection_id"),
        _col(F, channel, "int").alias("channel"),
        _col(F, start, "timestamp").alias("start_ts"),
        _col(F, end, "timestamp").alias("end_ts"),
        summary.alias("summary"),
        evidence.alias("evidence"),
        _col(F, count, "long").alias("count"),
        _col(F, key if key is not None else F.lit(""), "string").alias("key"),
    )


def seconds(F, us):
    """A duration in microseconds as '4.48 s' (or '12 ms' below one second)."""
    return F.when(us >= 1_000_000, F.format_string("%.2f s", us / 1e6)).otherwise(F.format_string("%.0f ms", us / 1e3))


def counted(F, n, one: str, many: str):
    """'1 publish', '3 publishes'."""
    return F.concat(n.cast("string"), F.lit(" "), F.when(n == 1, F.lit(one)).otherwise(F.lit(many)))


def ids(F, table: str, column: str, *values):
    """Evidence text: ``table column=v1,v2`` (null values left out)."""
    return F.concat(F.lit(f"{table} {column}="), F.concat_ws(",", *values))
