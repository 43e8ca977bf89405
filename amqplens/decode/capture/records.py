"""The packet hand-off between the capture readers and TCP reassembly.

A split reader yields packet batches as column dicts (``dict[str, list]``)
with exactly the columns of ``PACKET_SCHEMA``; the Spark job turns them into
Arrow record batches, shuffles by ``flow_key`` and sorts each partition by
``(flow_key, ts_us, record_offset)`` before TCP reassembly sees them.

Only TCP packets travel on; everything else is counted in ``SplitStats``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import pyarrow as pa

PACKET_SCHEMA = pa.schema(
    [
        ("capture_id", pa.string()),
        # Byte offset of the packet's record in the capture file: unique per
        # file, increasing in file order, independent of how the file was split.
        ("record_offset", pa.int64()),
        ("ts_us", pa.int64()),  # microseconds since the epoch, UTC
        ("ip_version", pa.int8()),
        ("src_ip", pa.string()),  # text form (ipaddress.ip_address(...).compressed)
        ("src_port", pa.int32()),
        ("dst_ip", pa.string()),
        ("dst_port", pa.int32()),
        # Canonical flow key, equal for both directions of a 4-tuple; see flow_key().
        ("flow_key", pa.int64()),
        ("seq", pa.int64()),  # TCP sequence number (uint32 as int64)
        ("ack", pa.int64()),
        ("tcp_flags", pa.int16()),  # FIN=0x01 SYN=0x02 RST=0x04 PSH=0x08 ACK=0x10 URG=0x20
        ("window", pa.int32()),
        ("wire_len", pa.int64()),  # original length of the link-layer frame (origlen, a uint32: any value the file says)
        ("payload", pa.binary()),  # TCP payload as captured (may be cut by snaplen)
        ("payload_truncated", pa.bool_()),  # captured payload shorter than the IP length says
    ]
)

PACKET_COLUMNS = tuple(PACKET_SCHEMA.names)

FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

_KEY = struct.Struct(">q")


def flow_key(src_ip: str, src_port: int, dst_ip: str, dst_port: int) -> int:
    """A signed 64-bit key equal for (a -> b) and (b -> a), stable across processes."""
    a = f"{src_ip}|{src_port}"
    b = f"{dst_ip}|{dst_port}"
    lo, hi = (a, b) if a <= b else (b, a)
    digest = hashlib.blake2b(f"{lo}#{hi}".encode(), digest_size=8).digest()
    return _KEY.unpack(digest)[0]


def empty_packet_columns() -> dict[str, list]:
    return {name: [] for name in PACKET_COLUMNS}


@dataclasses.dataclass
class CaptureErrorRecord:
    """A problem in the capture container or the lower layers (not AMQP)."""

    offset: int  # byte offset in the file where the problem starts
    length: int  # bytes skipped or affected (0 if none were skipped)
    reason: str  # short machine-readable code, e.g. "bad_record_header"
    detail: str  # one human sentence
    raw: bytes = b""  # the offending bytes, capped by the caller's limit


@dataclasses.dataclass
class SplitStats:
    """What one split saw, merged per capture by the job."""

    format: str | None = None  # "pcap" | "pcapng" | None when unknown
    records: int = 0  # packet records read (all link types)
    tcp_packets: int = 0
    non_tcp_packets: int = 0  # IP but not TCP, or not IP at all
    ip_fragments: int = 0  # fragments seen (reassembled or not)
    ip_fragments_unreassembled: int = 0
    ip_datagrams_reassembled: int = 0  # datagrams rebuilt from fragments (each one row or one non-TCP count)
    malformed_packets: int = 0  # link/IP/TCP header cut short by the capture or impossible
    unknown_link_packets: int = 0  # records on an interface whose link type we cannot decode
    link_types: set[int] = dataclasses.field(default_factory=set)  # DLT/LINKTYPE numbers
    first_ts_us: int | None = None
    last_ts_us: int | None = None
    bytes_read: int = 0

    def merge(self, other: "SplitStats") -> "SplitStats":
        def _min(a, b):
            return b if a is None else a if b is None else min(a, b)

        def _max(a, b):
            return b if a is None else a if b is None else max(a, b)

        return SplitStats(
            format=self.format or other.format,
            records=self.records + other.records,
            tcp_packets=self.tcp_packets + other.tcp_packets,
            non_tcp_packets=self.non_tcp_packets + other.non_tcp_packets,
            ip_fragments=self.ip_fragments + other.ip_fragments,
            ip_fragments_unreassembled=self.ip_fragments_unreassembled + other.ip_fragments_unreassembled,
            ip_datagrams_reassembled=self.ip_datagrams_reassembled + other.ip_datagrams_reassembled,
            malformed_packets=self.malformed_packets + other.malformed_packets,
            unknown_link_packets=self.unknown_link_packets + other.unknown_link_packets,
            link_types=self.link_types | other.link_types,
            first_ts_us=_min(self.first_ts_us, other.first_ts_us),
            last_ts_us=_max(self.last_ts_us, other.last_ts_us),
            bytes_read=self.bytes_read + other.bytes_read,
        )
