"""The columns the cross-row checks of amqplens/contracts/expectations.py read, added to a table's run slice.

Pure DataFrame -> DataFrame functions: each adds a column holding the offending
value(s) as text, or null, so the expectation is "this column is null" and its
failure samples show what was wrong. ``batch`` puts them together for one table.
With ``text=False`` (the tally's batch, which only counts the non-null rows) such a
column holds ``true`` instead of the text: building the text of every row's parts
cost the 300 MB lake's frames tally 19.5-23.2 JVM CPU s against 5-7 for the tests
alone.
"""

from __future__ import annotations

import dataclasses

from amqplens.contracts import Table, table
from amqplens.contracts import expectations as ex

SOURCE_CAPTURE = "capture"  # rows read off the wire (other sources: logs and traces, whose times are not packet times)


def _listed(parts, text: bool = True):
    """'a, b' of the parts ``(offending, shown)`` whose test holds, or null when none does; ``text=False``: true
    instead of the text. The text is built only for a row with an offending part."""
    import functools

    from pyspark.sql import functions as F

    if not parts:
        return F.lit(None).cast("string" if text else "boolean")
    some = functools.reduce(lambda a, b: a | b, (offending for offending, _ in parts))
    if not text:
        return F.when(some, F.lit(True))
    return F.when(some, F.concat_ws(", ", *(F.when(offending, shown) for offending, shown in parts)))


def _shown(column: str):
    from pyspark.sql import functions as F

    return F.concat(F.lit(f"{column}="), F.col(column).cast("string"))


def with_required(t: Table, df, text: bool = True):
    from pyspark.sql import functions as F

    return df.withColumn(ex.REQUIRED_NULL, _listed([(F.col(c).isNull(), F.lit(c)) for c in ex.required_columns(t)], text))


def with_negative(t: Table, df, text: bool = True):
    from pyspark.sql import functions as F

    return df.withColumn(ex.NEGATIVE, _listed([(F.col(c) < 0, _shown(c)) for c in ex.non_negative_columns(t)], text))


def anomaly(t: Table):
    """The anomaly a peer's traffic shows in a row of ``t`` (deliveries: its flags; flow_events: its reason unless
    ``REASON_NOT_ANOMALY`` says otherwise), as text, else null; None for the other tables."""
    from pyspark.sql import functions as F

    if t.name == "deliveries":
        return F.when(F.size(F.coalesce("flags", F.array().cast("array<string>"))) > 0, F.array_join("flags", ","))
    if t.name == "flow_events":
        benign = F.lit(False)
        for event, reasons in ex.REASON_NOT_ANOMALY.items():
            benign = benign | ((F.col("event") == event) & (F.lit(True) if reasons is None else F.col("reason").isin(*reasons)))
        return F.when(F.col("reason").isNotNull() & ~benign, F.col("reason"))
    return None


def with_anomaly(t: Table, df):
    column = anomaly(t)
    return df if column is None else df.withColumn(ex.ANOMALY, column)


def with_window(t: Table, df, captures, slack_s: int, text: bool = True):
    """Timestamps outside [first_ts - slack, last_ts + slack] of their capture; a bucket may start up to its length earlier.

    Rows of another source (a log's line-number times) and captures without packets are not judged.
    """
    from pyspark.sql import functions as F

    window = captures.select("capture_id", (F.unix_micros("first_ts") - slack_s * 1_000_000).alias("_lo"),
                             (F.unix_micros("last_ts") + slack_s * 1_000_000).alias("_hi")).dropDuplicates(["capture_id"])
    judged = F.col("source") == SOURCE_CAPTURE if "source" in t.column_names else F.lit(True)
    bucket = F.col("bucket_seconds").cast("long") * 1_000_000 if "bucket_seconds" in t.column_names else F.lit(0)

    def outside(c):
        us = F.unix_micros(c)
        lo = us + bucket if c == "bucket_start" else us
        return judged & ((lo < F.col("_lo")) | (us > F.col("_hi")))

    # rows: window has one row per capture (dropDuplicates): df
    return (df.join(F.broadcast(window), "capture_id", "left")
            .withColumn(ex.OUTSIDE_WINDOW, _listed([(outside(c), _shown(c)) for c in ex.window_columns(t)], text))
            .drop("_lo", "_hi"))


