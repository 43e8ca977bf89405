"""The table contracts of the lake. DESIGN.md describes them in prose; this is the law.

Regenerate the reference (docs/tables.md) and the golden files
(amqplens/contracts/golden/) with ``python -m tools.gen_table_docs`` after a change.
"""

from __future__ import annotations

from amqplens.contracts.base import Column as C
from amqplens.contracts.base import CAPTURE_DATE, CAPTURE_ID, Table
from amqplens.contracts.findings import FINDINGS
from amqplens.contracts.metrics import METRIC_TABLES
from amqplens.contracts.values import CLIENT_SERVER, DIALECTS, LOG_FORMATS, OUTCOMES, TO_FROM_BROKER, TO_SERVER_CLIENT

# Columns of connections filled by the AMQP codecs (null for undecoded connections), then the TLS layer's.
PROTOCOL_COLUMNS = (
    C("dialect", "string", "0-8 | 0-9 | 0-9-1 | 1.0 | ...: from the protocol header, connection.start's version or consistent framing", values=DIALECTS),
    C("dialect_source", "string", "protocol_header | connection_start | framing | forced", values=("protocol_header", "connection_start", "framing", "forced")),
    C("protocol_rejected", "bool", "the server answered the client's protocol header with its own and closed"),
    C("server_protocol_header", "string", "hex of the header a rejecting server sent"),
    C("channel_max", "int32", "negotiated channel-max (tune-ok)"),
    C("frame_max", "int64", "negotiated frame-max (tune-ok)"),
    C("heartbeat", "int32", "negotiated heartbeat interval, seconds (tune-ok)"),
    C("client_product", "string", "client-properties product"),
    C("client_version", "string", "client-properties version"),
    C("client_platform", "string", "client-properties platform"),
    C("client_capabilities_json", "string", "client-properties capabilities as JSON"),
    C("client_properties_json", "string", "all client-properties as JSON"),
    C("server_product", "string", "server-properties product"),
    C("server_version", "string", "server-properties version"),
    C("server_platform", "string", "server-properties platform"),
    C("server_capabilities_json", "string", "server-properties capabilities as JSON"),
    C("server_properties_json", "string", "all server-properties as JSON"),
    C("sasl_mechanism", "string", "SASL mechanism chosen by the client"),
    C("user", "string", "user name from the SASL response (the password is never stored)"),
    C("vhost", "string", "connection.open virtual-host"),
    C("close_code", "int32", "connection.close reply-code"),
    C("close_text", "string", "connection.close reply-text"),
    C("close_class_id", "int32", "connection.close class-id (the method that failed)"),
    C("close_method_id", "int32", "connection.close method-id"),
    C("amqp_closed_by", "string", "client | server: who sent connection.close first", values=CLIENT_SERVER),
    C("blocked_count", "int32", "connection.blocked notifications"),
    C("frames_to_server", "int64", "frames decoded client -> server"),
    C("frames_to_client", "int64", "frames decoded server -> client"),
    C("frame_bytes_to_server", "int64", "stream bytes in frames client -> server"),
    C("frame_bytes_to_client", "int64", "stream bytes in frames server -> client"),
    C("codec_error_bytes_to_server", "int64", "stream bytes in codec decode_errors client -> server"),
    C("codec_error_bytes_to_client", "int64", "stream bytes in codec decode_errors server -> client"),
    C("messages_to_server", "int64", "complete messages (method + header + body) client -> server"),
    C("messages_to_client", "int64", "complete messages server -> client"),
    C("client_container_id", "string", "1.0: client open container-id"),
    C("server_container_id", "string", "1.0: server open container-id"),
    C("client_hostname", "string", "1.0: the hostname the client's open asks for (the virtual host)"),
    C("client_idle_timeout_ms", "int64", "1.0: client open idle-time-out"),
    C("server_idle_timeout_ms", "int64", "1.0: server open idle-time-out"),
    C("client_offered_capabilities_json", "string", "1.0: client open offered-capabilities"),
    C("server_offered_capabilities_json", "string", "1.0: server open offered-capabilities"),
    C("client_desired_capabilities_json", "string", "1.0: client open desired-capabilities"),
    C("server_desired_capabilities_json", "string", "1.0: server open desired-capabilities"),
    C("sasl_outcome", "string", "1.0: sasl-outcome code name (ok, auth, sys, sys-perm, sys-temp)", values=("ok", "auth", "sys", "sys-perm", "sys-temp")),
    C("close_condition", "string", "1.0: error condition of the first close"),
    C("close_description", "string", "1.0: error description of the first close"),
) + (
    # TLS (amqplens.decode.tls): null for a connection that is not TLS. Per direction: stream bytes =
    # tls_plaintext + tls_overhead + tls_undecrypted + missing bytes; frames and codec errors cover the plaintext.
    C("tls_status", "string", "decrypted | no_key (no key log entry for its ClientHello random) | unsupported_suite | decrypt_failed (a record did not authenticate)", values=("decrypted", "no_key", "unsupported_suite", "decrypt_failed")),
    C("tls_version", "string", "TLS version the ServerHello chose: 1.2 | 1.3 | 1.1 | 1.0 | ssl3.0"),
    C("tls_cipher_suite", "string", "IANA name of the cipher suite the ServerHello chose (its number in hex when not one amqplens decrypts)"),
    C("tls_plaintext_bytes_to_server", "int64", "decrypted application data client -> server (the stream the AMQP codec saw; frames.stream_offset counts in it)"),
    C("tls_plaintext_bytes_to_client", "int64", "decrypted application data server -> client"),
    C("tls_overhead_bytes_to_server", "int64", "TLS record bytes that are not application data client -> server: headers, nonces, tags, padding, handshake, alerts"),
    C("tls_overhead_bytes_to_client", "int64", "same, server -> client"),
    C("tls_undecrypted_bytes_to_server", "int64", "TLS bytes not decrypted client -> server (their decode_errors rows have reason tls*)"),
    C("tls_undecrypted_bytes_to_client", "int64", "same, server -> client"),
)

