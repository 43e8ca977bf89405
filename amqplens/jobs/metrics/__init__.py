"""Job: lifecycle tables (+ connections, frames, decode_errors) -> metrics_latency, metrics_settlement, metrics_flow, metrics_errors.

spark-submit jobs/metrics.py --lake DIR [--capture-id ID ...] [--config F] [--set k=v]

Pure DataFrame -> DataFrame functions (``latency``, ``settlement``, ``flow``,
``errors``) over the tables of the captures to do; ``run`` reads, calls them
and writes through the TableStore, one unit per capture. The definitions of
every metric are in amqplens/contracts/metrics.py and docs/metrics.md.
"""

from __future__ import annotations

import logging
import uuid

import pyarrow as pa

from amqplens.decode import __version__
from amqplens.decode.common.rows import STAGE_FRAME
from amqplens.config import Config
from amqplens.lake.store import conform
from amqplens.jobs.labels import label_maps, with_labels
from amqplens.lake.store import TableStore
from amqplens.jobs.metrics.e2e import end_to_end
from amqplens.jobs.metrics.flow import flow
from amqplens.jobs.metrics.frame import Frame, add_row_id, bucket_of, with_buckets, with_entities
from amqplens.contracts.metrics import METRICS_ERRORS, METRICS_LATENCY, METRICS_SETTLEMENT

log = logging.getLogger(__name__)
JOB = "metrics"
UNSETTLED_AT_CLOSE = ("unconfirmed_at_close", "unsettled_at_close", "requeued_on_close", "open_at_capture_end")


def app_id(capture_id: str, decoder_version: str, conf: Config) -> str:
    return (f"amqplens/{JOB}/{capture_id}/{decoder_version}/{__version__}"
            f"+b{conf['metrics.bucket']}")


# ------------------------------------------------------------------ entities
def _delivery_entities(F):
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


# ------------------------------------------------------------------- latency
def _latency_sources(deliveries, e2e_rows, requests, connections, frames, bucket_s: int, *, names: bool = False,
                     counted: bool = True):
    """Per entity, the measured things with their value and ``_n`` (how many things it stands for), ts the start of
    the thing's bucket (which ``with_buckets`` keeps).

    ``counted``: things alike in (bucket, entity columns, metric, ..., value_us) are counted into one row before they
    are spread over entities (a busy channel repeats its latencies within a bucket); else each is a row of its own
    (``_n`` = 1: a shuffle fewer, which a small capture pays more for than it saves). ``names``: instead, the
    distinct (bucket, entity columns, metric, ...) without values or counts: the groups' names.
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

    d = deliveries
    settle_metric = (F.when((F.col("method") == "publish") & (F.col("settle_mode") == "confirm"), "publish_confirm")
                     .when(F.col("method").isin("deliver", "get-ok") & (F.col("settle_mode") != "auto_ack"), "deliver_settle")
                     .when((F.col("method") == "transfer") & (F.col("outcome") != "presettled"), "transfer_settle"))
    settles = spread(
        d.withColumn("metric", settle_metric).where(F.col("metric").isNotNull())
        .select("capture_id", F.col("sent_ts").alias("ts"), "dialect", "metric", "direction", "method",
                F.col("settle_latency_us").alias("value_us"), "connection_id", "channel", "consumer_tag", "link_name",
                "queue", "exchange"),
        _delivery_entities(F))

    # rows: one per delivery from the broker (amqplens/jobs/metrics/e2e.py: one shuffle and a pass per key)
    e2e = e2e_rows.select(
        "capture_id", F.col("sent_ts").alias("ts"), "dialect", F.lit("end_to_end").alias("metric"),
        F.lit(None).cast("string").alias("direction"), "method",
        (F.unix_micros("sent_ts") - F.unix_micros("p_ts")).alias("value_us"),
        "connection_id", "channel", "consumer_tag", "link_name", "queue", "exchange")
    e2e = spread(e2e, _delivery_entities(F))

    conn, ch = F.col("connection_id"), F.col("channel")
    rr = spread(
        requests.select("capture_id", F.col("request_ts").alias("ts"), "dialect", F.lit("request_response").alias("metric"),
                        F.lit(None).cast("string").alias("direction"), F.col("request").alias("method"),
                        F.col("latency_us").alias("value_us"), "connection_id", "channel"),
        [("connection", conn, conn, None), ("channel", F.concat_ws("/", conn, ch), conn, ch)])

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
    conns = spread(
        hs("tcp_handshake", F.col("handshake_rtt_us")).unionByName(
            hs("amqp_handshake", amqp_hs).where(F.col("dialect").isNotNull())),
        [("connection", conn, conn, None)])
    cols = ["capture_id", "ts", "dialect", "metric", "direction", "method", *([] if names else ["value_us", "_n"]),
            "entity_kind", "entity", "connection_id", "channel"]
    return settles.select(cols).unionByName(e2e.select(cols)).unionByName(rr.select(cols)).unionByName(conns.select(cols))


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
            counted: bool = True):
    """Exact percentiles of every group: its values sorted by Spark, read in order by ``group_stats`` (``counted``:
    see ``_latency_sources``; the same rows either way).

    The group key is hashed twice (xxhash64 and murmur3: 96 bits) so that only narrow rows (hash, value, count) are
    sorted; the key columns come back with one row per group (map-side aggregated) and meet the stats on the hash.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    keys = [*Frame.KEYS, "metric", "direction", "method"]
    # each key column as it is, followed by whether it is null (Spark's hashes skip a null value, so the flags keep
    # (null, x) and (x, null) apart): no column is spelt out as text (a timestamp's text costs more than its hash)
    parts = [p for k in keys for p in (F.col(k), F.col(k).isNull())]
    hashed = lambda df: df.withColumn("_g", F.xxhash64(*parts)).withColumn("_h", F.hash(*parts))  # noqa: E731
    # materialised once: the end-to-end matching is read by both the values and the names
    e2e = end_to_end(deliveries, partitions).localCheckpoint()
    # rows: <= (deliveries + requests + 2 x connections) x entities (<= 8) x 2 buckets, narrowed to (hash, value, n)
    rows = hashed(with_buckets(_latency_sources(deliveries, e2e, requests, connections, frames, bucket_s, counted=counted),
                               caps, bucket_s))
    n = partitions or deliveries.sparkSession.sparkContext.defaultParallelism * 2
    # rows: the narrow (hash, value, n) rows, sorted; out: one row per group
    stats = (rows.select("_g", "_h", "value_us", "_n").repartition(n, "_g", "_h").sortWithinPartitions("_g", "_h", "value_us")
             .mapInArrow(group_stats, from_arrow_schema(STATS_SCHEMA)))
    # the groups' key columns from the distinct atoms (<= the measured things), spread the same way; one row per group
    atoms = with_buckets(_latency_sources(deliveries, e2e, requests, connections, frames, bucket_s, names=True), caps, bucket_s)
    named = hashed(atoms).groupBy("_g", "_h").agg(*[F.first(k).alias(k) for k in keys])
    out = named.join(stats, ["_g", "_h"]).drop("_g", "_h").withColumn("exact", F.lit(True))
    return conform(add_row_id(out, keys), METRICS_LATENCY)


