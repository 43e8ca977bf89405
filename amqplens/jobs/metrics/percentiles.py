"""metrics_latency: exact percentiles of every group of latency values: ``latency`` (one shuffle of the measured
things by route, then arrays: amqplens/jobs/metrics/grouped.py) and the reference it replaced, ``latency_reference``
(sorted by Spark, read in order by ``group_stats``)."""

from __future__ import annotations

import functools

import pyarrow as pa

from amqplens.lake.store import conform
from amqplens.jobs.metrics.e2e import end_to_end
from amqplens.jobs.metrics.frame import Frame, add_row_id, bucket_of, with_buckets, with_entities
from amqplens.jobs.metrics.inputs import delivery_entities
from amqplens.contracts.metrics import METRICS_LATENCY


# what the latency metrics read of the end-to-end matching's deliveries
E2E_COLUMNS = ["capture_id", "sent_ts", "dialect", "method", "connection_id", "channel", "consumer_tag", "link_name", "queue",
               "exchange"]


def _measured(deliveries, e2e_rows, requests, connections, frames):
    """Each kind of measured thing: (its rows, the entities it counts for as ``with_entities`` specs).

    The rows: capture_id, ts (the thing's start), dialect, metric, direction, method, value_us (null: never answered,
    settled or matched), connection_id and, but for the handshakes, channel. Rows: one per delivery with a settle
    metric, one per delivery from the broker (end_to_end), one per request, two per connection.
    """
    from pyspark.sql import functions as F

    d = deliveries
    settle_metric = (F.when((F.col("method") == "publish") & (F.col("settle_mode") == "confirm"), "publish_confirm")
                     .when(F.col("method").isin("deliver", "get-ok") & (F.col("settle_mode") != "auto_ack"), "deliver_settle")
                     .when((F.col("method") == "transfer") & (F.col("outcome") != "presettled"), "transfer_settle"))
    settles = (d.withColumn("metric", settle_metric).where(F.col("metric").isNotNull())
               .select("capture_id", F.col("sent_ts").alias("ts"), "dialect", "metric", "direction", "method",
                       F.col("settle_latency_us").alias("value_us"), "connection_id", "channel", "consumer_tag", "link_name",
                       "queue", "exchange"))

    # rows: one per delivery from the broker (amqplens/jobs/metrics/e2e.py: one shuffle and a pass per key)
    e2e = e2e_rows.select(
        "capture_id", F.col("sent_ts").alias("ts"), "dialect", F.lit("end_to_end").alias("metric"),
        F.lit(None).cast("string").alias("direction"), "method",
        (F.unix_micros("sent_ts") - F.unix_micros("p_ts")).alias("value_us"),
        "connection_id", "channel", "consumer_tag", "link_name", "queue", "exchange")

    conn, ch = F.col("connection_id"), F.col("channel")
    rr = requests.select("capture_id", F.col("request_ts").alias("ts"), "dialect", F.lit("request_response").alias("metric"),
                         F.lit(None).cast("string").alias("direction"), F.col("request").alias("method"),
                         F.col("latency_us").alias("value_us"), "connection_id", "channel")

    # rows: groupBy <= connections; the left join on the connection (unique on both sides): connections
    open_ok = (
        frames.where(((F.col("class_name") == "connection") & (F.col("method_name") == "open-ok"))
                     | ((F.col("performative") == "open") & (F.col("direction") == "to_client")))
        .groupBy("connection_id").agg(F.min("ts").alias("open_ok_ts"))
    )
    c = connections.join(open_ok, "connection_id", "left")
    hs = lambda metric, value: c.select(  # noqa: E731
        "capture_id", F.col("start_ts").alias("ts"), "dialect", F.lit(metric).alias("metric"),
        F.lit(None).cast("string").alias("direction"), F.lit(None).cast("string").alias("method"),
        value.alias("value_us"), "connection_id")
    amqp_hs = F.when(F.col("syn_seen") & F.col("open_ok_ts").isNotNull(),
                     F.unix_micros("open_ok_ts") - F.unix_micros("start_ts"))
    conns = hs("tcp_handshake", F.col("handshake_rtt_us")).unionByName(
        hs("amqp_handshake", amqp_hs).where(F.col("dialect").isNotNull()))
    return [(settles, delivery_entities(F)), (e2e, delivery_entities(F)),
            (rr, [("connection", conn, conn, None), ("channel", F.concat_ws("/", conn, ch), conn, ch)]),
            (conns, [("connection", conn, conn, None)])]


