"""Flow-control findings: publisher_blocked (with the broker-log alarm that explains it), channel_flow_off,
credit_starved, slow_consumer."""

from __future__ import annotations

from amqplens.jobs.findings.rows import finding, ids, seconds


def publisher_blocked(inp):
    """Each connection.blocked .. connection.unblocked interval (or .. the connection's end), with the alarm a broker
    log of the same time shows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("connection_id").orderBy("ts", "event_id")
    # rows: the blocked/unblocked events (two per block); connection_id is unique on the right
    ev = (inp.flow_events.where(F.col("event").isin("blocked", "unblocked") & (F.col("entity") == "connection"))
          .select("capture_id", "connection_id", "ts", "event", "event_id", "reason")
          .withColumn("prev", F.lag("event").over(w))
          .withColumn("next_ts", F.lead("ts").over(w)).withColumn("next_id", F.lead("event_id").over(w))
          .where((F.col("event") == "blocked") & (F.coalesce(F.col("prev"), F.lit("unblocked")) == "unblocked"))
          .join(F.broadcast(inp.conn_times()), "connection_id", "left"))
    end = F.coalesce("next_ts", "conn_end", "ts")
    us = F.unix_micros(end) - F.unix_micros("ts")
    blocks = ev.withColumn("end", end).withColumn("us", us).where(F.col("us") >= inp.conf["findings.min_blocked_ms"] * 1000)
    # the alarm: rows <= blocks x the alarms set within the tolerance before the block and before its end
    tol = inp.conf["logs.join_tolerance_s"]
    alarms = inp.broker_events.where(F.col("event") == "alarm_set").select(
        F.col("event_id").alias("alarm_id"), F.col("ts").alias("alarm_ts"), "alarm_resource", "node")
    near = (F.col("alarm_ts") >= F.col("ts") - F.expr(f"INTERVAL {tol} SECONDS")) & (F.col("alarm_ts") <= F.col("end"))
    first = F.min_by(F.struct("alarm_id", "alarm_resource", "node", "alarm_ts"), "alarm_ts")
    explained = (blocks.join(F.broadcast(alarms), near, "left")
                 .groupBy(*blocks.columns).agg(first.alias("alarm")))
    still = F.when(F.col("next_ts").isNull(), F.lit(", still blocked when the connection ended")).otherwise(F.lit(""))
    alarm = F.when(F.col("alarm.alarm_id").isNotNull(), F.format_string(
        "; the broker log shows a %s alarm set on %s at %s", F.col("alarm.alarm_resource"), F.col("alarm.node"),
        F.date_format("alarm.alarm_ts", "HH:mm:ss.SSS"))).otherwise(F.lit(""))
    summary = F.concat(F.lit("The broker blocked the connection"),
                       F.when(F.col("reason").isNotNull(), F.format_string(" (%s)", F.col("reason"))).otherwise(F.lit("")),
                       F.lit(" for "), seconds(F, F.col("us")), still, alarm,
                       F.lit(": its publishes were not read meanwhile."))
    evidence = F.concat(ids(F, "flow_events", "event_id", "event_id", "next_id"),
                        F.when(F.col("alarm.alarm_id").isNotNull(),
                               F.concat(F.lit("; broker_events event_id="), F.col("alarm.alarm_id"))).otherwise(F.lit("")))
    return finding(explained, "publisher_blocked", entity_kind="connection", entity="connection_id",
                   connection_id="connection_id", start="ts", end="end", summary=summary, evidence=evidence,
                   count=F.floor(F.col("us") / 1000), key=F.col("event_id"))


def channel_flow_off(inp):
    """Channels with channel.flow active=false for longer than findings.min_blocked_ms (metrics_flow flow_off_us)."""
    from pyspark.sql import functions as F

    off = inp.flow_whole.where((F.col("metric") == "flow_off_us") & (F.col("value") > 0)
                               & (F.col("value") >= inp.conf["findings.min_blocked_ms"] * 1000))
    # rows: the flow events of channels (0-9-1 channel.flow: rare), one row per channel after the groupBy
    span = (inp.flow_events.where((F.col("event") == "flow") & F.col("flow_active").isNotNull())
            .groupBy("connection_id", "channel")
            .agg(F.min(F.when(~F.col("flow_active"), F.col("ts"))).alias("off_ts"), F.max("ts").alias("last_ts")))
    # rows: one span per (connection, channel): off rows
    rows = off.join(F.broadcast(span), ["connection_id", "channel"], "left").join(F.broadcast(inp.conn_times()), "connection_id", "left")
    summary = F.format_string("The channel spent %s with channel.flow off (%.0f%% of the %s observed): its peer asked it "
                              "to stop sending content.", seconds(F, F.col("value")),
                              100 * F.col("value") / F.col("observed_us"), seconds(F, F.col("observed_us")))
    return finding(rows, "channel_flow_off", entity_kind="channel", entity="entity", connection_id="connection_id",
                   channel="channel", start=F.coalesce("off_ts", "conn_start"), end=F.coalesce("conn_end", "last_ts"),
                   summary=summary, evidence=ids(F, "metrics_flow", "metric_row_id", "metric_row_id"),
                   count=F.floor(F.col("value") / 1000))


def _consumer_life(inp):
    """(connection_id, channel, consumer_tag, life_start, life_end): from its basic.consume to the first basic.cancel
    (either side's); one row per consumer tag after the groupBy of the consume and cancel frames."""
    from pyspark.sql import functions as F

    frames = inp.control.where((F.col("class_name") == "basic") & F.col("consumer_tag").isNotNull())
    return frames.groupBy("connection_id", "channel", "consumer_tag").agg(
        F.min(F.when(F.col("method_name") == "consume", F.col("ts"))).alias("life_start"),
        F.min(F.when(F.col("method_name") == "cancel", F.col("ts"))).alias("life_end"))


def slow_consumer(inp):
    """Consumers at their prefetch limit for findings.slow_consumer_share of their life (basic.consume to
    basic.cancel, within the time metrics_flow observed them)."""
    from pyspark.sql import functions as F

    tail = F.element_at(F.split("entity", "/"), -1)
    # rows: <= one life per (connection, channel, consumer tag): the at-limit rows
    rows = (inp.flow_whole.where((F.col("metric") == "at_prefetch_limit_us") & (F.col("entity_kind") == "consumer")
                                 & (F.col("value") > 0))
            .withColumn("consumer_tag", tail)
            .join(F.broadcast(inp.conn_times()), "connection_id", "left")
            .join(F.broadcast(_consumer_life(inp)), ["connection_id", "channel", "consumer_tag"], "left"))
    life = F.least(F.col("observed_us"), F.unix_micros(F.coalesce("life_end", "conn_end"))
                   - F.unix_micros(F.coalesce("life_start", "conn_start")))
    rows = rows.withColumn("life_us", life).where(
        (F.col("life_us") >= inp.conf["findings.min_life_ms"] * 1000)
        & (F.col("value") >= inp.conf["findings.slow_consumer_share"] * F.col("life_us")))
    summary = F.format_string(
        "The consumer was held at its prefetch limit for %s, %.0f%% of its %s life: the broker waited for its acks "
        "before delivering more.", seconds(F, F.col("value")), 100 * F.col("value") / F.col("life_us"),
        seconds(F, F.col("life_us")))
    return finding(rows, "slow_consumer", entity_kind="consumer", entity="entity", connection_id="connection_id",
                   channel="channel", start=F.coalesce("life_start", "conn_start"), end=F.coalesce("life_end", "conn_end"),
                   summary=summary, evidence=ids(F, "metrics_flow", "metric_row_id", "metric_row_id"),
                   count=F.floor(F.col("value") / 1000))


def credit_starved(inp):
    """1.0 sender links (the client sends, the broker's attach has role receiver) without link credit for
    findings.credit_starved_share of their observed time."""
    from pyspark.sql import functions as F

    rows = (inp.flow_whole.where((F.col("metric") == "zero_credit_us") & (F.col("entity_kind") == "link")
                                 & (F.col("observed_us") >= inp.conf["findings.min_life_ms"] * 1000) & (F.col("value") > 0)
                                 & (F.col("value") >= inp.conf["findings.credit_starved_share"] * F.col("observed_us")))
            .join(F.broadcast(inp.conn_times()), "connection_id", "left"))
    # flow_events number a link by the receiver's handle: the broker's attach (to the client, role receiver) of a
    # link the client sends on; rows: one per (connection, channel, handle) after the groupBy
    senders = (inp.control.where((F.col("performative") == "attach") & (F.col("direction") == "to_client")
                                 & (F.col("role") == "receiver"))
               .select("connection_id", "channel", F.concat(F.lit("handle "), F.col("handle").cast("string")).alias("_h"))
               .distinct())
    tail = F.element_at(F.split("entity", "/"), -1)
    rows = rows.join(F.broadcast(senders), (rows.connection_id == senders.connection_id) & (rows.channel == senders.channel)
                     & (tail == senders._h), "left_semi")
    summary = F.format_string(
        "The sender link had no link credit for %s, %.0f%% of the %s observed: the broker left the client unable to send.",
        seconds(F, F.col("value")), 100 * F.col("value") / F.col("observed_us"), seconds(F, F.col("observed_us")))
    return finding(rows, "credit_starved", entity_kind="link", entity="entity", connection_id="connection_id",
                   channel="channel", start="conn_start", end="conn_end", summary=summary,
                   evidence=ids(F, "metrics_flow", "metric_row_id", "metric_row_id"), count=F.floor(F.col("value") / 1000))


RULES = (publisher_blocked, channel_flow_off, slow_consumer, credit_starved)
