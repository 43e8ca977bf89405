"""What the report draws, from the lake, as small pandas frames: aggregates and top-N only.

Nothing here collects rows in proportion to the capture: each query ends in a
group-by over a bounded key, a ``limit``, or a per-entity cap (the bound is
written beside it), so a 2 GB capture's report reads as much to the driver as
a 100 KB one's, give or take the number of connections with a page.
"""

from __future__ import annotations

from amqplens.jobs.labels import connection_labels

OUTCOME_BAD = ("nacked_requeue", "nacked_drop", "rejected_requeue", "rejected_drop", "rejected", "released", "modified")
# Frames that open, negotiate or end a connection, channel, session or link (the connection page's timeline).
LIFECYCLE_CLASSES = ("connection", "channel", "session")
LIFECYCLE_PERFORMATIVES = ("open", "begin", "attach", "detach", "end", "close")
LATENCY_QUANTILES = (0.0, 0.25, 0.5, 0.75, 0.99, 1.0)
QUANTILE_NAMES = ("min", "q1", "median", "q3", "p99", "max")
# the columns of a connection the report shows (``connections``)
CONNECTION_PAGE_COLUMNS = ["connection_id", "capture_id", "conn_label", "dialect", "start_ts", "end_ts", "duration_us",
                           "frames", "bytes_to_server", "bytes_to_client", "end_reason", "close_code", "close_text",
                           "close_condition", "errors", "findings", "bad_end"]


def _F():
    from pyspark.sql import functions as F

    return F


def latency_stats(store, kinds: int = 25):
    """Per kind (dialect + method + direction, or dialect + request): count and quantiles in ms; <= ``kinds`` rows."""
    F = _F()
    d = store.read("deliveries").where(F.col("settle_latency_us").isNotNull()
                                       & ~F.col("settle_mode").isin("auto_ack", "no_confirm") & (F.col("outcome") != "presettled"))
    d = d.select(F.concat_ws(" ", "dialect", "method", "direction").alias("what"), F.col("settle_latency_us").alias("us"))
    r = store.read("request_responses").where(F.col("latency_us").isNotNull()).select(
        F.concat_ws(" ", "dialect", "request").alias("what"), F.col("latency_us").alias("us"))
    q = F.percentile_approx("us", list(LATENCY_QUANTILES), 10000)
    # one row per kind: dialects x (methods x directions + requests), a few dozen
    pdf = (d.unionByName(r).groupBy("what").agg(F.count("*").alias("n"), q.alias("q"))
           .orderBy(F.col("q")[2].desc(), "what").limit(kinds).toPandas())
    for i, name in enumerate(QUANTILE_NAMES):
        pdf[name] = pdf.q.map(lambda v, i=i: v[i] / 1000)
    return pdf.drop(columns="q").sort_values(["median", "what"], kind="stable").reset_index(drop=True)


def busiest_series(store, entity: str, event: str, values: list[str], n: int, points: int):
    """The ``n`` entities with the most ``event`` flow events, each as at most ``points`` steps over time.

    Where an entity has more events than ``points``, its span is cut into ``points`` equal slots and each
    slot keeps its maximum of every value (the envelope of the steps), so the series stays exact for
    small captures and bounded for large ones.
    """
    F = _F()
    keys = ["connection_id", "channel", "consumer_tag", "link_handle"]
    fe = store.read("flow_events").where(F.col("entity") == entity)
    # n rows: the busiest entities, with their span
    top = (fe.where(F.col("event") == event).groupBy(*keys)
           .agg(F.count("*").alias("events"), F.min("ts").alias("t0"), F.max("ts").alias("t1"))
           .orderBy(F.desc("events"), *keys).limit(n))
    top = top.select(*[F.col(k).alias(f"top_{k}") for k in keys], "t0", "t1")
    on = [fe[k].eqNullSafe(top[f"top_{k}"]) for k in keys]
    span = F.greatest(F.unix_micros("t1") - F.unix_micros("t0"), F.lit(1))
    # the span is the ``event``'s; the entity's other events (a qos before the first deliver, settles after the
    # last) fall into the first or last slot
    slot = F.least(F.greatest(F.floor((F.unix_micros("ts") - F.unix_micros("t0")) * points / (span + 1)), F.lit(0)),
                   F.lit(points))
    # <= n * (points + 1) rows: one per entity and slot
    return (fe.join(F.broadcast(top), on, "inner").withColumn("slot", slot)
            .groupBy(*keys, "slot").agg(F.min("ts").alias("ts"), *[F.max(v).alias(v) for v in values])
            .orderBy(*keys, "ts").toPandas())


def entity_labels(store, kinds: tuple[str, ...], ids: list[str]):
    """{entity: entity_label} of the given entity kinds, from metrics_flow (the labels every metric table shares)."""
    F = _F()
    # one row per entity (distinct) of the given connections
    rows = (store.read("metrics_flow").where(F.col("entity_kind").isin(*kinds) & (F.col("bucket_seconds") == 0)
                                             & F.col("connection_id").isin(ids))
            .select("entity", "entity_label").distinct().collect())
    return {r.entity: r.entity_label for r in rows}