def _latency_sources(measured, bucket_s: int, *, names: bool = False, counted: bool = True):
    """The reference's rows: per entity, the measured things with their value and ``_n`` (how many things it stands
    for), ts the start of the thing's bucket (which ``with_buckets`` keeps).

    ``counted``: things alike in (bucket, entity columns, metric, ..., value_us) are counted into one row before they
    are spread over entities; else each is a row of its own (``_n`` = 1). ``names``: instead, the distinct (bucket,
    entity columns, metric, ...) without values or counts: the groups' names.
    """
    from pyspark.sql import functions as F

    def spread(df, specs):
        df = df.withColumn("ts", bucket_of(F.col("ts"), bucket_s))
        # rows: <= the measured things (grouped before any shuffle), then x entities (<= 8)
        if names:
            df = df.drop("value_us").distinct()
        else:
            df = df.groupBy(*df.columns).agg(F.count("*").alias("_n")) if counted else df.withColumn("_n", F.lit(1).cast("long"))
        return with_entities(df, specs)

    cols = ["capture_id", "ts", "dialect", "metric", "direction", "method", *([] if names else ["value_us", "_n"]),
            "entity_kind", "entity", "connection_id", "channel"]
    out = [spread(df, specs).select(cols) for df, specs in measured]
    return functools.reduce(lambda a, b: a.unionByName(b), out)


def _routes(measured, caps, bucket_s: int):
    """Each measured thing once per route it has an entity in (``grouped.ROUTES``: the capture; its connection,
    channel, consumer and link; its queue or address; its exchange), with its bucket, its capture's number ``_ci``
    (from ``caps``) and its metric's ``_m``.

    Rows: the measured things x <= 4."""
    from pyspark.sql import functions as F

    from amqplens.jobs.metrics.grouped import METRICS

    ns, ni = F.lit(None).cast("string"), F.lit(None).cast("int")
    out = []
    for df, specs in measured:
        names = {kind: name.cast("string") for kind, name, _, _ in specs}
        e = lambda kind: names.get(kind, ns)  # noqa: E731
        ch = F.col("channel").cast("int") if "channel" in df.columns else ni
        route = lambda r, key, c, chan, a, b, d: F.struct(  # noqa: E731
            F.lit(r).alias("_r"), key.alias("_k"), c.alias("_c"), chan.alias("_ch"), a.alias("_a"), b.alias("_b"), d.alias("_d"))
        routes = F.array(
            route(0, F.col("capture_id"), ns, ni, ns, ns, ns),
            route(1, F.coalesce(e("connection"), e("channel"), e("consumer"), e("link")), e("connection"), ch, e("channel"),
                  e("consumer"), e("link")),
            route(2, F.coalesce(e("queue"), e("address")), ns, ni, e("queue"), e("address"), ns),
            route(3, e("exchange"), ns, ni, e("exchange"), ns, ns),
        )
        # inline, then the filter: a higher-order F.filter over the array cost 5x the whole spread (27 s against 5 s
        # for 2.7M route rows at 300 MB)
        counts = ["_n"] if "_n" in df.columns else []
        out.append(df.select("capture_id", "ts", "dialect", "metric", "direction", "method", "value_us", *counts, F.inline(routes))
                   .where(F.col("_k").isNotNull()))
    rows = functools.reduce(lambda a, b: a.unionByName(b), out)
    # rows: caps has one row per capture
    return (rows.join(caps.select("capture_id", "_ci"), "capture_id")
            .withColumn("bucket_us", F.unix_micros(bucket_of(F.col("ts"), bucket_s)))
            .withColumn("_m", F.array_position(F.array(*map(F.lit, METRICS)), F.col("metric")).cast("int"))
            .drop("ts", "metric", "capture_id"))


# what group_stats yields per group of latency values (its hash, then the metric columns)
STATS_SCHEMA = pa.schema([("_g", pa.int64()), ("_h", pa.int32()), ("count", pa.int64()), ("missing", pa.int64()),
                          ("mean_us", pa.float64()), ("max_us", pa.int64()), ("p50_us", pa.float64()),
                          ("p90_us", pa.float64()), ("p99_us", pa.float64())])


