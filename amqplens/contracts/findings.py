"""Contract of the findings table (amqplens/jobs/findings/ writes it, the report and ``amqplens summary`` open with it).

A finding is an observation about the traffic (what a peer or the broker did), never a failure of amqplens: its
expectations are amqplens's own promises about the rows (key unique, kinds and severities from the closed lists),
and nothing in them judges the peers. ``FINDING_RULES`` is the one place a rule is defined: tools/gen_table_docs.py
renders it into docs/tables.md beside the columns.
"""

from __future__ import annotations

from amqplens.contracts.base import Column as C
from amqplens.contracts.base import CAPTURE_DATE, CAPTURE_ID, Table
from amqplens.contracts.metrics import ENTITY_KINDS

SEVERITIES = ("critical", "warning", "info")

# (kind, severity, what it means for an operator, what it reads and the thresholds (findings.* config keys) it uses)
FINDING_RULES = (
    ("publisher_blocked", "critical",
     "The broker blocked the connection (connection.blocked, e.g. a memory or disk alarm): nothing published on it is "
     "read until connection.unblocked. The summary gives the reason, how long and, when a broker log of the same time "
     "was ingested, the alarm that explains it.",
     "flow_events (event blocked/unblocked), broker_events (alarm_set/alarm_cleared); `findings.min_blocked_ms`"),
    ("channel_flow_off", "warning",
     "A channel spent time with channel.flow active=false: its peer asked it to stop sending content.",
     "metrics_flow flow_off_us (whole capture, channel); `findings.min_blocked_ms`"),
    ("credit_starved", "warning",
     "AMQP 1.0: a sender link the broker left without link credit for a share of its life: the client could not send.",
     "metrics_flow zero_credit_us and observed_us (whole capture, link) of links whose transfers go to the broker "
     "(deliveries); `findings.credit_starved_share`, `findings.min_life_ms`"),
    ("slow_consumer", "warning",
     "A consumer held at its prefetch limit (in-flight >= basic.qos prefetch) for a share of its life (basic.consume "
     "to basic.cancel, or the connection's end): the broker waited for its acks before sending more, the consumer is "
     "the bottleneck.",
     "metrics_flow at_prefetch_limit_us and observed_us (whole capture, consumer rows), frames (basic.consume and "
     "basic.cancel: the consumer's life); `findings.slow_consumer_share`, `findings.min_life_ms`"),
    ("unsettled_at_end", "warning",
     "Deliveries or transfers never settled: unacknowledged when their channel, link or connection closed or the "
     "capture ended (the broker requeues them), or publishes never confirmed (the publisher does not know whether "
     "they arrived).",
     "deliveries (outcome unconfirmed_at_close, requeued_on_close, unsettled_at_close, open_at_capture_end), one "
     "aggregate per connection and direction; `findings.min_unsettled`"),
    ("redelivery_loop", "warning",
     "The same message delivered again and again (redelivered, requeued by nack/reject or a consumer that went away): "
     "a consumer that cannot process it and requeues it forever.",
     "deliveries with redelivered set, grouped by queue and message (message-id, else body hash with exchange and "
     "routing key); `findings.redelivery_loop_min`"),
    ("returned_unroutable", "warning",
     "Mandatory publishes the broker returned (basic.return, e.g. 312 NO_ROUTE): no queue was bound for them.",
     "deliveries (outcome returned), per connection"),
    ("publish_nacked", "critical",
     "Publishes the broker nacked (basic.nack in confirm mode): it could not take responsibility for them (queue full "
     "with reject-publish overflow, an internal error).",
     "deliveries (outcome nacked_by_broker), per connection"),
    ("rejected_by_consumer", "info",
     "AMQP 1.0 transfers the receiver (or broker) settled rejected or modified, or 0-9-1 deliveries the consumer "
     "rejected or nacked without requeue (dropped or dead-lettered).",
     "deliveries (outcome rejected, modified, rejected_drop, nacked_drop), per connection and direction"),
    ("slow_settle", "warning",
     "Confirms or acks much slower than the rest of the capture: each one that took findings.slow_settle_factor times "
     "the capture's own median of its kind (and findings.slow_settle_min_ms) counts, per consumer, link or channel. "
     "A consumer that holds some messages long keeps them from others and counts them against its prefetch.",
     "metrics_latency (the capture row's p50 of publish_confirm, deliver_settle, transfer_settle), deliveries "
     "(settle_latency_us, filtered to the slow ones before the groupBy); `findings.slow_settle_factor`, "
     "`findings.slow_settle_min_ms`, `findings.slow_settle_min_count`"),
    ("heartbeat_timeout", "critical",
     "The connection ended with heartbeat intervals missed: a peer stopped sending (RabbitMQ closes a connection after "
     "two missed heartbeats, with no connection.close).",
     "connections (heartbeat, end_reason, close_code), metrics_flow missed_heartbeats (whole capture, connection), "
     "broker_events (connection_closed_error naming missed heartbeats)"),
    ("abrupt_end", "warning",
     "A decoded connection that ended (FIN or reset) with no AMQP close (connection.close / 1.0 close) from either "
     "side, or a TLS connection not decrypted that was reset: the application, the broker or the network dropped it. "
     "(A close handshake left incomplete after an error close is that error's finding.)",
     "connections (end_reason, closed_by, amqp_closed_by, close_code, close_condition); frames never read"),
    ("access_refused", "critical",
     "Authentication or authorisation refused: connection.close 403 ACCESS_REFUSED (login or permissions), 530 "
     "NOT_ALLOWED (vhost), a 1.0 SASL outcome other than ok, or a 1.0 close amqp:unauthorized-access.",
     "connections (close_code, close_text, sasl_outcome, close_condition)"),
    ("connection_error", "critical",
     "The broker (or client) closed the connection with an error code: 320 CONNECTION_FORCED, 501, 504, 505, 541 "
     "INTERNAL_ERROR, ...; 1.0 close with an error condition (403/530 and unauthorized-access are access_refused).",
     "metrics_errors connection_exception / connection_error (connection rows)"),
    ("channel_error", "warning",
     "Channel exceptions by code: 404 NOT_FOUND, 406 PRECONDITION_FAILED, 403 ACCESS_REFUSED, 405 RESOURCE_LOCKED, ... "
     "One finding per connection and code, with how many.",
     "metrics_errors channel_exception (connection rows)"),
    ("link_error", "warning",
     "AMQP 1.0 links detached or sessions ended with an error condition (amqp:not-found, amqp:internal-error, ...).",
     "metrics_errors link_error / session_error (connection rows)"),
    ("consumer_cancelled", "warning",
     "The broker cancelled a consumer (basic.cancel from the broker: its queue was deleted, or a mirror failed over).",
     "frames (basic.cancel to the client: a filter of three columns)"),
    ("connection_churn", "warning",
     "Many short-lived connections (or channels opened and closed on one connection): every open costs the broker a "
     "process, a handshake and often an authentication.",
     "connections (duration_us per client address), request_responses (channel.open per connection); "
     "`findings.churn_min_connections`, `findings.churn_max_life_s`, `findings.churn_min_channels`"),
    ("tls_not_decrypted", "info",
     "A TLS connection amqplens could not decrypt (no key log entry, an unsupported suite, a record that did not "
     "authenticate): its AMQP traffic is not in the tables, so no other finding can speak of it.",
     "connections (tls, tls_status)"),
    ("capture_gaps", "info",
     "Bytes of the connection's TCP streams were never captured (gaps): every other finding on it is marked partial.",
     "connections (missing_bytes_to_server, missing_bytes_to_client)"),
)
KINDS = tuple(r[0] for r in FINDING_RULES)
SEVERITY = {r[0]: r[1] for r in FINDING_RULES}