def outcomes(store):
    """Messages per dialect, direction and outcome over the lake: one row per combination (a few dozen)."""
    F = _F()
    return (store.read("metrics_settlement")
            .where((F.col("bucket_seconds") == 0) & (F.col("entity_kind") == "capture") & (F.col("measure") == "outcome"))
            .groupBy("dialect", "direction", "value").agg(F.sum("count").alias("n")).orderBy("dialect", "direction", "value")
            .toPandas())


def _error_frames(frames):
    F = _F()
    return frames.where(((F.col("method_name") == "close") & F.col("reply_code").isNotNull() & (F.col("reply_code") != 200))
                        | F.col("error_condition").isNotNull())


def connections(store, pages: int, timeline: int = 40):
    """The connections the report shows, with their labels: the first ``timeline`` by start (the overview's
    timeline) and the ``pages`` that get a page of their own (those with a critical or warning finding or that ended
    in an error first, then the most frames).
    At most ``timeline + pages`` rows; ``page`` says which have a page."""
    F = _F()
    c = store.read("connections").where(F.col("ip_version") != 0)  # 0: a Proton trace, no clock
    # one row per connection: its exceptions and error conditions, counted by the metrics job
    errs = (store.read("metrics_errors").where((F.col("entity_kind") == "connection") & (F.col("bucket_seconds") == 0)
                                               & (F.col("kind") != "decode_error"))
            .groupBy("connection_id").agg(F.sum("count").alias("errors")))
    # one row per connection: its findings above info
    found = (store.read("findings").where(F.col("connection_id").isNotNull() & (F.col("severity") != "info"))
             .groupBy("connection_id").agg(F.count("*").alias("findings")))
    c = (c.join(connection_labels(c), "connection_id").join(errs, "connection_id", "left").join(found, "connection_id", "left")
         .withColumn("errors", F.coalesce("errors", F.lit(0))).withColumn("findings", F.coalesce("findings", F.lit(0)))
         .withColumn("frames", F.coalesce("frames_to_server", F.lit(0)) + F.coalesce("frames_to_client", F.lit(0)))
         .withColumn("bad_end", (F.col("errors") > 0) | (F.col("end_reason") == "rst") | (F.col("findings") > 0)))
    cols = CONNECTION_PAGE_COLUMNS
    paged = c.orderBy(F.desc("bad_end"), F.desc("findings"), F.desc("frames"), "connection_id").limit(pages).select(*cols, F.lit(True).alias("page"))
    first = c.orderBy("start_ts", "connection_id").limit(timeline).select(*cols, F.lit(False).alias("page"))
    pdf = paged.unionByName(first).toPandas()
    pdf = pdf.sort_values("page", ascending=False, kind="stable").drop_duplicates("connection_id")
    return pdf.sort_values(["start_ts", "connection_id"], na_position="first", kind="stable").reset_index(drop=True)


def blocked_and_errors(store, ids: list[str], cap: int):
    """(blocked/unblocked flow events, error frames) of the given connections, at most ``cap`` of each per connection."""
    F = _F()
    from pyspark.sql import Window

    first = lambda df, *order: df.withColumn("_n", F.row_number().over(  # noqa: E731
        Window.partitionBy("connection_id").orderBy(*order))).where(F.col("_n") <= cap).drop("_n")
    # <= cap rows per connection of ids; every order here is total (the rows' keys last), so both engines give one order
    blocked = (first(store.read("flow_events").where((F.col("entity") == "connection") & F.col("connection_id").isin(ids)
                                                     & F.col("blocked").isNotNull()), "ts", "event_id")
               .orderBy("ts", "connection_id", "event_id").select("connection_id", "ts", "blocked", "reason").toPandas())
    # <= cap rows per connection of ids
    errs = (first(_error_frames(store.read("frames").where(F.col("connection_id").isin(ids))), "ts", "stream_offset", "direction")
            .orderBy("ts", "connection_id", "direction", "stream_offset")
            .select("connection_id", "ts", "stream_offset", "direction", "channel", "class_name", "method_name",
                    "performative", "reply_code", "reply_text", "error_condition").toPandas())
    return blocked, errs