def with_reference(t: Table, df, column: str, target):
    """``column``'s values (one, or each of an array) that ``target`` (a one-column DataFrame of distinct keys) lacks."""
    from pyspark.sql import functions as F

    keys = target.toDF("_ref")
    out = ex.missing_column(column)
    if t.column(column).type.startswith("array<"):
        key = list(t.key)
        # rows: the array's values; the anti join only drops; groupBy on the table key; the left join
        # meets one row per key: df
        values = df.select(*key, F.explode(column).alias("_value"))
        missing = (values.join(keys, values["_value"] == keys["_ref"], "left_anti")
                   .groupBy(*key).agg(F.concat_ws(", ", F.sort_array(F.collect_set("_value"))).alias(out)))
        return df.join(missing, key, "left")
    # rows: target holds distinct keys (one per _ref): df
    return (df.join(keys, df[column] == keys["_ref"], "left")
            .withColumn(out, F.when(F.col(column).isNotNull() & F.col("_ref").isNull(), F.col(column))).drop("_ref"))


BROADCAST_KEYS = 1_000_000  # a reference target of at most this many keys is broadcast (a hashed relation of about 80 MB)


def reference_jobs(tables: "RunTables", names: list[str]) -> list:
    """The reference checks of tables ``names`` (``ex.references``) counted without a join per table: one Spark job per
    target (frames, connections; of the run's slice, or of the whole table for a log's rows), each a callable
    returning ``{check name: offending values}``.

    Every referencing column's non-null values (each element of an array, a null element included) of every table are
    tagged with their check and go through one anti join against the target's keys, as they are (no distinct: an anti
    join only drops a value, repeated keys do not multiply it); what is left is counted per check. A count is 0
    exactly when no row of the table names a key the target lacks, which is what the check's column
    (``with_reference``) says row by row; a check with a count above 0 is validated by GX on the batch with that
    column. On the 300 MB lake the per-table joins against the frames' distinct keys cost 10-35 JVM CPU seconds per
    table, a shuffle of the 1.85M keys each (see docs/performance.md).
    """
    import functools

    from pyspark.sql import functions as F

    groups: dict[tuple[str, bool], list[tuple[str, object]]] = {}
    for name in names:
        t = table(name)
        whole = t.replace_by != ("capture_id",)  # a log's rows may name any capture's connection
        for column, target in ex.references(t).items():
            c = F.col(column)
            df = tables.slices[name]
            values = (df.select(F.explode(c).alias("_value")) if t.column(column).type.startswith("array<")
                      else df.where(c.isNotNull()).select(c.alias("_value")))
            groups.setdefault((target, whole), []).append((ex.reference_check(t, column), values))

    def job(target: str, whole: bool, items):
        def count() -> dict[str, int]:
            (key,) = table(target).key
            # each key with its 64-bit hash, a join key before the text: the sort-merge join sorts by the hash first
            # (a number, compared by its sort prefix), and compares the text only where two hashes are equal. Sorted
            # by the text alone, the frames' ids ("<32 hex digits of the connection>-s-<offset>") share their first 34
            # characters within a connection, and every comparison read them (the 300 MB lake's frames job: see
            # docs/performance.md). Exact either way: a value is kept unless a key equals it, text and hash
            ref = F.col(key)
            keys = (tables.store.read(target) if whole else tables.slices[target]).select(
                F.xxhash64(ref).alias("_refh"), ref.alias("_ref"))
            # Spark's size estimate of one key column of a wide table is small at any size, so it broadcast the frames'
            # keys: at 1 GB (6.2M keys) the executor could not allocate the hashed relation. A target broadcasts only
            # when the Delta log says it holds few keys; else a sort-merge join, which spills
            few = not whole and tables.store.rows(target, tables.ids) <= BROADCAST_KEYS
            keys = keys.hint("broadcast" if few else "merge")
            tagged = functools.reduce(lambda a, b: a.unionByName(b), (
                values.select(F.lit(i).alias("_tag"), "_value", F.xxhash64("_value").alias("_valueh"))
                for i, (_, values) in enumerate(items)))
            # Spark's optimizer pushes an anti join below a union, one join per branch, each sorting every key again
            # (the 300 MB lake's frames: 1.85M keys sorted five times). A column the optimizer cannot compute twice
            # (the partition number, nondeterministic), used above the join, keeps the union under one join
            tagged = tagged.select("*", F.spark_partition_id().alias("_part"))
            # rows: the anti join keeps at most the tagged values; the group-by one row per check
            on = (tagged["_valueh"] == keys["_refh"]) & (tagged["_value"] == keys["_ref"])
            left = (tagged.join(keys, on, "left_anti").groupBy("_tag")
                    .agg(F.count("*").alias("count"), F.max("_part").alias("_part")).collect())
            found = {r["_tag"]: r["count"] for r in left}
            return {check: int(found.get(i, 0)) for i, (check, _) in enumerate(items)}
        return count

    return [job(target, whole, items) for (target, whole), items in groups.items()]