FINDINGS = Table(
    name="findings",
    doc=(
        "One row per diagnosis: what went wrong in a capture's traffic, about which entity, from when to when, in one "
        "sentence with the numbers, and the rows that prove it. Computed by the findings stage from the lifecycle and "
        "metric tables (the rules are defined below the metric definitions). A finding is an observation about peers "
        "and the broker, never an amqplens failure."
    ),
    key=("finding_id",),
    columns=(
        C("finding_id", "string", "sha256 of capture_id, kind, entity and the rule's own key (e.g. the reply code): a "
          "rerun writes the same rows", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("kind", "string", "the rule that found it (see the finding rules)", False, values=KINDS),
        C("severity", "string", "critical (messages lost or refused, the application stopped) | warning (degraded, worth "
          "a look) | info (context)", False, values=SEVERITIES),
        C("entity_kind", "string", f"what the finding is about: {ENTITY_KINDS} | client", False,
          values=(*ENTITY_KINDS.split(" | "), "client")),
        C("entity", "string", "the entity's key as in the metric tables (connection_id, connection_id/channel, ...; the "
          "client address for entity_kind client)", False),
        C("entity_label", "string", "the entity as an operator names it, as in the metric tables (amqplens/jobs/labels.py)",
          False),
        C("connection_id", "string", "the connection, when the finding is about one connection (or something on it)"),
        C("channel", "int32", "the channel or session channel, for channel, consumer, link and session findings"),
        C("start_ts", "timestamp", "when the condition began (or was first seen)", False),
        C("end_ts", "timestamp", "when it ended (or was last seen)", False),
        C("summary", "string", "one sentence with the numbers", False),
        C("evidence", "string", "the rows that prove it: table, key column and ids (or the metric row), e.g. "
          "'flow_events event_id=...' or 'metrics_flow metric_row_id=...'", False),
        C("partial", "bool", "the capture has gaps in this connection's streams (capture_gaps), so the finding may "
          "miss or cut what happened", False),
        C("count", "int64", "how many occurrences the finding covers (closes, messages, seconds blocked ...: the "
          "summary says which)", False),
    ),
)
