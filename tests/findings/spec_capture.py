"""A capture built byte for byte from the AMQP 0-9-1 spec, for the one rule no real broker here can trigger.

RabbitMQ 3.x never sends channel.flow and answers a client's channel.flow active=false with connection.close 540
NOT_IMPLEMENTED (tests/data/broker/channel_flow.pcap shows it), so channel_flow_off is tested on this conversation,
encoded here from the method definitions of /work/shared/specs/0-9-1/amqp0-9-1.stripped.xml (class channel, index 20:
flow {active bit} and flow-ok {active bit}, both chassis server and client) and the framing of the spec's section 4.2
(frame type octet, channel short, size long, payload, frame-end 0xCE), none of it through amqplens' own encoder: the
server asks the client to stop sending content at FLOW_OFF_S, the client answers flow-ok active=false, the server
restarts it at FLOW_ON_S; then clean closes. tshark reads it back as the same methods (the test checks).
"""

from __future__ import annotations

import socket
import struct

from tests.capture.capture_builders import _checksum, ethernet, pcap_bytes

START_S = 1_767_225_600  # 2026-01-01 00:00:00 UTC: the capture's first packet
FLOW_OFF_S, FLOW_ON_S, CLOSE_S = 1.0, 3.5, 4.0  # seconds after the first packet
CONNECTION_NAME = "spec-channel-flow"
CLIENT, SERVER = ("10.9.1.1", 40100), ("10.9.1.2", 5672)


def shortstr(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def table(fields: dict[str, str]) -> bytes:
    """A field table of longstr values ('S')."""
    body = b"".join(shortstr(k) + b"S" + longstr(v.encode()) for k, v in fields.items())
    return longstr(body)


def method(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def conversation() -> list[tuple[float, str, bytes]]:
    """(seconds after the first packet, direction, bytes) of each turn."""
    return [
        (0.002, "to_server", b"AMQP\x00\x00\x09\x01"),
        # connection.start: version-major 0, version-minor 9, server-properties, mechanisms, locales
        (0.003, "to_client", method(0, 10, 10, b"\x00\x09" + table({"product": "spec"}) + longstr(b"PLAIN") + longstr(b"en_US"))),
        # start-ok: client-properties, mechanism, response, locale
        (0.004, "to_server", method(0, 10, 11, table({"connection_name": CONNECTION_NAME}) + shortstr("PLAIN")
                                    + longstr(b"\x00guest\x00guest") + shortstr("en_US"))),
        (0.005, "to_client", method(0, 10, 30, struct.pack(">HIH", 2047, 131072, 0))),  # tune
        (0.006, "to_server", method(0, 10, 31, struct.pack(">HIH", 2047, 131072, 0))),  # tune-ok
        (0.007, "to_server", method(0, 10, 40, shortstr("/") + shortstr("") + b"\x00")),  # open
        (0.008, "to_client", method(0, 10, 41, shortstr(""))),  # open-ok
        (0.009, "to_server", method(1, 20, 10, shortstr(""))),  # channel.open
        (0.010, "to_client", method(1, 20, 11, longstr(b""))),  # channel.open-ok
        (FLOW_OFF_S, "to_client", method(1, 20, 20, b"\x00")),  # channel.flow active=false
        (FLOW_OFF_S + 0.001, "to_server", method(1, 20, 21, b"\x00")),  # flow-ok active=false
        (FLOW_ON_S, "to_client", method(1, 20, 20, b"\x01")),  # channel.flow active=true
        (FLOW_ON_S + 0.001, "to_server", method(1, 20, 21, b"\x01")),  # flow-ok active=true
        (CLOSE_S, "to_server", method(1, 20, 40, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))),
        (CLOSE_S + 0.001, "to_client", method(1, 20, 41)),  # channel.close-ok
        (CLOSE_S + 0.002, "to_server", method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))),
        (CLOSE_S + 0.003, "to_client", method(0, 10, 51)),  # connection.close-ok
    ]


SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10


def channel_flow_pcap() -> bytes:
    """Ethernet/IPv4/TCP: handshake, each turn in one segment acked 100 us later, FIN both ways."""
    ends = {"to_server": (CLIENT, SERVER), "to_client": (SERVER, CLIENT)}
    seq = {"to_server": 1000, "to_client": 9000}
    records = []

    def send(t_us: int, direction: str, flags: int, payload: bytes = b"") -> None:
        (sip, sp), (dip, dp) = ends[direction]
        peer = "to_client" if direction == "to_server" else "to_server"
        tcp = struct.pack(">HHIIBBHHH", sp, dp, seq[direction], seq[peer], 5 << 4, flags, 65535, 0, 0) + payload
        head = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, socket.inet_aton(sip),
                           socket.inet_aton(dip))
        ip = head[:10] + struct.pack(">H", _checksum(head)) + head[12:] + tcp
        records.append((START_S + t_us // 1_000_000, t_us % 1_000_000, ethernet(ip)))
        seq[direction] = (seq[direction] + len(payload) + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF

    send(0, "to_server", SYN)
    send(100, "to_client", SYN | ACK)
    send(200, "to_server", ACK)
    end = 0
    for t, direction, data in conversation():
        us = round(t * 1_000_000)
        send(us, direction, PSH | ACK, data)
        send(us + 100, "to_client" if direction == "to_server" else "to_server", ACK)
        end = us + 200
    send(end + 1000, "to_server", FIN | ACK)
    send(end + 1100, "to_client", FIN | ACK)
    send(end + 1200, "to_server", ACK)
    return pcap_bytes(records)
