"""A real capture with its burst of large client segments reordered: a hole filled late, by a retransmission.

``variant(kind)`` takes ``tests/data/broker/pipelined_publish.pcap`` (see the
broker README), finds its first three consecutive client segments of more than
16 KiB, A, B and C, and returns the pcap with

- ``swapped``: B and C trading places (the times stay with the places: C is
  captured ahead of the hole B leaves, B fills it later);
- ``overlapping``: C ahead of the hole, then in B's place a retransmission from
  ``OVERLAP`` bytes before B to ``OVERLAP`` bytes into C,

and where B lies (``b_off`` in the client stream, ``b_len``, ``c_len``).
"""

from __future__ import annotations

import struct

from tests.conftest import DATA
from tests.e2e.hostile_captures import records, with_records

FIXTURE = DATA / "broker" / "pipelined_publish.pcap"
AMQP_PORT = 5672
OVERLAP = 100  # bytes the retransmission covers of each neighbour
SMALL_BUFFER = 16 << 10  # an out-of-order buffer below C's size: the hole cannot wait


def _tcp(packet: bytes) -> tuple[int, int, int, int]:
    """(TCP header start, payload start, destination port, sequence number) of an Ethernet + IPv4 + TCP packet."""
    tcp = 14 + (packet[14] & 0x0F) * 4
    dport, seq = struct.unpack_from(">HI", packet, tcp + 2)
    return tcp, tcp + (packet[tcp + 12] >> 4) * 4, dport, seq


def _segment(packet: bytes, seq: int, payload: bytes) -> bytes:
    """``packet``'s headers around another payload at another sequence number (IPv4 length and checksum redone)."""
    tcp, start, _, _ = _tcp(packet)
    head = bytearray(packet[:start])
    struct.pack_into(">H", head, 16, len(head) - 14 + len(payload))
    struct.pack_into(">H", head, 24, 0)
    words = sum(struct.unpack_from(f">{(tcp - 14) // 2}H", head, 14))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    struct.pack_into(">H", head, 24, ~words & 0xFFFF)
    struct.pack_into(">I", head, tcp + 4, seq)
    return bytes(head) + payload


def _burst(recs: list) -> tuple[int, int, int]:
    """Record indexes of the first three consecutive client segments of more than 16 KiB each."""
    big = []
    for i, (_, _, packet) in enumerate(recs):
        _, start, dport, seq = _tcp(packet)
        if dport == AMQP_PORT and len(packet) - start > SMALL_BUFFER:
            big.append((i, seq, len(packet) - start))
    for (a, sa, na), (b, sb, nb), (c, sc, _) in zip(big, big[1:], big[2:]):
        if sb == sa + na and sc == sb + nb:
            return a, b, c
    raise AssertionError("the fixture has no burst of three large segments")


def variant(kind: str) -> tuple[bytes, dict]:
    """The fixture with its burst reordered (``kind``: swapped, overlapping); B's stream offset and the sizes."""
    data = FIXTURE.read_bytes()
    recs = records(data)
    a, b, c = _burst(recs)
    payload = {i: recs[i][2][_tcp(recs[i][2])[1]:] for i in (a, b, c)}
    b_seq = _tcp(recs[b][2])[3]
    syn = next(p for _, _, p in recs if _tcp(p)[2] == AMQP_PORT and p[_tcp(p)[0] + 13] & 0x02)
    recs[b][2], recs[c][2] = recs[c][2], recs[b][2]  # C takes B's place and time: captured ahead of the hole
    if kind == "overlapping":
        wide = payload[a][-OVERLAP:] + payload[b] + payload[c][:OVERLAP]
        recs[c][2] = _segment(recs[c][2], b_seq - OVERLAP, wide)
    b_off = (b_seq - _tcp(syn)[3] - 1) & 0xFFFFFFFF
    return with_records(data, recs), {"b_off": b_off, "b_len": len(payload[b]), "c_len": len(payload[c])}