# protocol column -> key of the codecs' connection facts, where they differ
PROTOCOL_FACT_KEYS = {
    "amqp_closed_by": "closed_by",
    "codec_error_bytes_to_server": "error_bytes_to_server",
    "codec_error_bytes_to_client": "error_bytes_to_client",
    "sasl_outcome": "sasl_outcome_name",
}

CAPTURES = Table(
    name="captures",
    doc="One row per input file, written last by the ingest job (its presence marks the capture as done).",
    key=("capture_id",),
    columns=(
        CAPTURE_ID,
        CAPTURE_DATE,
        C("path", "string", "path the file was read from (last ingest)", False),
        C("size_bytes", "int64", "file size", False),
        C("format", "string", "pcap | pcapng | unknown; a broker log's format: rabbitmq-3.6 | rabbitmq-3.7 | rabbitmq-3.9 | rabbitmq-json | rabbitmq-trace-text | rabbitmq-trace-json | rabbitmq-firehose | proton-trace | proton-trace-old | log-unknown", values=("pcap", "pcapng", "unknown", *LOG_FORMATS, "rabbitmq-trace-text", "rabbitmq-trace-json", "rabbitmq-firehose",
                   "proton-trace", "proton-trace-old", "log-unknown")),
        C("link_types", "array<int32>", "LINKTYPE numbers seen (pcapng may have several)"),
        C("splits", "int32", "byte-range splits the file was read in; 0: read by the direct path (capture.direct: each decoding task scanned the whole file for its flows, no packet shuffle)", False),
        C("packets_total", "int64", "packet records read", False),
        C("packets_tcp", "int64", "TCP packets among them", False),
        C("packets_selected", "int64", "packets of the connections kept (AMQP ports or sniffed)", False),
        C("ip_fragments", "int64", "IP fragments seen", False),
        C("connections", "int64", "rows this capture has in connections", False),
        C("capture_errors", "int64", "container/link-layer problems (rows in decode_errors, stage capture)", False),
        C("first_ts", "timestamp", "first packet time (UTC)"),
        C("last_ts", "timestamp", "last packet time (UTC)"),
        C("status", "string", "ok | partial (read with errors) | empty (well-formed headers and no packet, e.g. a quiet interval) | failed (nothing readable)", False, values=("ok", "partial", "empty", "failed")),
        C("error", "string", "the first problem, in words, when status is not ok"),
        C("run_id", "string", "run that wrote the row", False),
        C("decoder_version", "string", "amqplens version and config fingerprint the row was made with", False),
    ),
)

