"""Contracts of the metric tables (amqplens/jobs/metrics/ writes them, amqplens/report/__init__.py draws them).

Every metric table has the same leading columns: a row id, the capture, the
time bucket (``metrics.bucket``; bucket_seconds = 0 marks the row covering
the whole capture) and the entity the row is about. A capture is the unit the
TableStore replaces, so metrics are computed per capture.
"""

from __future__ import annotations

from amqplens.contracts.base import Column as C
from amqplens.contracts.base import CAPTURE_DATE, CAPTURE_ID, Table
from amqplens.contracts.values import TO_FROM_BROKER, TO_SERVER_CLIENT

ENTITY_KINDS = "capture | connection | channel | consumer | link | session | queue | exchange | address"

_LEADING = (
    C("metric_row_id", "string", "sha256 of the columns that identify the row (capture, bucket, entity, metric, ...)", False),
    CAPTURE_ID,
    CAPTURE_DATE,
    C("bucket_start", "timestamp", "start of the time bucket (UTC); for bucket_seconds = 0 the capture's first packet", False),
    C("bucket_seconds", "int32", "bucket length in seconds (metrics.bucket); 0 = the whole capture", False),
    C("entity_kind", "string", f"what the row is about: {ENTITY_KINDS}", False, values=tuple(ENTITY_KINDS.split(" | "))),
    C("entity", "string", "the entity's name: connection_id, connection_id/channel, connection_id/channel/consumer tag or link name, "
      "queue, exchange ('(default)' for ''), 1.0 address; the capture_id for entity_kind capture", False),
    C("entity_label", "string", "the entity as an operator names it (amqplens/jobs/labels.py): the capture file's name; "
      "'client ip:port -> server ip:port \"connection name\"' (0-9-1 connection_name client property or 1.0 container-id) "
      "for a connection, then ' ch N', ' consumer TAG queue Q', ' link NAME', ' session ch N'; 'queue Q', 'exchange X', "
      "'address A'", False),
    C("connection_id", "string", "the connection, for connection, channel, consumer, link and session rows"),
    C("channel", "int32", "the channel (0-9-1) or session channel (1.0), for channel, consumer, link and session rows"),
    C("dialect", "string", "0-9-1 | 1.0 | ... (null where a row spans dialects)"),
)

METRICS_LATENCY = Table(
    name="metrics_latency",
    doc=(
        "How long things took, per time bucket and entity: count, mean and percentiles in microseconds. "
        "A row is counted in the bucket of its start (publish, deliver, request, SYN). Percentiles are exact "
        "(every group's values sorted, linear between the closest ranks as Spark's percentile)."
    ),
    key=("metric_row_id",),
    columns=(
        *_LEADING,
        C("metric", "string", "what was timed (see the metric definitions)", False, values=(
            "publish_confirm", "deliver_settle", "transfer_settle", "request_response", "tcp_handshake", "amqp_handshake", "end_to_end")),
        C("direction", "string", "to_broker | from_broker, for settle latencies", values=TO_FROM_BROKER),
        C("method", "string", "publish | deliver | get-ok | transfer, or the request (queue.declare, attach, ...)"),
        C("count", "int64", "values measured", False),
        C("missing", "int64", "rows of the group with no value: never settled, never answered, or (end_to_end) a delivery whose publish "
          "is not in the capture or could not be told (see the metric definitions)", False),
        C("mean_us", "double", "mean"),
        C("p50_us", "double", "median"),
        C("p90_us", "double", "90th percentile"),
        C("p99_us", "double", "99th percentile"),
        C("max_us", "int64", "maximum"),
        C("exact", "bool", "percentiles are exact (always true since every group's values are sorted; false in rows of "
                              "older versions, which used percentile_approx for large groups)", False),
    ),
)

METRICS_SETTLEMENT = Table(
    name="metrics_settlement",
    doc=(
        "What happened to messages, per time bucket (of the message's first frame) and entity: one row per measure, "
        "with its count, the number of messages it is a share of, and the rate."
    ),
    key=("metric_row_id",),
    columns=(
        *_LEADING,
        C("direction", "string", "to_broker (publishes) | from_broker (deliveries)", False, values=TO_FROM_BROKER),
        C("measure", "string", "outcome | settle_mode | redelivered | unsettled_at_close", False, values=("outcome", "settle_mode", "redelivered", "unsettled_at_close")),
        C("value", "string", "the outcome or settle mode (deliveries.outcome / settle_mode); 'true' for redelivered and "
          "unsettled_at_close", False),
        C("count", "int64", "messages with this value", False),
        C("messages", "int64", "messages of the group (the denominator)", False),
        C("rate", "double", "count / messages", False),
    ),
)

