"""What the rules read: the tables of the captures to do, a few of them cut down and cached once for all rules."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from amqplens.config import Config

CONNECTION_COLUMNS = (
    "connection_id", "capture_id", "client_ip", "client_port", "server_ip", "server_port", "ip_version", "start_ts",
    "end_ts", "duration_us", "end_reason", "closed_by", "tls", "tls_status", "source", "dialect", "heartbeat",
    "client_idle_timeout_ms", "server_idle_timeout_ms", "close_code", "close_text", "amqp_closed_by", "sasl_outcome",
    "close_condition", "close_description", "user", "vhost", "missing_bytes_to_server", "missing_bytes_to_client",
    "client_properties_json", "client_container_id")
DELIVERY_COLUMNS = ("capture_id", "connection_id", "delivery_id", "dialect", "direction", "channel", "consumer_tag",
                    "link_name", "method", "exchange", "routing_key", "queue", "message_id", "body_sha256", "redelivered",
                    "settle_mode", "sent_ts", "settled_ts", "settle_latency_us", "outcome")
FLOW_COLUMNS = ("capture_id", "connection_id", "ts", "event", "event_id", "entity", "channel", "reason", "flow_active")
CONTROL_COLUMNS = ("capture_id", "connection_id", "frame_id", "ts", "direction", "channel", "class_name", "method_name",
                   "performative", "consumer_tag", "queue", "handle", "link_name", "role")


@dataclasses.dataclass
class Inputs:
    conf: Config
    read: Callable[[str], Any]  # name -> the table's rows of the captures to do
    connections: Any  # the captured connections (one row each), cached
    control: Any  # attach, basic.consume and basic.cancel frames (a few per channel and link), cached
    flow_whole: Any  # metrics_flow rows for the whole capture (bucket_seconds 0), cached
    broker_events: Any  # broker_events: alarms and errors of every log (a few rows per connection), cached
    deliveries: Any  # the deliveries some rule looks at (outcomes, redelivered, slow settles), few columns, cached
    flow_events: Any  # the blocked, unblocked and channel.flow events, cached

    def conn_times(self):
        """(connection_id, conn_start, conn_end): one row per connection, to broadcast."""
        from pyspark.sql import functions as F

        return self.connections.select("connection_id", F.col("start_ts").alias("conn_start"), F.col("end_ts").alias("conn_end"))

    def cached(self):
        return (self.connections, self.control, self.flow_whole, self.broker_events, self.deliveries, self.flow_events)


def inputs(store, conf: Config, capture_ids: list[str]) -> Inputs:
    from pyspark.sql import functions as F

    read = lambda name: store.read(name, capture_ids)  # noqa: E731
    frames = read("frames")
    cm = (F.col("class_name") == "basic") & F.col("method_name").isin("consume", "cancel")
    # rows: the attach, basic.consume and basic.cancel frames: a few per link and consumer (a scan of 4 columns)
    control = frames.where((F.col("performative") == "attach") | cm).select(*CONTROL_COLUMNS).cache()
    # rows: one per connection (its key)
    connections = read("connections").where(F.col("source") == "capture").select(*CONNECTION_COLUMNS).cache()
    # rows: <= 10 metrics x entities x 2 directions of the captures (the whole-capture rows)
    flow_whole = read("metrics_flow").where(F.col("bucket_seconds") == 0).cache()
    # rows: the alarms and missed-heartbeat lines of every log ingested (broker_events is per log, not per capture)
    heartbeat = F.col("connection_id").isNotNull() & F.lower(F.col("message")).contains("missed heartbeats")
    events = (store.read("broker_events").where(F.col("event").isin("alarm_set", "alarm_cleared") | heartbeat)
              .select("event_id", "ts", "event", "alarm_resource", "node", "connection_id", "reply_text", "message").cache())
    # one scan of each large table for every rule: rows <= the deliveries with an outcome a rule names, redelivered,
    # or settled slower than findings.slow_settle_min_ms; the flow events of blocks and channel.flow
    from amqplens.jobs.findings.settlement import OUTCOME_KIND

    wanted = (F.col("outcome").isin(*OUTCOME_KIND) | F.col("redelivered")
              | (F.col("settle_latency_us") >= conf["findings.slow_settle_min_ms"] * 1000))
    deliveries = read("deliveries").where(wanted).select(*DELIVERY_COLUMNS).cache()
    flow_events = (read("flow_events").where(F.col("event").isin("blocked", "unblocked", "flow"))
                   .select(*FLOW_COLUMNS).cache())
    return Inputs(conf, read, connections, control, flow_whole, events, deliveries, flow_events)