def lifecycle_frames(store, ids: list[str], cap: int):
    """Open/close/attach/... frames and channel.flow events of the given connections, <= ``cap`` each per connection."""
    F = _F()
    from pyspark.sql import Window

    f = store.read("frames").where(F.col("connection_id").isin(ids) & (
        F.col("class_name").isin(*LIFECYCLE_CLASSES) | F.col("performative").isin(*LIFECYCLE_PERFORMATIVES)))
    w = Window.partitionBy("connection_id").orderBy("ts", "direction", "stream_offset")
    # <= cap rows per connection of ids
    frames = (f.withColumn("_n", F.row_number().over(w)).where(F.col("_n") <= cap)
              .orderBy("ts", "connection_id", "direction", "stream_offset")
              .select("connection_id", "ts", "direction", "channel", "class_name", "method_name", "performative", "handle",
                      "link_name", "role", "reply_code", "reply_text", "error_condition").toPandas())
    fl = store.read("flow_events").where(F.col("connection_id").isin(ids) & F.col("flow_active").isNotNull())
    # <= cap rows per connection of ids
    flows = (fl.withColumn("_n", F.row_number().over(Window.partitionBy("connection_id").orderBy("ts", "event_id")))
             .where(F.col("_n") <= cap).orderBy("ts", "connection_id", "event_id")
             .select("connection_id", "ts", "channel", "flow_active").toPandas())
    return frames, flows


def connection_metrics(store, ids: list[str]):
    """Per connection of ids and time bucket: latencies (metrics_latency) and messages per outcome (metrics_settlement),
    plus the whole-connection rows (bucket_seconds = 0). Rows: ids x buckets x (metrics + outcomes)."""
    F = _F()
    mine = (F.col("entity_kind") == "connection") & F.col("connection_id").isin(ids)
    lat = (store.read("metrics_latency").where(mine & (F.col("count") > 0)).orderBy("bucket_start", "metric_row_id")
           .select("connection_id", "bucket_start", "bucket_seconds", "metric", "method", "direction", "count", "missing",
                   "p50_us", "p90_us", "p99_us", "max_us").toPandas())
    out = (store.read("metrics_settlement").where(mine & (F.col("measure") == "outcome")).orderBy("bucket_start", "metric_row_id")
           .select("connection_id", "bucket_start", "bucket_seconds", "direction", "value", "count").toPandas())
    return lat, out


# (key, title, table, where) of each top table; the key names its query in top_tables (both engines)
TOP_TABLES = (
    ("slow", "Slowest consumers (deliver -> ack, p99)", "metrics_latency",
     "bucket_seconds = 0 and metric = 'deliver_settle' and entity_kind = 'consumer', by p99_us"),
    ("nacked", "Most nacked / rejected queues", "metrics_settlement",
     "bucket_seconds = 0 and entity_kind in ('queue', 'address') and measure = 'outcome' and value is a nack, reject, "
     "release or modify"),
    ("starved", "Starved links (time at zero link credit)", "metrics_flow",
     "bucket_seconds = 0 and metric = 'zero_credit_us' and value > 0"),
    ("errors", "Errors", "metrics_errors", "bucket_seconds = 0 and entity_kind = 'capture'"),
    ("events", "Broker events (server logs)", "broker_events", "event != 'other', per event"),
)


def top_tables(store, n: int) -> list[tuple[str, str, str, list[str], list[tuple]]]:
    """(title, table, where, columns, rows) of each top-N table (n rows each); ties broken by the label or keys."""
    from amqplens.report.logs import broker_events_table

    F = _F()
    whole = F.col("bucket_seconds") == 0
    slow = (store.read("metrics_latency").where(whole & (F.col("metric") == "deliver_settle") & (F.col("entity_kind") == "consumer"))
            .orderBy(F.desc("p99_us"), "entity_label").limit(n)
            .select(F.col("entity_label").alias("consumer"), "count", (F.col("p50_us") / 1000).alias("p50 ms"),
                    (F.col("p99_us") / 1000).alias("p99 ms"), (F.col("max_us") / 1000).alias("max ms")))
    nacked = (store.read("metrics_settlement").where(whole & F.col("entity_kind").isin("queue", "address")
                                                      & (F.col("measure") == "outcome") & F.col("value").isin(*OUTCOME_BAD))
              .groupBy("entity_label").agg(F.sum("count").alias("negative"), F.max("messages").alias("messages"))
              .orderBy(F.desc("negative"), "entity_label").limit(n).withColumnRenamed("entity_label", "queue or address"))
    starved = (store.read("metrics_flow").where(whole & (F.col("metric") == "zero_credit_us") & (F.col("value") > 0))
               .orderBy(F.desc("value"), "entity_label").limit(n)
               .select(F.col("entity_label").alias("link"), (F.col("value") / 1000).alias("ms at zero credit"),
                       (F.col("observed_us") / 1000).alias("ms observed")))
    keys = ["kind", "raised_by", "code", "condition"]
    errors = (store.read("metrics_errors").where(whole & (F.col("entity_kind") == "capture"))
              .groupBy(*keys).agg(F.sum("count").alias("count")).orderBy(F.desc("count"), *keys).limit(n))
    frames = {"slow": slow, "nacked": nacked, "starved": starved, "errors": errors, "events": broker_events_table(store, n)}
    return [(title, table, where, frames[key].columns, [tuple(r) for r in frames[key].collect()])
            for key, title, table, where in TOP_TABLES]