METRICS_FLOW = Table(
    name="metrics_flow",
    doc=(
        "Flow control, per time bucket and entity. Each flow_events row's state lasts until the next row of the same "
        "entity or the end of the connection; durations are the part of those intervals inside the bucket. A bucket "
        "row is written where something happened: a state began or ended in it (time-in-state metrics) or a frame "
        "was sent in it (heartbeat metrics), and the whole-capture row always. A bucket with no row for an entity "
        "lies wholly inside one of its states, carried forward from the entity's last row before it: the whole "
        "bucket is observed in that state (e.g. flow_off_us is the bucket length if flow was off, else 0; "
        "prefetch_utilisation and its max are the last in-flight / prefetch), and no heartbeat was sent. So rows "
        "grow with the events, never with the time a state lasts (a channel idle for 30 days: 2 rows, not one per "
        "minute). Lakes written before this rule hold a row for every bucket an interval overlapped: the rows dropped "
        "since are those between a state's first and last bucket, whose values the carry-forward gives; every "
        "row still written has the value it had."
    ),
    key=("metric_row_id",),
    columns=(
        *_LEADING,
        C("metric", "string", "the flow-control measure; its name ends with its unit (us or s) unless it is a ratio or a count",
          False, values=("prefetch_utilisation", "prefetch_utilisation_max", "at_prefetch_limit_us", "blocked_us", "flow_off_us",
                         "zero_credit_us", "zero_window_us", "heartbeats_sent", "heartbeat_interval_s", "missed_heartbeats")),
        C("direction", "string", "to_server | to_client for heartbeat metrics (who sent)", values=TO_SERVER_CLIENT),
        C("value", "double", "the value, in the unit the metric name ends with (us, s) or a ratio / count", False),
        C("observed_us", "int64", "time of the bucket the entity's state was known (the denominator of time shares); "
          "a bucket without a row, inside one state, is observed whole"),
    ),
)

METRICS_ERRORS = Table(
    name="metrics_errors",
    doc="Errors per time bucket and connection: channel and connection exceptions, 1.0 error conditions, decode errors, "
        "peer anomalies.",
    key=("metric_row_id",),
    columns=(
        *_LEADING,
        C("kind", "string", "channel_exception | connection_exception | link_error | session_error | connection_error | "
          "decode_error | peer_anomaly", False, values=("channel_exception", "connection_exception", "link_error", "session_error", "connection_error", "decode_error",
                 "peer_anomaly")),
        C("raised_by", "string", "broker | client (who sent the close); null for decode errors", values=("broker", "client")),
        C("code", "int32", "0-9-1 reply code (404, 406, 320, ...)"),
        C("condition", "string", "reply text up to ' - ' (NOT_FOUND, ...), 1.0 error condition (amqp:not-found, ...), decode "
          "error stage:reason, or the anomaly a peer_anomaly row counts (credit_exceeded, duplicate_tag, ...)", False),
        C("count", "int64", "occurrences", False),
    ),
)

METRIC_TABLES = (METRICS_LATENCY, METRICS_SETTLEMENT, METRICS_FLOW, METRICS_ERRORS)

