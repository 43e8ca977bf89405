"""The hand-off from TCP reassembly to the protocol decoders.

``TcpReassembler`` (in ``amqplens.decode.tcp.reassembly``) is fed packets sorted by
``(flow_key, ts_us, record_offset)`` and, for every selected connection,
calls a ``StreamConsumer`` created by a factory:

- ``data(direction, offset, ts_us, data)`` with in-order, de-duplicated
  stream bytes; ``offset`` counts from the first byte of that direction's
  stream (0 = the byte after the SYN, or the first byte captured when the
  SYN was not seen);
- ``gap(direction, offset, length, ts_us)`` where bytes are missing;
- ``close(connection)`` once, with the finished ``ConnectionRecord``.

Directions are the protocol's: ``to_server`` and ``to_client``.
Invariant per direction: sum(data lengths) + sum(gap lengths) = stream bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Protocol

from amqplens.contracts.values import TO_SERVER_CLIENT

# the directions, as the contracts spell them (typed str: decoders index their per-direction dicts with plain text)
TO_SERVER: Final[str] = TO_SERVER_CLIENT[0]
TO_CLIENT: Final[str] = TO_SERVER_CLIENT[1]


@dataclasses.dataclass(frozen=True)
class ConnectionInfo:
    """What ``consumer_factory`` learns about a connection when it is selected."""

    connection_id: str
    capture_id: str
    client_ip: str
    client_port: int
    server_ip: str
    server_port: int
    ip_version: int
    start_ts_us: int  # first packet of the connection
    syn_seen: bool
    tls: bool  # port configured as TLS (5671) or the stream opens with a TLS record (at selection: as far as known)
    selected_by: str  # "port" | "sniff": why the flow was kept


@dataclasses.dataclass(frozen=True)
class ConnectionRecord(ConnectionInfo):
    """One TCP connection, as the ``connections`` table's transport columns: what was known at selection, and
    the rest once it ended (built with keywords)."""

    end_ts_us: int  # last packet of the connection
    handshake_rtt_us: int | None  # SYN -> SYN/ACK -> ACK, when all three were seen
    end_reason: str  # "fin" | "rst" | "capture_end" | "port_reuse"
    closed_by: str | None  # "client" | "server" | None
    packets_to_server: int
    packets_to_client: int
    wire_bytes_to_server: int  # sum of link-layer frame lengths (like tshark conv)
    wire_bytes_to_client: int
    bytes_to_server: int  # stream bytes (payload, each byte once, gaps included)
    bytes_to_client: int
    retransmitted_bytes_to_server: int
    retransmitted_bytes_to_client: int
    out_of_order_bytes_to_server: int
    out_of_order_bytes_to_client: int
    missing_bytes_to_server: int
    missing_bytes_to_client: int
    overlap_conflicts: int  # retransmitted bytes that differed from the first copy


@dataclasses.dataclass
class GapRecord:
    connection_id: str
    direction: str
    offset: int
    length: int
    ts_us: int
    reason: str  # "missing_segment" | "capture_start" | "buffer_overflow" | "snaplen"


class StreamConsumer(Protocol):
    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None: ...

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None: ...

    def close(self, connection: ConnectionRecord) -> None: ...


class Run:
    """Segments of both directions at once, as the reassembler's in-order runs hand them to a consumer's
    ``data_run``: per segment its direction (``codes``: 0 to_server, 1 to_client), stream offset, time and length,
    in the order they came, and each direction's bytes laid end to end (``bufs``)."""

    __slots__ = ("codes", "offsets", "times", "lengths", "bufs")
    DIRECTIONS = (TO_SERVER, TO_CLIENT)  # by code

    def __init__(self, codes, offsets, times, lengths, bufs: dict[str, bytes]) -> None:
        self.codes, self.offsets, self.times, self.lengths, self.bufs = codes, offsets, times, lengths, bufs

    def segments(self) -> list[tuple[str, int, int, bytes]]:
        """The run as ``(direction, offset, ts_us, data)`` tuples, in the order they came (``data`` one by one)."""
        at = [0, 0]
        out = []
        for c, o, t, n in zip(self.codes.tolist(), self.offsets.tolist(), self.times.tolist(), self.lengths.tolist()):
            d = self.DIRECTIONS[c]
            out.append((d, o, t, self.bufs[d][at[c]:at[c] + n]))
            at[c] += n
        return out
