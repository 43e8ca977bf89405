"""How connections began and ended, from the connections table (one row each): heartbeat_timeout, abrupt_end,
access_refused, tls_not_decrypted, capture_gaps, connection_churn (with request_responses' channel.open)."""

from __future__ import annotations

from amqplens.jobs.findings.rows import finding, ids, seconds

NO_CLOSE = "amqp_closed_by IS NULL AND close_code IS NULL AND close_condition IS NULL"


def _missed(inp):
    """(connection_id, missed_to_server, missed_to_client): whole heartbeat intervals with no frame, per direction."""
    from pyspark.sql import functions as F

    m = inp.flow_whole.where((F.col("metric") == "missed_heartbeats") & (F.col("entity_kind") == "connection"))
    # rows: one per connection after the groupBy
    return m.groupBy("connection_id").agg(
        F.sum(F.when(F.col("direction") == "to_server", F.col("value"))).alias("missed_to_server"),
        F.sum(F.when(F.col("direction") == "to_client", F.col("value"))).alias("missed_to_client"),
        F.max(F.when(F.col("direction") == "to_server", F.col("metric_row_id"))).alias("row_to_server"),
        F.max(F.when(F.col("direction") == "to_client", F.col("metric_row_id"))).alias("row_to_client"))


def _heartbeat_candidates(inp):
    """Connections that ended without an AMQP close after two missed heartbeat intervals, or that a broker log says
    were closed for missed heartbeats."""
    from pyspark.sql import functions as F

    # rows: one log line per connection after the groupBy (the lines joined to a captured connection)
    logged = (inp.broker_events.where(F.col("connection_id").isNotNull() & F.lower("message").contains("missed heartbeats"))
              .groupBy("connection_id").agg(F.min_by(F.struct("event_id", "message"), "ts").alias("log")))
    # rows: connection_id is the key of all three
    rows = inp.connections.join(F.broadcast(_missed(inp)), "connection_id", "left").join(F.broadcast(logged), "connection_id", "left")
    missed = F.greatest(F.coalesce("missed_to_server", F.lit(0.0)), F.coalesce("missed_to_client", F.lit(0.0)))
    return rows.where(F.col("log").isNotNull() | ((missed >= 2) & F.expr(NO_CLOSE) & (F.col("end_reason") != "capture_end"))) \
        .withColumn("missed", missed)


def heartbeat_timeout(inp):
    from pyspark.sql import functions as F

    rows = _heartbeat_candidates(inp)
    said = F.element_at(F.split(F.trim(F.col("log.message")), "\n"), -1)  # the line after "closing AMQP connection ..."
    silent = (F.when(F.lower(said).contains("from client"), F.lit("the client"))
              .when(F.coalesce("missed_to_server", F.lit(0.0)) >= F.coalesce("missed_to_client", F.lit(0.0)), F.lit("the client"))
              .otherwise(F.lit("the broker")))
    interval = F.when(F.col("heartbeat") > 0, F.format_string(" (heartbeat %d s)", F.col("heartbeat"))).otherwise(F.lit(""))
    missed = F.when(F.col("missed") >= 1, F.format_string(", %d heartbeat intervals with no frame", F.col("missed").cast("int"))) \
        .otherwise(F.lit(""))
    log = F.when(F.col("log").isNotNull(), F.format_string("; the broker log says '%s'", F.substring(said, 1, 200))) \
        .otherwise(F.lit(""))
    summary = F.format_string("The connection was dropped for missed heartbeats from %s%s%s: it ended by %s from the %s "
                              "with no connection.close%s.", silent, interval, missed, F.upper("end_reason"),
                              F.coalesce("closed_by", F.lit("?")), log)
    evidence = F.concat(F.lit("connections connection_id="), F.col("connection_id"),
                        F.lit("; metrics_flow metric_row_id="), F.concat_ws(",", "row_to_server", "row_to_client"),
                        F.when(F.col("log").isNotNull(), F.concat(F.lit("; broker_events event_id="), F.col("log.event_id")))
                        .otherwise(F.lit("")))
    gap = F.greatest(F.col("missed"), F.lit(2.0)).cast("long") * F.coalesce(F.col("heartbeat"), F.lit(0)).cast("long") * 1_000_000
    start = F.timestamp_micros(F.greatest(F.unix_micros("start_ts"), F.unix_micros("end_ts") - gap))
    return finding(rows, "heartbeat_timeout", entity_kind="connection", entity="connection_id",
                   connection_id="connection_id", start=start, end="end_ts", summary=summary, evidence=evidence,
                   count=F.lit(1))


def abrupt_end(inp):
    """A decoded connection that ended (FIN or RST) with no AMQP close from either side; an undecoded one reset."""
    from pyspark.sql import functions as F

    decoded = F.col("dialect").isNotNull()
    rows = inp.connections.where((decoded & F.col("end_reason").isin("fin", "rst") & F.expr(NO_CLOSE))
                                 | (~decoded & (F.col("end_reason") == "rst")))
    how = F.when(F.col("end_reason") == "rst", F.format_string("was reset (TCP RST from the %s)", F.coalesce("closed_by", F.lit("?")))) \
        .otherwise(F.format_string("ended with a FIN from the %s", F.coalesce("closed_by", F.lit("?"))))
    close = F.when(F.col("dialect").isNull(), F.lit(" (its AMQP traffic was not decoded)")).otherwise(
        F.lit(" with no AMQP close from either side"))
    summary = F.format_string("The connection %s%s, %s after it began.", how, close, seconds(F, F.col("duration_us")))
    return finding(rows, "abrupt_end", entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start="end_ts", end="end_ts", summary=summary, evidence=ids(F, "connections", "connection_id", "connection_id"),
                   count=F.lit(1))


