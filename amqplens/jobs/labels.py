"""Entities as an operator names them: the ``entity_label`` column of every metric table.

A metric row's ``entity`` is a key (``<connection_id>/<channel>/<consumer tag>``,
a hash to a person); its label says the same in the words RabbitMQ's management
UI uses: ``10.0.0.5:51234 -> 10.0.0.9:5672 "orders-app" ch 1 consumer amq.ctag-x queue orders``.
The label maps are computed once per metrics run from ``captures``, ``connections``
and ``frames`` and joined on the entity's keys, so the metric computations stay
as they are (``amqplens.jobs.metrics.frame.add_row_id`` leaves a null placeholder that
``with_labels`` fills). The report reads the same column, and so do the
notebooks (``amqplens/explore.py``) and SQL users.
"""

from __future__ import annotations

import re


def endpoint(ip, port):
    """``a.b.c.d:p``, ``[::1]:p`` for IPv6 (the form RabbitMQ prints)."""
    from pyspark.sql import functions as F

    host = F.when(F.col(ip).contains(":"), F.concat(F.lit("["), F.col(ip), F.lit("]"))).otherwise(F.col(ip))
    return F.concat(host, F.lit(":"), F.col(port).cast("string"))


def connection_labels(connections):
    """(connection_id, conn_label): ``client -> server "name"``; one row per connection (its key).

    The name is the client's ``connection_name`` client property (0-9-1) or its
    container-id (1.0). A Proton trace's connection (ip_version 0) has no
    endpoints: ``trace`` and the container-id.
    """
    from pyspark.sql import functions as F

    name = F.coalesce(F.get_json_object("client_properties_json", "$.connection_name"), F.col("client_container_id"))
    ends = F.when(F.col("ip_version") == 0, F.lit("trace")).otherwise(
        F.concat(endpoint("client_ip", "client_port"), F.lit(" -> "), endpoint("server_ip", "server_port")))
    quoted = F.when(name.isNotNull() & (name != ""), F.concat(F.lit(' "'), name, F.lit('"'))).otherwise(F.lit(""))
    return connections.select("connection_id", F.concat(ends, quoted).alias("conn_label"))


def cap_label(path: str | None) -> str | None:
    """A capture's label: the file name of its path (the part after the last / or \\); the same in the findings driver's labels."""
    if path is None:
        return None
    m = re.search(r"[^/\\]+$", path)
    return m.group(0) if m else ""


def label_maps(captures: dict, connections, frames) -> dict:
    """The small tables ``with_labels`` looks labels up in, each with at most one row per key (bounds written beside each).

    ``captures``: {capture_id: path} of the captures the rows belong to, read on the driver (no Spark job).
    ``frames``: at least the basic.consume and attach frames (the metrics job passes its cached control frames).

    The connections' labels, their consumers' queues and their links' attach names are one table of one row per
    connection (the consumers and links as maps in it), so a metric table takes its labels in one broadcast join;
    as three joins, each was a Spark job of its own in each of the four metric tables' queries (of the 56 jobs of a
    small lake's metrics stage). It is cached (not checkpointed) and joined into all four metric tables; their queries
    start together (``metrics.concurrent_tables``), so more than one may compute it before the cache holds it: a few
    rows per connection, cheaper than a checkpoint's job of its own before them.
    """
    from pyspark.sql import functions as F

    # one row per (connection, consumer tag): <= basic.consume frames
    consumers = (frames.where((F.col("class_name") == "basic") & (F.col("method_name") == "consume")
                              & F.col("consumer_tag").isNotNull() & (F.col("consumer_tag") != ""))
                 .groupBy("connection_id", "consumer_tag").agg(F.first("queue", ignorenulls=True).alias("_queue")))
    # one row per (connection, channel, handle): <= attach frames (a link without a channel matches no metric row)
    links = (frames.where((F.col("performative") == "attach") & F.col("handle").isNotNull() & F.col("channel").isNotNull())
             .groupBy("connection_id", "channel", "handle").agg(F.first("link_name", ignorenulls=True).alias("_name")))
    # one row per connection each: its consumers' queues by tag; its links' names by "<channel>/handle <handle>"
    # (distinct keys: the groups above; a channel's digits hold no "/")
    queues = consumers.groupBy("connection_id").agg(
        F.map_from_entries(F.collect_list(F.struct("consumer_tag", "_queue"))).alias("_queues"))
    names = links.groupBy("connection_id").agg(F.map_from_entries(F.collect_list(F.struct(
        F.concat(F.col("channel").cast("string"), F.lit("/handle "), F.col("handle").cast("string")), "_name"))).alias("_names"))
    return {
        # {capture_id: label}, which ``with_labels`` reads as a literal map: no broadcast join, one Spark job fewer per table
        "capture": {cid: cap_label(path) for cid, path in captures.items()},
        # one row per connection: full joins on connection_id, at most one row per connection on every side
        "connection": (connection_labels(connections).join(queues, "connection_id", "full")
                       .join(names, "connection_id", "full").cache()),
    }