def _percentile(at, n: int, q: float) -> float:
    """Spark's ``percentile`` of ``n`` sorted values (``at(rank)``: the value of a 0-based rank): linear between the
    closest ranks, in its own arithmetic."""
    import math

    pos = (n - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(at(lo)) if lo == hi else (hi - pos) * float(at(lo)) + (pos - lo) * float(at(hi))


def group_stats(batches):
    """Rows sorted by (_g, _h, value_us), each standing for ``_n`` equal values (1 without the column) -> one row
    per group: count, missing, mean, max, p50, p90, p99 (exact).

    Holds one group's distinct values at a time (16 bytes each); a group may span batches."""
    import numpy as np

    names = STATS_SCHEMA.names
    out = {n: [] for n in names}

    def close(g, h, chunks, weights, missing):
        v = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        w = np.concatenate(weights) if weights else np.zeros(0, np.int64)
        cum = np.cumsum(w)
        n = int(cum[-1]) if len(cum) else 0
        at = lambda rank: v[int(np.searchsorted(cum, rank, side="right"))]  # noqa: E731  the value of 0-based rank
        row = (g, h, n, missing, float(float((v * w).sum()) / n) if n else None, int(v[-1]) if n else None,
               *((_percentile(at, n, q) if n else None) for q in (0.5, 0.9, 0.99)))
        for name, x in zip(names, row):
            out[name].append(x)

    def flush():
        batch = pa.RecordBatch.from_pydict(out, schema=STATS_SCHEMA)
        for name in names:
            out[name].clear()
        return batch

    cur, chunks, weights, missing = None, [], [], 0
    for b in batches:
        if not b.num_rows:
            continue
        g, h = b.column("_g").to_numpy(), b.column("_h").to_numpy()
        val = b.column("value_us")
        nulls = val.is_null().to_numpy(zero_copy_only=False)
        vals = val.fill_null(0).to_numpy()
        ns = b.column("_n").to_numpy() if "_n" in b.schema.names else np.ones(len(g), np.int64)
        starts = [0, *(np.flatnonzero((g[1:] != g[:-1]) | (h[1:] != h[:-1])) + 1).tolist(), len(g)]
        for a, z in zip(starts, starts[1:]):
            key = (int(g[a]), int(h[a]))
            if key != cur:
                if cur is not None:
                    close(*cur, chunks, weights, missing)
                cur, chunks, weights, missing = key, [], [], 0
            nn = nulls[a:z]
            missing += int(ns[a:z][nn].sum())
            chunks.append(vals[a:z][~nn])
            weights.append(ns[a:z][~nn])
        if len(out["_g"]) >= 8192:
            yield flush()
    if cur is not None:
        close(*cur, chunks, weights, missing)
    yield flush()


def latency(deliveries, requests, connections, frames, caps, bucket_s: int, partitions: int | None = None,
            capture_ids: list[str] | None = None, counted: bool = False):
    """Exact statistics of every group: each measured thing shuffled once per route (``_routes``), each partition's
    groups spread, sorted and summarised in arrays (``grouped.route_stats``); the same rows as ``latency_reference``.

    ``partitions``: of the route shuffle (default twice the cores; the job sizes it by the input's rows so that a task
    holds about a million route rows). ``counted``: route rows alike in every column (the value included) are counted
    into one row with its ``_n`` before the shuffle (map-side), and the pass weighs each row by it: the same rows, and
    far fewer go to Python where values repeat (the 300 MB lake: 2.66M route rows, 178k distinct). ``capture_ids``: the captures in ``caps`` when the caller knows them (else read
    from ``caps``: a small Spark job, and a warning when ``caps`` carries a broadcast hint).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from amqplens.jobs.metrics.grouped import OUT_SCHEMA, route_stats

    keys = [*Frame.KEYS, "metric", "direction", "method"]
    # each capture numbered, so that a route row carries no capture text: the numbers made on the driver (a window
    # over all captures would warn on the terminal that it moves every row to one partition); rows: one per capture
    spark = deliveries.sparkSession
    ids = sorted(set(capture_ids) if capture_ids is not None else {r[0] for r in caps.select("capture_id").collect()})
    numbers = spark.createDataFrame(list(zip(ids, range(1, len(ids) + 1))), "capture_id string, _ci int")
    caps = F.broadcast(caps.select("capture_id", "capture_date", "first_ts").join(F.broadcast(numbers), "capture_id"))
    measured = _measured(deliveries, end_to_end(deliveries, partitions, keep=E2E_COLUMNS), requests, connections, frames)
    n = partitions or spark.sparkContext.defaultParallelism * 2
    # rows: the measured things x <= 4 routes, one shuffle; out: one row per group, joined to its capture's one row
    if counted:
        # rows: <= the measured things (a hash aggregate, partial before its shuffle): things alike in their bucket and
        # every column a route reads, value_us included, counted into one row before they are spread over routes
        measured = [(df.withColumn("ts", bucket_of(F.col("ts"), bucket_s)).groupBy(*df.columns).agg(F.count("*").alias("_n")),
                     specs) for df, specs in measured]
    routes = _routes(measured, caps, bucket_s)
    if counted:
        # rows: <= the route rows; the rows alike in every column (a queue's, an exchange's from many connections) summed
        routes = routes.groupBy(*[c for c in routes.columns if c != "_n"]).agg(F.sum("_n").alias("_n"))
    out = (routes.repartition(n, "_ci", "_r", "_k", "_m").drop("_k")
           .mapInArrow(functools.partial(route_stats, bucket_s=bucket_s), from_arrow_schema(OUT_SCHEMA))
           .join(caps, "_ci")
           .withColumn("bucket_start", F.when(F.col("bucket_seconds") == 0, F.coalesce("first_ts", F.timestamp_micros(F.lit(0))))
                       .otherwise(F.timestamp_micros("bucket_us")))
           .withColumn("entity", F.when(F.col("entity_kind") == "capture", F.col("capture_id")).otherwise(F.col("entity")))
           .drop("bucket_us", "first_ts", "_ci").withColumn("exact", F.lit(True)))
    return conform(add_row_id(out, keys), METRICS_LATENCY)


def latency_reference(deliveries, requests, connections, frames, caps, bucket_s: int, partitions: int | None = None,
                      counted: bool = True):
    """The reference ``latency`` is compared with: every group's values spread over entities and buckets in Spark,
    sorted by Spark, read in order by ``group_stats`` (``counted``: see ``_latency_sources``; the same rows either way).

    The group key is hashed twice (xxhash64 and murmur3: 96 bits) so that only narrow rows (hash, value, count) are
    sorted; the key columns come back with one row per group (map-side aggregated) and meet the stats on the hash.
    Rows: <= (deliveries + requests + 2 x connections) x entities (<= 8) x 2 buckets.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    keys = [*Frame.KEYS, "metric", "direction", "method"]
    # each key column as it is, followed by whether it is null (Spark's hashes skip a null value, so the flags keep
    # (null, x) and (x, null) apart): no column is spelt out as text (a timestamp's text costs more than its hash)
    parts = [p for k in keys for p in (F.col(k), F.col(k).isNull())]
    hashed = lambda df: df.withColumn("_g", F.xxhash64(*parts)).withColumn("_h", F.hash(*parts))  # noqa: E731
    # materialised once: the end-to-end matching is read by both the values and the names
    e2e = end_to_end(deliveries, partitions, keep=E2E_COLUMNS).localCheckpoint()
    measured = _measured(deliveries, e2e, requests, connections, frames)
    rows = hashed(with_buckets(_latency_sources(measured, bucket_s, counted=counted), caps, bucket_s))
    n = partitions or deliveries.sparkSession.sparkContext.defaultParallelism * 2
    # rows: the narrow (hash, value, n) rows, sorted; out: one row per group
    stats = (rows.select("_g", "_h", "value_us", "_n").repartition(n, "_g", "_h").sortWithinPartitions("_g", "_h", "value_us")
             .mapInArrow(group_stats, from_arrow_schema(STATS_SCHEMA)))
    # the groups' key columns from the distinct atoms (<= the measured things), spread the same way; one row per group
    atoms = with_buckets(_latency_sources(measured, bucket_s, names=True), caps, bucket_s)
    named = hashed(atoms).groupBy("_g", "_h").agg(*[F.first(k).alias(k) for k in keys])
    out = named.join(stats, ["_g", "_h"]).drop("_g", "_h").withColumn("exact", F.lit(True))
    return conform(add_row_id(out, keys), METRICS_LATENCY)
