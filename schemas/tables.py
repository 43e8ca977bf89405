"""The table contracts of the lake. DESIGN.md describes them in prose; this is the law.

Regenerate the reference (docs/tables.md) and the golden files
(schemas/golden/) with ``python -m tools.gen_table_docs`` after a change.
"""

from __future__ import annotations

from schemas.base import Column as C
from schemas.base import Table

CAPTURE_DATE = C("capture_date", "date", "UTC day of the capture's first packet (1970-01-01 when it has none); the partition", False)
CAPTURE_ID = C("capture_id", "string", "sha256 of the capture file's bytes", False)

CAPTURES = Table(
    name="captures",
    doc="One row per input file, written last by the ingest job (its presence marks the capture as done).",
    key=("capture_id",),
    columns=(
        CAPTURE_ID,
        CAPTURE_DATE,
        C("path", "string", "path the file was read from (last ingest)", False),
        C("size_bytes", "int64", "file size", False),
        C("format", "string", "pcap | pcapng | unknown"),
        C("link_types", "array<int32>", "LINKTYPE numbers seen (pcapng may have several)"),
        C("splits", "int32", "byte-range splits the file was read in", False),
        C("packets_total", "int64", "packet records read", False),
        C("packets_tcp", "int64", "TCP packets among them", False),
        C("packets_selected", "int64", "packets of the connections kept (AMQP ports or sniffed)", False),
        C("ip_fragments", "int64", "IP fragments seen", False),
        C("connections", "int64", "rows this capture has in connections", False),
        C("capture_errors", "int64", "container/link-layer problems (rows in decode_errors, stage capture)", False),
        C("first_ts", "timestamp", "first packet time (UTC)"),
        C("last_ts", "timestamp", "last packet time (UTC)"),
        C("status", "string", "ok | partial (read with errors) | failed (nothing readable)", False),
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
        C("connection_id", "string", "blake2b of capture_id, client and server endpoint and first packet time", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("client_ip", "string", "client address (the SYN sender; see DESIGN.md for the fallbacks)", False),
        C("client_port", "int32", "client TCP port", False),
        C("server_ip", "string", "server address", False),
        C("server_port", "int32", "server TCP port", False),
        C("ip_version", "int8", "4 or 6", False),
        C("start_ts", "timestamp", "first packet", False),
        C("end_ts", "timestamp", "last packet", False),
        C("duration_us", "int64", "end_ts - start_ts in microseconds", False),
        C("syn_seen", "bool", "the handshake was captured", False),
        C("handshake_rtt_us", "int64", "SYN to the client's ACK of SYN/ACK, when all three were captured"),
        C("end_reason", "string", "fin | rst | capture_end | port_reuse", False),
        C("closed_by", "string", "client | server, for fin and rst"),
        C("tls", "bool", "a TLS port or a stream starting with a TLS record; not decoded", False),
        C("selected_by", "string", "port | sniff: why the flow was kept", False),
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
        C("source", "string", "capture | log", False),
    ),
)

DECODE_ERRORS = Table(
    name="decode_errors",
    doc=(
        "Everything that could not be decoded, and every hole in a TCP stream, with the raw bytes "
        "(capped) and a hash of the whole so a later version can try again. stage says which layer: "
        "capture (file container, link, IP), tcp (missing stream bytes: gaps), codec (AMQP framing)."
    ),
    key=("error_id",),
    columns=(
        C("error_id", "string", "blake2b of capture_id, connection_id, direction, stage, offset", False),
        CAPTURE_ID,
        CAPTURE_DATE,
        C("connection_id", "string", "null for capture-level problems"),
        C("direction", "string", "to_server | to_client; null for capture-level problems"),
        C("stage", "string", "capture | tcp | codec", False),
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

ALL_TABLES: dict[str, Table] = {t.name: t for t in (CAPTURES, CONNECTIONS, DECODE_ERRORS)}