CONNECTIONS = Table(
    name="connections",
    doc="One row per TCP connection kept by flow selection. Byte counts are TCP stream bytes unless named wire_.",
    key=("connection_id",),
    columns=(
        C("connection_id", "string", "blake2b of capture_id, client and server endpoint and first packet time (and, for the n-th later connection of the same endpoints that started at that same time, n)", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("client_ip", "string", "client address (the SYN sender; see DESIGN.md for the fallbacks); '' when a log does not name it", False),
        C("client_port", "int32", "client TCP port", False),
        C("server_ip", "string", "server address", False),
        C("server_port", "int32", "server TCP port", False),
        C("ip_version", "int8", "4 or 6 (0 when a log does not name the endpoints)", False, values=(4, 6, 0)),
        C("start_ts", "timestamp", "first packet", False),
        C("end_ts", "timestamp", "last packet", False),
        C("duration_us", "int64", "end_ts - start_ts in microseconds", False),
        C("syn_seen", "bool", "the handshake was captured", False),
        C("handshake_rtt_us", "int64", "SYN to the client's ACK of SYN/ACK, when all three were captured"),
        C("end_reason", "string", "fin | rst | capture_end | port_reuse; log-sourced: closed | closed_abruptly | closed_error (the broker log's last word on it) | log_end", False, values=("fin", "rst", "capture_end", "port_reuse", "closed", "closed_abruptly", "closed_error", "log_end")),
        C("closed_by", "string", "client | server, for fin and rst", values=CLIENT_SERVER),
        C("tls", "bool", "a TLS port or a stream starting with a TLS record; decoded when a key log holds its secrets (tls_status)", False),
        C("selected_by", "string", "port | sniff: why the flow was kept; log for a connection a broker log or Proton trace gives", False, values=("port", "sniff", "log")),
        C("packets_to_server", "int64", "all packets client -> server, pure ACKs included", False),
        C("packets_to_client", "int64", "all packets server -> client", False),
        C("wire_bytes_to_server", "int64", "link-layer frame bytes client -> server (as tshark conv counts)", False),
        C("wire_bytes_to_client", "int64", "link-layer frame bytes server -> client", False),
        C("bytes_to_server", "int64", "TCP stream bytes client -> server, each once, missing ones included", False),
        C("bytes_to_client", "int64", "TCP stream bytes server -> client", False),
        C("retransmitted_bytes_to_server", "int64", "payload bytes seen again client -> server", False),
        C("retransmitted_bytes_to_client", "int64", "payload bytes seen again server -> client", False),
        C("out_of_order_bytes_to_server", "int64", "bytes that arrived before a hole below them was filled", False),
        C("out_of_order_bytes_to_client", "int64", "same, server -> client", False),
        C("missing_bytes_to_server", "int64", "stream bytes never captured (gap rows in decode_errors)", False),
        C("missing_bytes_to_client", "int64", "same, server -> client", False),
        C("overlap_conflicts", "int64", "retransmitted bytes that differed from the first copy (first copy wins)", False),
        C("source", "string", "capture | log", False, values=("capture", "log")),
        *PROTOCOL_COLUMNS,
    ),
)

DECODE_ERRORS = Table(
    name="decode_errors",
    doc=(
        "Everything that could not be decoded, and every hole in a TCP stream, with the raw bytes "
        "(capped) and a hash of the whole so a later version can try again. stage says which layer: "
        "capture (file container, link, IP), tcp (missing stream bytes: gaps), codec (AMQP framing), "
        "frame (a frame that framed but whose content did not decode: its frames row carries decode_error, its "
        "bytes are frame bytes and not counted again in the byte accounting; raw holds the frame; from a frame trace "
        "(Qpid Proton's PN_TRACE_FRM) raw is the trace line, offset its file offset), "
        "log (a broker log line that could not be read: offset is its file offset, detail starts with its line number)."
    ),
    key=("error_id",),
    columns=(
        C("error_id", "string", "blake2b of capture_id, connection_id, direction, stage, offset, reason", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("connection_id", "string", "null for capture-level problems"),
        C("direction", "string", "to_server | to_client; null for capture-level problems", values=TO_SERVER_CLIENT),
        C("stage", "string", "capture | tcp | codec | frame | log", False, values=("capture", "tcp", "codec", "frame", "log")),
        C("offset", "int64", "file offset (stage capture) or stream offset (tcp, codec)", False),
        C("length", "int64", "bytes this row accounts for (skipped, missing or undecodable)", False),
        C("reason", "string", "short machine-readable code", False),
        C("detail", "string", "one sentence for people"),
        C("ts", "timestamp", "time of the nearest packet, when known"),
        C("raw", "binary", "the bytes, capped at decode.max_error_bytes; empty for gaps"),
        C("raw_length", "int64", "length of the whole range the hash covers", False),
        C("raw_sha256", "string", "sha256 of the whole range's bytes (null for gaps)"),
    ),
)

FRAMES = Table(
    name="frames",
    doc=(
        "One row per AMQP frame of any dialect and source. Columns a dialect does not have are null. "
        "Message bodies are never stored: body_size and body_sha256 (and body_prefix when decode.body_prefix_bytes > 0)."
    ),
    key=("frame_id",),
    plain=("frame_id", "stream_offset", "ts", "delivery_tag", "message_seq", "arguments_json"),
    no_statistics=("frame_id", "direction", "stream_offset", "dialect", "frame_type", "size", "source"),
    columns=(
        C("frame_id", "string", "connection_id, s|c (to server|to client) and stream_offset joined by '-'", False),
        C("connection_id", "string", "the connection (connections.connection_id)", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("direction", "string", "to_server | to_client", False, values=TO_SERVER_CLIENT),
        C("stream_offset", "int64", "offset of the frame's first byte in its direction's TCP stream", False),
        C("ts", "timestamp", "time of the packet that carried the frame's first byte, or of the stream bytes before it when "
          "later: a segment captured ahead of a hole takes the time of the packet that filled it, so a direction's frames "
          "never go back in time", False),
        C("dialect", "string", "0-8 | 0-9 | 0-9-1 | 0-10 | 1.0 | 0-9-draft | amqp-fast-0.9a5", False, values=DIALECTS),
        C("frame_type", "string", "protocol_header | method | header | body | heartbeat | oob_* | trace (0-9-1 family; meta in AMQP/Fast); amqp | sasl | empty (1.0); control | command | header | body (0-10: the segment type)", False, values=("protocol_header", "method", "header", "body", "heartbeat", "oob_method", "oob_header", "oob_body",
                       "trace", "meta", "amqp", "sasl", "empty", "control", "command")),
        C("channel", "int32", "channel number (0-9-1) or channel (1.0)"),
        C("size", "int64", "bytes of the frame on the wire, header and frame-end included", False),
        C("class_id", "int32", "0-9-1 family: method class id"),
        C("method_id", "int32", "0-9-1 family: method id"),
        C("class_name", "string", "0-9-1 family: class name as in the spec (basic, confirm, ...)"),
        C("method_name", "string", "0-9-1 family: method name as in the spec (publish, deliver, ack, ...)"),
        C("delivery_tag", "int64", "0-9-1: delivery tag (basic.deliver/get-ok/ack/nack/reject, publisher confirms)"),
        C("multiple", "bool", "0-9-1: basic.ack/nack multiple"),
        C("requeue", "bool", "0-9-1: basic.nack/reject requeue"),
        C("redelivered", "bool", "0-9-1: basic.deliver/get-ok redelivered"),
        C("exchange", "string", "0-9-1: exchange argument"),
        C("routing_key", "string", "0-9-1: routing-key argument"),
        C("queue", "string", "0-9-1: queue argument"),
        C("consumer_tag", "string", "0-9-1: consumer-tag argument"),
        C("prefetch_count", "int64", "0-9-1: basic.qos prefetch-count"),
        C("prefetch_size", "int64", "0-9-1: basic.qos prefetch-size"),
        C("global_qos", "bool", "0-9-1: basic.qos global"),
        C("reply_code", "int32", "0-9-1: close/return reply-code"),
        C("reply_text", "string", "0-9-1: close/return reply-text"),
        C("body_size", "int64", "content header body size (0-9-1); message payload size of a transfer (1.0)"),
        C("active", "bool", "0-9-1: channel.flow active"),
        C("reason", "string", "0-9-1: connection.blocked reason"),
        C("mandatory", "bool", "0-9-1: basic.publish mandatory"),
        C("immediate", "bool", "0-9-1: basic.publish immediate"),
        C("no_ack", "bool", "0-9-1: basic.consume/get no-ack"),
        C("message_count", "int64", "0-9-1: message-count of declare-ok/get-ok/purge-ok/..."),
        C("message_seq", "int64", "0-based message number on the channel and direction, on every frame of a content-bearing message"),
        C("body_sha256", "string", "sha256 of the whole message body, on the frame that completes the message"),
        C("body_prefix", "binary", "the first decode.body_prefix_bytes bytes of the body (null by default)"),
        C("performative", "string", "1.0: open, begin, attach, flow, transfer, disposition, detach, end, close, sasl-*"),
        C("descriptor", "int64", "1.0: the performative's numeric descriptor"),
        C("handle", "int64", "1.0: link handle"),
        C("role", "string", "1.0: sender | receiver", values=("sender", "receiver")),
        C("link_name", "string", "1.0: attach name"),
        C("delivery_id", "int64", "1.0: transfer delivery-id"),
        C("delivery_tag_bin", "binary", "1.0: transfer delivery-tag (opaque bytes)"),
        C("settled", "bool", "1.0: transfer/disposition settled"),
        C("more", "bool", "1.0: transfer more"),
        C("aborted", "bool", "1.0: transfer aborted"),
        C("rcv_settle_mode", "string", "1.0: first | second", values=("first", "second")),
        C("snd_settle_mode", "string", "1.0: unsettled | settled | mixed", values=("unsettled", "settled", "mixed")),
        C("message_format", "int64", "1.0: transfer message-format"),
        C("link_credit", "int64", "1.0: flow link-credit"),
        C("delivery_count", "int64", "1.0: flow delivery-count (attach initial-delivery-count)"),
        C("available", "int64", "1.0: flow available"),
        C("drain", "bool", "1.0: flow drain"),
        C("echo", "bool", "1.0: flow echo"),
        C("next_incoming_id", "int64", "1.0: begin/flow next-incoming-id"),
        C("incoming_window", "int64", "1.0: begin/flow incoming-window"),
        C("next_outgoing_id", "int64", "1.0: begin/flow next-outgoing-id"),
        C("outgoing_window", "int64", "1.0: begin/flow outgoing-window"),
        C("first", "int64", "1.0: disposition first"),
        C("last", "int64", "1.0: disposition last"),
        C("state", "string", "1.0: delivery state / outcome: accepted, rejected, released, modified, received, declared, transactional", values=("accepted", "rejected", "released", "modified", "received", "declared", "transactional")),
        C("error_condition", "string", "1.0: error condition of detach/end/close/rejected"),
        C("error_description", "string", "1.0: error description"),
        C("source_address", "string", "1.0: attach source address"),
        C("target_address", "string", "1.0: attach target address"),
        C("track", "int32", "0-10: frame header track (0 control, 1 command)"),
        C("first_segment", "bool", "0-10: first-segment flag"),
        C("last_segment", "bool", "0-10: last-segment flag"),
        C("first_frame", "bool", "0-10: first-frame flag"),
        C("last_frame", "bool", "0-10: last-frame flag"),
        C("command_id", "int64", "0-10: the command's implicit id (session.command-point, +1 per command); header/body rows carry their command's"),
        C("sync", "bool", "0-10: the command's sync bit"),
        C("session_name", "string", "0-10: session.attach/attached/detach/detached name"),
        C("destination", "string", "0-10: message destination"),
        C("accept_mode", "string", "0-10: explicit | none", values=("explicit", "none"), peer=True),
        C("acquire_mode", "string", "0-10: pre-acquired | not-acquired", values=("pre-acquired", "not-acquired"), peer=True),
        C("credit_unit", "string", "0-10: message.flow unit (message | byte)", values=("message", "byte"), peer=True),
        C("credit_value", "int64", "0-10: message.flow value (4294967295 = unlimited)"),
        C("flow_mode", "string", "0-10: credit | window", values=("credit", "window"), peer=True),
        C("transfers_json", "string", "0-10: transfer id ranges [[lo, hi], ...] of accept/reject/release/acquire"),
        C("commands_json", "string", "0-10: command id ranges of session.expected/confirmed/completed/known-completed/gap"),
        C("referenced_command_id", "int64", "0-10: the command an execution.result/exception refers to"),
        C("arguments_json", "string", "every decoded argument as JSON (bytes as hex, secrets redacted)"),
        C("properties_json", "string", "content header / message properties as JSON"),
        C("decode_error", "string", "code: detail, when the frame's framing was sound but its content did not decode"),
        C("source", "string", (
            "capture | trace_log (a Qpid Proton PN_TRACE_FRM line: the trace prints no time, so ts is the line number "
            "in microseconds after 1970-01-01 and orders only; stream_offset is the line number; size is 0)"), False, values=("capture", "trace_log")),
    ),
)

DELIVERIES = Table(
    name="deliveries",
    doc=(
        "One row per message transfer: a 0-9-1 publish (to the broker) or deliver/get-ok (from the broker), "
        "a 1.0 transfer (multi-frame transfers are one row), with how and when it was settled. Built from frames only."
    ),
    key=("delivery_id",),
    plain=("delivery_id", "delivery_tag", "message_id", "body_sha256", "sent_ts", "settled_ts", "settle_latency_us", "settled_by_frame_id", "frame_ids"),
    no_statistics=("delivery_id", "dialect", "direction", "channel", "method", "sent_ts", "outcome", "frame_ids", "source"),
    columns=(
        C("delivery_id", "string", "connection_id, direction, channel[, handle] and the codec's message_seq joined by '-' "
          "(tags restart, 1.0 ids wrap); f<stream_offset of its first frame> in place of a message_seq the codec did not "
          "give or that an earlier row of the channel took", False),
        C("connection_id", "string", "the connection; trace rows: the captured one with the traced endpoints, else one of the log (connections.source log)", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("dialect", "string", "0-8 | 0-9 | 0-9-1 | 1.0 | 0-10", False, values=("0-8", "0-9", "0-9-1", "1.0", "0-10")),
        C("direction", "string", "to_broker (publish, sender link) | from_broker (deliver, get-ok, receiver link)", False, values=TO_FROM_BROKER),
        C("channel", "int32", "0-9-1 channel; 1.0 channel of the session", False),
        C("consumer_tag", "string", "0-9-1: consumer of a basic.deliver (null for get-ok and publishes)"),
        C("link_handle", "int64", "1.0: handle of the link on the sending side"),
        C("link_name", "string", "1.0: link name from attach"),
        C("delivery_tag", "int64", "0-9-1: delivery tag (publishes: the publish sequence number after confirm.select)"),
        C("transfer_id", "int64", "1.0: delivery-id"),
        C("delivery_tag_bin", "binary", "1.0: delivery-tag"),
        C("method", "string", "publish | deliver | get-ok | transfer", False, values=("publish", "deliver", "get-ok", "transfer")),
        C("exchange", "string", "0-9-1 exchange"),
        C("routing_key", "string", "0-9-1 routing key"),
        C("queue", "string", "queue (basic.get) or 1.0 link address"),
        C("message_id", "string", "message-id property"),
        C("correlation_id", "string", "correlation-id property"),
        C("content_type", "string", "content-type property"),
        C("delivery_mode", "int32", "0-9-1 delivery-mode (2 = persistent); 1.0 header durable as 2/1"),
        C("priority", "int32", "priority property"),
        C("properties_json", "string", "all message properties as JSON"),
        C("body_size", "int64", "body bytes"),
        C("body_sha256", "string", "sha256 of the body"),
        C("redelivered", "bool", "0-9-1 redelivered flag"),
        C("settle_mode", "string", "0-9-1 publishes: confirm | tx | no_confirm; deliveries: auto_ack | manual_ack | tx; 1.0: <snd>/<rcv> settle modes, e.g. mixed/first"),
        C("sent_ts", "timestamp", "time of the first frame", False),
        C("settled_ts", "timestamp", "time of the frame that settled it (null when never settled)"),
        C("settle_latency_us", "int64", "settled_ts - sent_ts"),
        C("outcome", "string", (
            "0-9-1 publishes: confirmed, nacked_by_broker, returned, unconfirmed_at_close, sent (no confirms: settled on send), "
            "committed, rolled_back (tx); 0-9-1 deliveries: acked, nacked_requeue, nacked_drop, rejected_requeue, rejected_drop, "
            "auto_ack, recovered, requeued_on_close; 1.0: accepted, rejected, released, modified, received, settled (no state), "
            "presettled, aborted, declared, transactional, unsettled_at_close; any: open_at_capture_end; trace rows: traced"), False, values=OUTCOMES),
        C("settled_by_frame_id", "string", "the frame that settled it"),
        C("frame_ids", "array<string>", "every frame of the message (method/transfer, header, bodies)", False),
        C("flags", "array<string>", "anomalies: ack_of_unknown_tag, duplicate_tag, ..."),
        C("source", "string", (
            "capture (built by the lifecycle job from frames, of a capture or a Proton trace) | trace (a RabbitMQ message "
            "trace: rabbitmq_tracing or firehose; sent_ts is the tracer's time, millisecond precision, not the wire's; "
            "a firehose message saved without a time has the line number in microseconds after 1970-01-01; outcome is traced)"), False, values=("capture", "trace")),
        C("trace_json", "string", "trace rows: what the tracer recorded beyond the columns (node, user, vhost, connection, every routing key, routed queues)"),
    ),
)

FLOW_EVENTS = Table(
    name="flow_events",
    doc="A time series of flow-control state per channel, consumer, link and session, one row per change.",
    key=("event_id",),
    plain=("event_id", "ts", "frame_id"),
    no_statistics=("event_id", "ts", "frame_id"),
    columns=(
        C("event_id", "string", "frame_id of the frame that caused the change, the entity and its key, joined by '-'", False),
        C("connection_id", "string", "the connection", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("ts", "timestamp", "time of the frame", False),
        C("frame_id", "string", "the frame that caused the change", False),
        C("entity", "string", "connection | channel | consumer | link | session", False, values=("connection", "channel", "consumer", "link", "session")),
        C("channel", "int32", "channel (0-9-1) or session channel (1.0)"),
        C("consumer_tag", "string", "0-9-1 consumer"),
        C("link_handle", "int64", "1.0 link handle (receiver side numbering)"),
        C("event", "string", "qos | deliver | settle | flow | blocked | unblocked | credit | transfer | window | close; 0-10 also stop (message.stop), flush (message.flush) and completed (window-mode credit back)", False, values=("qos", "deliver", "settle", "flow", "blocked", "unblocked", "credit", "transfer", "window", "close", "stop", "flush", "completed")),
        C("prefetch_count", "int64", "0-9-1 prefetch in force (0 = unlimited)"),
        C("in_flight", "int64", "0-9-1 delivered but unsettled on the channel/consumer"),
        C("at_limit", "bool", "in_flight >= prefetch_count > 0, or 1.0 link credit = 0"),
        C("flow_active", "bool", "0-9-1 channel.flow state"),
        C("blocked", "bool", "0-9-1 connection.blocked state"),
        C("reason", "string", "connection.blocked reason, or the anomaly of a settle event (ack_of_unknown_tag, disposition_of_unknown_id, ...)"),
        C("link_credit", "int64", "1.0 credit in hand"),
        C("delivery_count", "int64", "1.0 delivery-count"),
        C("drain", "bool", "1.0 drain"),
        C("incoming_window", "int64", "1.0 session incoming window"),
        C("outgoing_window", "int64", "1.0 session outgoing window"),
        C("remote_incoming_window", "int64", "1.0 the peer's incoming window as the sender computes it"),
    ),
)

REQUEST_RESPONSES = Table(
    name="request_responses",
    doc="Synchronous method pairs per channel (0-9-1) or per session/link (1.0), matched in order, with latency.",
    key=("request_frame_id",),
    plain=("request_frame_id", "response_frame_id", "request_ts", "response_ts", "latency_us"),
    columns=(
        C("request_frame_id", "string", "the request frame", False),
        C("response_frame_id", "string", "the response frame (null when none came)"),
        C("connection_id", "string", "the connection", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("dialect", "string", "dialect", False, values=DIALECTS),
        C("channel", "int32", "channel", False),
        C("request", "string", "class.method or performative", False),
        C("response", "string", "class.method or performative of the answer (or the error close)"),
        C("request_ts", "timestamp", "request time", False),
        C("response_ts", "timestamp", "response time"),
        C("latency_us", "int64", "response_ts - request_ts"),
        C("reply_code", "int32", "reply code when the answer was a channel/connection close"),
        C("error_condition", "string", "1.0 error condition of the answer"),
        C("status", "string", "ok | error | unanswered", False, values=("ok", "error", "unanswered")),
    ),
)

BROKER_EVENTS = Table(
    name="broker_events",
    doc=(
        "Lifecycle events from RabbitMQ server logs (every generation: 3.6 reports, 3.7-3.8, 3.9+ and JSON): connections "
        "accepted, named, authenticated, closed (normally, abruptly, with an error), channel errors, memory and disk "
        "alarms set and cleared, node start and stop, and any other entry at warning level or above. Times without a "
        "zone in the log are taken as UTC. Connection events are joined to the capture's connection by their endpoints."
    ),
    key=("event_id",),
    partition_by=("log_date",),
    replace_by=("log_id",),
    columns=(
        C("event_id", "string", "blake2b of log_id and line_number", False),
        C("log_id", "string", "sha256 of the log file's bytes (the log's row in captures has it as capture_id)", False),
        C("log_date", "date", "UTC day of the log's first event; the partition", False),
        C("log_path", "string", "path the log was read from", False),
        C("log_format", "string", "rabbitmq-3.6 | rabbitmq-3.7 | rabbitmq-3.9 | rabbitmq-json", False, values=LOG_FORMATS),
        C("line_number", "int64", "1-based line number of the entry's first line", False),
        C("line_count", "int32", "lines of the entry (a multi-line message is one event)", False),
        C("offset", "int64", "file offset of the entry's first byte", False),
        C("ts", "timestamp", "the log's time of the entry (UTC)"),
        C("level", "string", "debug | info | notice | warning | error | critical | alert | emergency (four-letter forms spelled out)", values=("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"), peer=True),
        C("event", "string", (
            "connection_accepted | connection_named | connection_authenticated | connection_closed | "
            "connection_closed_abruptly | connection_closed_error | connection_error | channel_error | alarm_set | "
            "alarm_cleared | node_start | node_stop | other"), False, values=("connection_accepted", "connection_named", "connection_authenticated", "connection_closed",
                  "connection_closed_abruptly", "connection_closed_error", "connection_error", "channel_error", "alarm_set",
                  "alarm_cleared", "node_start", "node_stop", "other")),
        C("erlang_pid", "string", "the connection's Erlang process, e.g. <0.1213.0> (names the connection within the log)"),
        C("connection_name", "string", "the connection as RabbitMQ names it: client a.b.c.d:p -> server e.f.g.h:q"),
        C("client_provided_name", "string", "the name the client gave its connection (connection_name client property)"),
        C("client_ip", "string", "client address (brackets of IPv6 dropped)"),
        C("client_port", "int32", "client port"),
        C("server_ip", "string", "broker address"),
        C("server_port", "int32", "broker port"),
        C("user", "string", "user of the connection"),
        C("vhost", "string", "virtual host of the connection"),
        C("channel", "int32", "channel of a channel_error (0 for a connection_error)"),
        C("method", "string", "the operation that failed, e.g. queue.declare"),
        C("reply_code", "int32", "AMQP reply code of the exception (404 for not_found, ...)"),
        C("reply_text", "string", "the exception as the broker sends it (NOT_FOUND - no queue ...), or why a connection closed"),
        C("alarm_resource", "string", "memory | disk", values=("memory", "disk")),
        C("node", "string", "node the alarm is on"),
        C("message", "string", "the whole entry's text, every line, without the prefixes (capped at 16 KiB)", False),
        C("connection_id", "string", "the joined connection: a capture's (same endpoints, within logs.join_tolerance_s of its life) or one the log itself gives (connections.source log)"),
        C("sources", "array<string>", "where the joined row's facts come from: [log] or [log, capture]", False),
    ),
)

ALL_TABLES: dict[str, Table] = {
    t.name: t for t in (CAPTURES, CONNECTIONS, FRAMES, DECODE_ERRORS, DELIVERIES, FLOW_EVENTS, REQUEST_RESPONSES, BROKER_EVENTS)
}
ALL_TABLES.update({t.name: t for t in METRIC_TABLES})
ALL_TABLES[FINDINGS.name] = FINDINGS
