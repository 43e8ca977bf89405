"""A pcap of one TCP connection carrying given byte streams, for differential tests on synthetic traffic.

``connection_pcap(turns)``: a three-way handshake, then each ``(direction, bytes)``
turn cut into segments of at most ``mss`` bytes (each acked by the peer), then
FIN/ACK both ways. Ethernet + IPv4, microsecond timestamps 1 ms apart; TCP
checksums 0 (tshark does not check them by default).
"""

from __future__ import annotations

import socket
import struct

from tests.capture.capture_builders import _checksum, ethernet, pcap_bytes

SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10


def _ipv4(src: str, dst: str, tcp: bytes) -> bytes:
    head = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return head[:10] + struct.pack(">H", _checksum(head)) + head[12:] + tcp


def _tcp(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + payload


def connection_pcap(turns, *, client=("10.1.0.1", 40001), server=("10.1.0.2", 5672), mss: int = 1400) -> bytes:
    ends = {"to_server": (client, server), "to_client": (server, client)}
    seq = {"to_server": 1000, "to_client": 5000}
    records = []
    t = [1_700_000_000_000_000]

    def send(direction: str, flags: int, payload: bytes = b"") -> None:
        (sip, sp), (dip, dp) = ends[direction]
        peer = "to_client" if direction == "to_server" else "to_server"
        pkt = ethernet(_ipv4(sip, dip, _tcp(sp, dp, seq[direction], seq[peer], flags, payload)))
        records.append((t[0] // 1_000_000, t[0] % 1_000_000, pkt))
        t[0] += 1000
        seq[direction] = (seq[direction] + len(payload) + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF

    send("to_server", SYN)
    send("to_client", SYN | ACK)
    send("to_server", ACK)
    for direction, data in turns:
        peer = "to_client" if direction == "to_server" else "to_server"
        for off in range(0, len(data), mss):
            send(direction, PSH | ACK, data[off : off + mss])
            send(peer, ACK)
    send("to_server", FIN | ACK)
    send("to_client", FIN | ACK)
    send("to_server", ACK)
    return pcap_bytes(records)