def _label(F):
    """The label of a metric row joined with its maps (entity_kind decides the words)."""
    kind, conn = F.col("entity_kind"), F.coalesce("conn_label", "connection_id")
    ch = F.concat(conn, F.lit(" ch "), F.col("channel").cast("string"))
    queue = F.when(F.col("consumer_queue").isNotNull(), F.concat(F.lit(" queue "), F.col("consumer_queue"))).otherwise(F.lit(""))
    # metrics_flow names a link by handle ("handle 3"), the others by its attach name
    link = F.when(F.col("_tail").startswith("handle ") & F.col("attach_name").isNotNull(),
                  F.concat(F.col("attach_name"), F.lit(" ("), F.col("_tail"), F.lit(")"))).otherwise(F.col("_tail"))
    return (F.when(kind == "capture", F.coalesce("cap_label", "entity"))
            .when(kind == "connection", conn)
            .when(kind == "channel", ch)
            .when(kind == "session", F.concat(conn, F.lit(" session ch "), F.col("channel").cast("string")))
            .when(kind == "consumer", F.concat(ch, F.lit(" consumer "), F.col("_tail"), queue))
            .when(kind == "link", F.concat_ws(" ", ch, F.lit("link"), F.when(link != "", link)))  # 0-10: "destination D"
            .when(kind == "exchange", F.concat(F.lit("exchange "), F.col("entity")))
            .otherwise(F.concat(kind, F.lit(" "), F.col("entity"))))  # queue, address


def with_labels(df, maps: dict):
    """``df`` (a metric table's rows) with ``entity_label`` filled; the row count and order of columns unchanged."""
    from pyspark.sql import functions as F

    cols = df.columns
    # what follows "<connection_id>/<channel>/" in a consumer's or link's entity: the tag, link name or "handle N"
    rows = df.withColumn("_tail", F.when(F.col("entity_kind").isin("consumer", "link"),
                                         F.expr("substring(entity, length(connection_id) + length(cast(channel as string)) + 3)")))
    is_consumer, is_link = F.col("entity_kind") == "consumer", F.col("entity_kind") == "link"
    caps = maps["capture"]
    # a literal map (constant-folded into one value by Spark's optimizer): one entry per capture of the run
    rows = rows.withColumn("cap_label", F.create_map(*(F.lit(v) for kv in caps.items() for v in kv))[F.col("capture_id")]
                           if caps else F.lit(None).cast("string"))
    # <= 1 row per connection_id: rows unchanged. A consumer's queue by its tag, a link's attach name by its channel
    # and handle, each in its connection's map (a key the map lacks gives null)
    rows = (rows.join(F.broadcast(maps["connection"]), "connection_id", "left")
            .withColumn("consumer_queue", F.when(is_consumer, F.col("_queues")[F.col("_tail")]))
            .withColumn("attach_name", F.when(is_link, F.col("_names")[
                F.concat(F.col("channel").cast("string"), F.lit("/"), F.col("_tail"))])))
    return rows.withColumn("entity_label", F.coalesce(_label(F), "entity")).select(*cols)