def access_refused(inp):
    from pyspark.sql import functions as F

    code = F.col("close_code").isin(403, 530) & (F.col("amqp_closed_by") == "server")
    sasl = F.col("sasl_outcome").isNotNull() & (F.col("sasl_outcome") != "ok")
    cond = F.col("close_condition") == "amqp:unauthorized-access"
    rows = inp.connections.where(code | sasl | cond)
    why = (F.when(code, F.format_string("connection.close %d '%s'", F.col("close_code"), F.coalesce("close_text", F.lit(""))))
           .when(sasl, F.format_string("SASL outcome %s", F.col("sasl_outcome")))
           .otherwise(F.format_string("close %s '%s'", F.col("close_condition"), F.coalesce("close_description", F.lit("")))))
    who = F.concat(F.when(F.col("user").isNotNull(), F.format_string(" for user '%s'", F.col("user"))).otherwise(F.lit("")),
                   F.when(F.col("vhost").isNotNull(), F.format_string(" on vhost '%s'", F.col("vhost"))).otherwise(F.lit("")))
    summary = F.format_string("The broker refused the connection%s: %s.", who, why)
    return finding(rows, "access_refused", entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start="start_ts", end="end_ts", summary=summary,
                   evidence=ids(F, "connections", "connection_id", "connection_id"), count=F.lit(1))


def tls_not_decrypted(inp):
    from pyspark.sql import functions as F

    rows = inp.connections.where(F.col("tls") & (F.coalesce("tls_status", F.lit("no_key")) != "decrypted"))
    summary = F.format_string("A TLS connection amqplens did not decrypt (%s): its AMQP traffic is not in the tables; give "
                              "its key log with --keylog.", F.coalesce("tls_status", F.lit("no_key")))
    return finding(rows, "tls_not_decrypted", entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start="start_ts", end="end_ts", summary=summary,
                   evidence=ids(F, "connections", "connection_id", "connection_id"), count=F.lit(1))


def capture_gaps(inp):
    from pyspark.sql import functions as F

    rows = inp.connections.where((F.col("missing_bytes_to_server") + F.col("missing_bytes_to_client")) > 0)
    summary = F.format_string("%d bytes to the server and %d to the client were never captured (gaps in the TCP streams): "
                              "findings on this connection may miss or cut what happened.",
                              F.col("missing_bytes_to_server"), F.col("missing_bytes_to_client"))
    evidence = F.format_string("decode_errors stage=tcp connection_id=%s", F.col("connection_id"))
    return finding(rows, "capture_gaps", entity_kind="connection", entity="connection_id", connection_id="connection_id",
                   start="start_ts", end="end_ts", summary=summary, evidence=evidence,
                   count=F.col("missing_bytes_to_server") + F.col("missing_bytes_to_client"))


def connection_churn(inp):
    """Many short-lived connections from one client address; many channel.open on one connection."""
    from pyspark.sql import functions as F

    c = inp.conf
    # rows: one per (capture, client address) after the groupBy
    short = (inp.connections.where(F.col("duration_us") <= c["findings.churn_max_life_s"] * 1e6)
             .groupBy("capture_id", "client_ip")
             .agg(F.count("*").alias("n"), F.min("start_ts").alias("first_ts"), F.max("end_ts").alias("last_ts"),
                  F.min("connection_id").alias("first_id"), F.max("connection_id").alias("last_id"),
                  F.avg("duration_us").alias("mean_us"))
             .where(F.col("n") >= c["findings.churn_min_connections"]))
    conns = finding(short, "connection_churn", entity_kind="client", entity="client_ip", connection_id=None,
                    start="first_ts", end="last_ts",
                    summary=F.format_string("%d connections from %s lived %s or less (mean %s) within %s: each open "
                                            "costs the broker a handshake, an authentication and a process.", F.col("n"),
                                            F.col("client_ip"), F.lit(f"{c['findings.churn_max_life_s']:g} s"),
                                            seconds(F, F.col("mean_us")),
                                            seconds(F, F.unix_micros("last_ts") - F.unix_micros("first_ts"))),
                    evidence=F.format_string("connections client_ip=%s duration_us<=%d (connection_id=%s .. %s)",
                                             F.col("client_ip"), F.lit(int(c["findings.churn_max_life_s"] * 1e6)),
                                             F.col("first_id"), F.col("last_id")),
                    count="n", key=F.lit("connections"))
    # rows: one per connection after the groupBy of its channel.open requests
    opens = (inp.read("request_responses").where(F.col("request").isin("channel.open", "begin"))
             .groupBy("capture_id", "connection_id")
             .agg(F.count("*").alias("n"), F.min("request_ts").alias("first_ts"), F.max("request_ts").alias("last_ts"),
                  F.min("request_frame_id").alias("first_id"), F.max("request_frame_id").alias("last_id"))
             .where(F.col("n") >= c["findings.churn_min_channels"]))
    chans = finding(opens, "connection_churn", entity_kind="connection", entity="connection_id",
                    connection_id="connection_id", start="first_ts", end="last_ts",
                    summary=F.format_string("%d channels (or sessions) opened on one connection within %s: open a channel "
                                            "once and keep it.", F.col("n"),
                                            seconds(F, F.unix_micros("last_ts") - F.unix_micros("first_ts"))),
                    evidence=F.format_string("request_responses request=channel.open connection_id=%s (%d rows: "
                                             "request_frame_id=%s .. %s)", F.col("connection_id"), F.col("n"),
                                             F.col("first_id"), F.col("last_id")),
                    count="n", key=F.lit("channels"))
    return conns.unionByName(chans)


RULES = (heartbeat_timeout, abrupt_end, access_refused, tls_not_decrypted, capture_gaps, connection_churn)
