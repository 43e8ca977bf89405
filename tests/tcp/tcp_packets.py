"""Hand-built packet batches and a recording consumer for the reassembly tests.

A row is ``(ts_us, src, dst, flags, seq, payload)`` with an optional seventh
item, a dict of overrides (``ack``, ``wire_len``, ``truncated``, ``flow_key``). ``src`` and
``dst`` are ``"ip:port"`` (``"[v6]:port"`` for IPv6); flags are letters from
``FSRPAU`` or an int. Without an explicit ``ack``, a packet with ``A`` acks
everything its peer has sent so far, like a real receiver would.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from amqplens.decode.capture.records import ACK, FIN, PACKET_COLUMNS, PSH, RST, SYN, URG, flow_key
from amqplens.decode.tcp import TO_CLIENT, TO_SERVER, ConnectionRecord, GapRecord, TcpReassembler

M32 = 0xFFFFFFFF
_FLAG_BITS = {"F": FIN, "S": SYN, "R": RST, "P": PSH, "A": ACK, "U": URG}
HEADERS = 54  # Ethernet + IPv4 + TCP without options


def endpoint(text: str) -> tuple[str, int]:
    ip, port = text.rsplit(":", 1)
    return ip.strip("[]"), int(port)


def flag_bits(flags: str | int) -> int:
    if isinstance(flags, int):
        return flags
    return sum(_FLAG_BITS[f] for f in flags)


def packet_columns(rows, capture_id: str = "cap") -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in PACKET_COLUMNS}
    sent_end: dict[tuple[str, int], int] = {}
    for index, row in enumerate(rows):
        ts, src, dst, flags, seq, payload = row[:6]
        extra = row[6] if len(row) > 6 else {}
        (sip, sp), (dip, dp) = endpoint(src), endpoint(dst)
        bits = flag_bits(flags)
        seq &= M32
        end = (seq + len(payload) + (1 if bits & SYN else 0) + (1 if bits & FIN else 0)) & M32
        before = sent_end.get((sip, sp))
        if before is None or 0 < ((end - before) & M32) < (1 << 31):
            sent_end[(sip, sp)] = end
        ack = extra.get("ack", sent_end.get((dip, dp), 0) if bits & ACK else 0)
        values = {
            "capture_id": capture_id,
            "record_offset": 24 + index * 100,
            "ts_us": ts,
            "ip_version": 6 if ":" in sip else 4,
            "src_ip": sip,
            "src_port": sp,
            "dst_ip": dip,
            "dst_port": dp,
            "flow_key": extra.get("flow_key", flow_key(sip, sp, dip, dp)),
            "seq": seq,
            "ack": ack & M32,
            "tcp_flags": bits,
            "window": 65535,
            "wire_len": extra.get("wire_len", HEADERS + len(payload)),
            "payload": payload,
            "payload_truncated": extra.get("truncated", False),
        }
        for name in PACKET_COLUMNS:
            cols[name].append(values[name])
    return cols


def split_columns(cols: dict[str, list], size: int) -> list[dict[str, list]]:
    n = len(cols["ts_us"])
    return [{k: v[i : i + size] for k, v in cols.items()} for i in range(0, n, size)]


class RecordingConsumer:
    """Records every call and checks the stream contract as it goes."""

    def __init__(self, info) -> None:
        self.info = info
        self.events: list[tuple] = []
        self.record: ConnectionRecord | None = None
        self.end = {TO_SERVER: 0, TO_CLIENT: 0}

    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        assert self.record is None, "data after close"
        assert data, "empty data call"
        assert offset == self.end[direction], f"{direction}: data at {offset}, expected {self.end[direction]}"
        self.end[direction] = offset + len(data)
        self.events.append(("data", direction, offset, ts_us, bytes(data)))

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        assert self.record is None, "gap after close"
        assert length > 0
        assert offset == self.end[direction], f"{direction}: gap at {offset}, expected {self.end[direction]}"
        self.end[direction] = offset + length
        self.events.append(("gap", direction, offset, length, ts_us))

    def close(self, connection: ConnectionRecord) -> None:
        assert self.record is None, "closed twice"
        self.record = connection

    def assembled(self, direction: str, fill: bytes = b"_") -> bytes:
        """The stream as delivered, each missing byte shown as ``fill``."""
        parts = []
        for event in self.events:
            if event[1] != direction:
                continue
            parts.append(event[4] if event[0] == "data" else fill * event[3])
        return b"".join(parts)

    def gaps(self, direction: str) -> list[tuple[int, int]]:
        return [(e[2], e[3]) for e in self.events if e[0] == "gap" and e[1] == direction]

    def check(self) -> None:
        """sum(data) + sum(gaps) == bytes_to_X, and the calls tile the stream."""
        rec = self.record
        assert rec is not None, "never closed"
        for direction, total, missing in (
            (TO_SERVER, rec.bytes_to_server, rec.missing_bytes_to_server),
            (TO_CLIENT, rec.bytes_to_client, rec.missing_bytes_to_client),
        ):
            data = sum(len(e[4]) for e in self.events if e[0] == "data" and e[1] == direction)
            gaps = sum(e[3] for e in self.events if e[0] == "gap" and e[1] == direction)
            assert data + gaps == total, (direction, data, gaps, total)
            assert gaps == missing, (direction, gaps, missing)
            assert self.end[direction] == total


@dataclasses.dataclass
class Run:
    reassembler: TcpReassembler
    connections: list[ConnectionRecord]
    gaps: list[GapRecord]
    consumers: dict[str, RecordingConsumer]

    @property
    def stats(self):
        return self.reassembler.stats

    def only(self) -> tuple[ConnectionRecord, RecordingConsumer]:
        assert len(self.connections) == 1, self.connections
        rec = self.connections[0]
        return rec, self.consumers[rec.connection_id]


def run(rows, *, batch_size: int | None = None, capture_id: str = "cap", **options) -> Run:
    """Feed rows (in the given order) through a reassembler with recording consumers."""
    consumers: dict[str, RecordingConsumer] = {}

    def factory(info):
        assert info.connection_id not in consumers, "connection_id reused"
        consumers[info.connection_id] = RecordingConsumer(info)
        return consumers[info.connection_id]

    reassembler = TcpReassembler(capture_id, consumer_factory=factory, **options)
    cols = packet_columns(rows, capture_id)
    for batch in split_columns(cols, batch_size) if batch_size else [cols]:
        reassembler.feed_columns(batch)
    reassembler.finish()
    result = Run(reassembler, reassembler.drain_connections(), reassembler.drain_gaps(), consumers)
    for rec in result.connections:
        consumer = consumers[rec.connection_id]
        assert consumer.record is rec
        consumer.check()
        gaps_by_dir = defaultdict(int)
        for gap in result.gaps:
            if gap.connection_id == rec.connection_id:
                gaps_by_dir[gap.direction] += gap.length
        assert gaps_by_dir[TO_SERVER] == rec.missing_bytes_to_server
        assert gaps_by_dir[TO_CLIENT] == rec.missing_bytes_to_client
    assert set(consumers) == {rec.connection_id for rec in result.connections}
    return result


CLIENT = "10.0.0.1:40000"
SERVER = "10.0.0.2:5672"
C_ISN = 1000
S_ISN = 5000


def handshake(
    t0: int = 0, client: str = CLIENT, server: str = SERVER, c_isn: int = C_ISN, s_isn: int = S_ISN
) -> list[tuple]:
    """SYN, SYN/ACK, ACK at t0, t0+100, t0+250."""
    return [
        (t0, client, server, "S", c_isn, b""),
        (t0 + 100, server, client, "SA", s_isn, b""),
        (t0 + 250, client, server, "A", c_isn + 1, b""),
    ]