# (table, metric or measure, definition for a RabbitMQ operator). tools/gen_table_docs.py renders these
# into docs/tables.md, next to the columns; this is the one place a metric is defined.
METRIC_DEFINITIONS = (
    ("metrics_latency", "publish_confirm", "Publisher confirms: time from the client's basic.publish to the broker's basic.ack or "
     "basic.nack covering it (multiple=true acks count for every tag they cover). Only channels in confirm mode "
     "(confirm.select); transactional and unconfirmed publishes are not in it."),
    ("metrics_latency", "deliver_settle", "Consumer acknowledgement time: from basic.deliver (or basic.get-ok) to the basic.ack, "
     "nack or reject that settles it, or the tx.commit of a transactional ack. No-ack consumers are left out (their latency is 0 "
     "by definition). A slow value means the application holds messages long: they count against prefetch meanwhile."),
    ("metrics_latency", "transfer_settle", "AMQP 1.0: from a transfer to the disposition that settles it, per direction "
     "(to_broker: the broker accepting what a sender link sent; from_broker: the client settling what a receiver link got). "
     "Pre-settled transfers are left out."),
    ("metrics_latency", "request_response", "A synchronous method and its answer on the same channel: queue.declare -> declare-ok, "
     "channel.open -> open-ok, 1.0 attach -> attach, ... (method = the request). A channel.close answering a request ends it "
     "as an error; requests never answered count in missing."),
    ("metrics_latency", "tcp_handshake", "TCP round trip: the client's SYN to its ACK of the server's SYN/ACK, when all three "
     "packets were captured."),
    ("metrics_latency", "amqp_handshake", "Connection set-up as the application feels it: SYN to connection.open-ok (0-9-1) or "
     "to the server's open (1.0); includes TCP, protocol header, SASL/connection.start/tune. Only when the SYN was captured."),
    ("metrics_latency", "end_to_end", "Publish to delivery across connections, for each message the broker delivered "
     "(basic.deliver, get-ok, 0-10 message.transfer and 1.0 transfers from the broker), counted in the bucket of the "
     "delivery. A message is known by its message-id where it has one, else by its body hash with where it was sent "
     "(exchange and routing key; the link address for 1.0). Queues are first in, first out: in each queue the first "
     "deliveries of a key take the publishes of that key in time order, the n-th the n-th, unless no publish of the key "
     "is left at its time: then it is unmatched (published before the capture started, or by a client not captured) "
     "and takes none. A redelivery (redelivered set) takes, in the same way and order, a requeued delivery of its key "
     "and queue (nack or reject with requeue, recover, unacked at close, 0-10/1.0 released or modified) and so that "
     "message's publish (a message requeued more than 4 times: unmatched from there on; 1.0 transfers carry no "
     "redelivered flag, so a 1.0 redelivery counts as a first delivery). Unmatched deliveries count "
     "in missing, nothing is guessed. Limits: a capture that starts while messages published before it are still "
     "queued matches those deliveries to the first publishes it shows, once one has been seen (too short until the "
     "backlog drains); a queue that does not deliver a key's messages in publish order (a priority queue holding "
     "messages of several priorities) or a publish routed to only some of the queues bound "
     "with its key (a binding added or removed during the capture) shifts the matches of that key in that queue; "
     "a message published over one dialect and consumed over another matches only by message-id. It runs as one "
     "shuffle of the publishes, deliveries and requeues by key and one pass over each key's events in time order "
     "(amqplens/jobs/metrics/e2e.py): the rows stay linear in the deliveries."),
    ("metrics_settlement", "outcome", "Messages per outcome (deliveries.outcome: confirmed, returned, acked, nacked_requeue, "
     "rejected_drop, accepted, released, ...) and their share of the group's messages."),
    ("metrics_settlement", "settle_mode", "How messages were meant to be settled: confirm / tx / no_confirm publishes, "
     "manual_ack / auto_ack / tx deliveries, 1.0 sender/receiver settle modes (e.g. mixed/first)."),
    ("metrics_settlement", "redelivered", "Deliveries with the redelivered flag set: the broker had delivered them before "
     "(requeued by a nack/reject, or by a consumer or channel that went away). A high rate means messages go round in circles."),
    ("metrics_settlement", "unsettled_at_close", "Messages still unconfirmed or unacknowledged when their channel, link or "
     "connection closed (or the capture ended): the broker requeues unacked deliveries; the publisher does not know whether "
     "unconfirmed publishes arrived."),
    ("metrics_flow", "prefetch_utilisation", "Time-weighted mean of in-flight (delivered, not yet acked) / prefetch count "
     "(basic.qos) over the time a prefetch limit was in force. Near 1 means the consumer is the bottleneck: the broker waits "
     "for acks before sending more."),
    ("metrics_flow", "prefetch_utilisation_max", "The highest in-flight / prefetch seen in the bucket."),
    ("metrics_flow", "at_prefetch_limit_us", "Time with in-flight >= prefetch count > 0: the broker could not deliver to this "
     "channel or consumer."),
    ("metrics_flow", "blocked_us", "Time the broker had the connection blocked (connection.blocked until connection.unblocked, "
     "e.g. a memory or disk alarm): publishes on it are not read."),
    ("metrics_flow", "flow_off_us", "Time a channel spent with channel.flow active=false (the peer asked it to stop sending content)."),
    ("metrics_flow", "zero_credit_us", "AMQP 1.0: time a link had no link credit: the sender must not send on it. On a "
     "receiver link a long time means the client is not issuing credit (a starved or slow consumer)."),
    ("metrics_flow", "zero_window_us", "AMQP 1.0: time a session had an incoming (or the peer's remote incoming) window of 0: no "
     "transfer can cross the session."),
    ("metrics_flow", "heartbeats_sent", "Heartbeat frames (0-9-1) or empty frames (1.0) sent in the direction given."),
    ("metrics_flow", "heartbeat_interval_s", "The negotiated heartbeat (0-9-1 tune-ok) or, for 1.0, the idle-time-out the "
     "receiving peer advertised, in seconds. RabbitMQ sends a heartbeat every half interval when otherwise idle."),
    ("metrics_flow", "missed_heartbeats", "Whole heartbeat intervals that passed with no frame at all in that direction: for each "
     "gap between consecutive frames longer than the interval, floor(gap / interval). RabbitMQ closes a connection after two."),
    ("metrics_errors", "channel_exception / connection_exception", "channel.close / connection.close with a reply code other "
     "than 200, by code and the constant name before ' - ' in the reply text (404 NOT_FOUND, 406 PRECONDITION_FAILED, 320 "
     "CONNECTION_FORCED, ...); raised_by says who sent it."),
    ("metrics_errors", "link_error / session_error / connection_error", "AMQP 1.0 detach / end / close carrying an error "
     "condition (amqp:not-found, amqp:resource-limit-exceeded, ...)."),
    ("metrics_errors", "peer_anomaly", "What a peer did that its protocol does not allow, kept as observed and counted "
     "here by anomaly: a delivery's flags (duplicate_tag, delivery_id_reused, orphan_continuation, ...) and a flow "
     "event's reason (credit_exceeded, ack_of_unknown_tag, disposition_of_unknown_id, ...)."),
    ("metrics_errors", "decode_error", "Bytes amqplens could not decode, by stage and reason (decode_errors), and frames whose "
     "content did not decode (frame:<code>); gaps in the TCP stream are tcp:gap."),
)