def with_connection_rows(captures, connections):
    from pyspark.sql import functions as F

    # rows: one count per capture, joined to its one captures row: captures
    counts = connections.groupBy("capture_id").agg(F.count("*").alias(ex.CONNECTION_ROWS))
    return captures.join(counts, "capture_id", "left").fillna(0, [ex.CONNECTION_ROWS])


def with_accounting(connections, frames, decode_errors):
    """Per decoded connection and direction, the bytes frames and decode_errors (codec and gaps; frame-stage rows repeat frame bytes)
    account for, plus a TLS connection's record overhead (its frames count decrypted bytes).

    Decoded: a captured connection whose dialect was found, in the clear or decrypted (the others have no frames to count).
    """
    from pyspark.sql import functions as F

    from amqplens.decode.common.rows import STAGE_FRAME

    def per_direction(df, measure, prefix):
        return df.where(F.col("connection_id").isNotNull()).groupBy("connection_id").agg(
            *(F.sum(F.when(F.col("direction") == d, F.col(measure))).alias(f"{prefix}{d}") for d in ex.TO_SERVER_CLIENT))

    decoded = F.col("dialect").isNotNull() & (F.col("source") == SOURCE_CAPTURE)
    # rows: each per_direction is grouped by connection_id, unique in connections: connections
    df = (connections.join(per_direction(frames, "size", "_f_"), "connection_id", "left")
          .join(per_direction(decode_errors.where(F.col("stage") != STAGE_FRAME), "length", "_e_"), "connection_id", "left"))
    for d in ex.TO_SERVER_CLIENT:
        covered = F.coalesce(f"_f_{d}", F.lit(0)) + F.coalesce(f"_e_{d}", F.lit(0)) + F.coalesce(f"tls_overhead_bytes_{d}", F.lit(0))
        df = df.withColumn(ex.accounted(d), F.when(decoded, covered))
    stream = sum(F.col(f"bytes_{d}") - F.col(f"missing_bytes_{d}") for d in ex.TO_SERVER_CLIENT)
    codec = sum(F.coalesce(f"codec_error_bytes_{d}", F.lit(0)) for d in ex.TO_SERVER_CLIENT)
    share = F.when(decoded & (stream > 0), codec / stream)
    return df.withColumn(ex.CODEC_ERROR_SHARE, share).drop(*(f"_{p}_{d}" for p in "fe" for d in ex.TO_SERVER_CLIENT))