# ---------------------------------------------------------------- settlement
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
    rows = with_entities(atoms, _delivery_entities(F))
    rows = with_buckets(rows, caps, bucket_s).select("*", F.explode(measures).alias("m")).select("*", "m.*")
    group = [*Frame.KEYS, "direction"]
    keys = [*group, "measure", "value"]
    # rows: atoms (<= deliveries) x entities (<= 8) x 2 buckets x 4 measures, then groupBy and a window over its groups
    out = rows.groupBy(*keys).agg(F.sum("w").cast("long").alias("count"), F.sum("n").alias("rows"))
    out = out.withColumn("messages", F.max(F.when(F.col("measure") == "redelivered", F.col("rows"))).over(Window.partitionBy(*group)))
    out = out.withColumn("rate", F.col("count") / F.col("messages"))
    return conform(add_row_id(out, keys), METRICS_SETTLEMENT)


# -------------------------------------------------------------------- errors
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


# ----------------------------------------------------------------------- job
def _labelled(build, labels):
    return lambda: with_labels(build(), labels)


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Build the metric tables for the given captures (default: every capture in the lake). Returns those done now."""
    from pyspark.sql import functions as F

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"])
    found = store.read_arrow("captures", ["capture_id", "decoder_version"], capture_ids).to_pylist()  # no Spark job
    units = {c["capture_id"]: app_id(c["capture_id"], c["decoder_version"], conf) for c in found}
    pending = {cid: a for cid, a in units.items() if not store.committed("metrics_errors", a)}
    if not pending:
        return []
    caps = F.broadcast(store.read("captures").select("capture_id", "capture_date", "first_ts")
                       .where(F.col("capture_id").isin(list(pending))).cache())
    read = lambda name: store.read(name).where(F.col("capture_id").isin(list(pending)))  # noqa: E731
    frames = read("frames")
    # rows: the frames that open, consume, close or failed to decode (a few per connection, channel and link,
    # plus the bad ones); the whole frames table is only scanned by flow (column-pruned), never held
    control = control_frames(frames).cache()
    deliveries = deliveries_with_queue(read("deliveries").select(*DELIVERY_COLUMNS), control).cache()
    connections = read("connections")
    labels = label_maps(read("captures"), connections, control)
    bucket_s = conf["metrics.bucket"]
    # repeats counted before spreading (latencies, heartbeats) when there are enough rows for it to pay
    counted = store.rows("frames", pending) + store.rows("deliveries", pending) >= conf["metrics.count_repeats_from_rows"]
    # each table's query is built in its writer's thread (write_many): latency's end-to-end checkpoint and every
    # query's analysis overlap the other queries
    tables = (
        ("metrics_latency", lambda: latency(deliveries, read("request_responses"), connections, control, caps, bucket_s,
                                            counted=counted)),
        ("metrics_settlement", lambda: settlement(deliveries, caps, bucket_s)),
        ("metrics_flow", lambda: flow(read("flow_events"), connections, frames, caps, bucket_s, counted=counted)),
        ("metrics_errors", lambda: errors(control, read("decode_errors"), caps, bucket_s,  # last: its transaction marks the capture done
                                          peer_anomalies(read("deliveries"), read("flow_events")))),
    )
    try:
        # the commits go in this order whatever the queries' order: metrics_errors last
        done = store.write_many([(name, _labelled(build, labels)) for name, build in tables], units=pending, run_id=run_id,
                                parallel=conf["metrics.concurrent_tables"])
    finally:
        for df in (control, deliveries, *labels.values()):
            df.unpersist()
    # its last table marks the captures done: not committed here, another run at the same time committed them first
    return list(pending) if done["metrics_errors"] else []