def with_percentile_order(df, text: bool = True):
    from pyspark.sql import functions as F

    cols = ("p50_us", "p90_us", "p99_us", "max_us")
    broken = F.lit(False)
    for a, b in zip(cols, cols[1:]):
        broken = broken | (F.col(a) > F.col(b))
    return df.withColumn(ex.PERCENTILES_UNORDERED, _listed([(broken, F.concat_ws(", ", *(_shown(c) for c in cols)))], text))


class _Slices(dict):
    """table -> its run slice (a Spark DataFrame), read when first asked for."""

    def __init__(self, store, ids: list[str]):
        super().__init__()
        self.store, self.ids = store, ids

    def __missing__(self, name: str):
        self[name] = self.store.read(name, self.ids)
        return self[name]


class RunTables:
    """The run's slice of every table, and the projections several checks share, each computed once and cached."""

    def __init__(self, store, ids: list[str]):
        self.store, self.ids = store, ids
        self.slices = _Slices(store, ids)  # each read when first used: a run counted on the driver may read none
        self._cached: dict = {}

    def _cache(self, name, make):
        if name not in self._cached:
            self._cached[name] = make().persist()
        return self._cached[name]

    def keys(self, target: str, *, whole_table: bool = False):
        """The key column of ``target``: of the run's slice, or of the whole table (rows of a log name any capture's)."""
        (key,) = table(target).key
        source = self.store.read(target) if whole_table else self.slices[target]
        return self._cache(("keys", target, whole_table), lambda: source.select(key).distinct())

    def close(self) -> None:
        for df in self._cached.values():
            df.unpersist()
        self._cached.clear()


def batch(t: Table, tables: RunTables, conf, for_tally: bool = False):
    """Table ``t``'s run slice with the columns its suite reads and no other, in few partitions (GX runs many small
    jobs): the extra columns are computed from the whole row, then the batch keeps only what the checks read, so the
    cache holds a few columns (frames has over 70) and the scan reads only the columns the extras need.

    ``for_tally``: the tally's batch: without the reference checks' columns (and their joins: the tally counts
    those checks with ``reference_jobs``) and with ``true`` for the offending rows' text (``text=False``)."""
    from amqplens.session import shuffle_partitions

    slices = tables.slices
    text = not for_tally
    df = slices[t.name]
    if t.name == "captures":
        df = with_connection_rows(df, slices["connections"])
    elif t.name == "connections":
        df = with_accounting(df, slices["frames"], slices["decode_errors"])
    elif t.name == "metrics_latency":
        df = with_percentile_order(df, text)
    df = with_anomaly(t, with_negative(t, with_required(t, df, text), text))
    if ex.window_columns(t):
        df = with_window(t, df, slices["captures"], conf["validate.window_slack_s"], text)
    for column, target in ex.references(t).items() if text else ():
        # a capture's rows name rows of the same capture; a log's may name any capture's connection
        df = with_reference(t, df, column, tables.keys(target, whole_table=t.replace_by != ("capture_id",)))
    skipped = set() if text else {ex.missing_column(column) for column in ex.references(t)}
    columns = [c for c in ex.suite_columns(t, ex.Settings.from_config(conf)) if c not in skipped]
    return df.select(*columns).coalesce(shuffle_partitions(df.sparkSession, conf))


@dataclasses.dataclass(frozen=True)
class SparkBatch:
    """A table's Spark batch two ways: ``full()`` with every check's column (what GX validates the checks the tally
    does not pass on), ``light()`` without the reference checks' joins (what the tally counts: tally.py; the
    references are counted by ``reference_jobs``). Both lazy plans."""

    table: Table
    tables: RunTables
    conf: object

    def full(self):
        return batch(self.table, self.tables, self.conf)

    def light(self):
        return batch(self.table, self.tables, self.conf, for_tally=True)
