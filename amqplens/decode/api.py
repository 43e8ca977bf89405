"""Decode one capture file in this process, without Spark: the rows the ingest job's decode tasks produce.

    from amqplens.decode import decode_capture

    capture = decode_capture("broker.pcap")
    for conn in capture:
        print(conn.record.client_ip, conn.record.client_port, conn.dialect, len(conn.frames), "frames")
    publishes = [f for f in capture.frames() if f["method_name"] == "publish"]

The packets go through the same pieces as in the job, in the same order (sorted by flow, time and file
offset as the job's shuffle sorts them): the capture reader, TCP reassembly, the codec each connection's
opening picks, TLS with the key log's secrets. A frame row is a dict of the frames table's columns the codec
fills (``ts_us`` where the table has ``ts``; ``frame_id``, ``capture_id`` and ``capture_date`` are the job's).
Nothing raises on what is in the file: damaged records are ``capture_errors``, undecodable bytes are
``errors`` rows of their connection. The whole capture is held in memory; the Spark job is for large files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator

from amqplens.decode.capture import CaptureErrorRecord, SplitResult, SplitStats, read_capture
from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.tcp import ConnectionInfo, ConnectionRecord, GapRecord, StreamConsumer, TcpReassembler


@dataclasses.dataclass
class DecodedConnection:
    """One TCP connection the reassembler selected: its record, and what its codec made of the bytes."""

    record: ConnectionRecord  # endpoints, times, bytes per direction, how it ended
    frames: list[dict]  # frame rows in wire order per direction
    errors: list[dict]  # codec and frame errors (decode_errors rows without the job's columns)
    facts: dict  # protocol facts: dialect, negotiated values, properties of the opening
    gaps: dict[str, int]  # direction -> bytes missing from the capture that the codec was told of
    first_gap: dict[str, int]  # direction -> stream offset of the first missing byte

    @property
    def dialect(self) -> str | None:
        return self.facts.get("dialect")


@dataclasses.dataclass
class DecodedCapture:
    """Every selected connection of a capture, in the order they ended; iterate it for them."""

    path: str
    connections: list[DecodedConnection]
    capture_errors: list[CaptureErrorRecord]  # records the reader could not use (where, why)
    gaps: list[GapRecord]  # missing stretches of the TCP streams
    stats: SplitStats  # records, packets, bytes read

    def __iter__(self) -> Iterator[DecodedConnection]:
        return iter(self.connections)

    def __len__(self) -> int:
        return len(self.connections)

    def frames(self) -> list[dict]:
        """Every frame row, sorted as the lifecycle job sorts them: (connection_id, ts_us, stream_offset)."""
        rows = [f for c in self.connections for f in c.frames]
        rows.sort(key=lambda f: (f["connection_id"], f["ts_us"], f["stream_offset"]))
        return rows


class _Recorder(DecodingConsumer):
    """A ``DecodingConsumer`` that keeps its rows and the gaps it was told of."""

    def __init__(self, connection_id: str, options: DecodeOptions, tls_port: bool) -> None:
        super().__init__(connection_id, options, lambda consumer, record: None, tls_port=tls_port)
        self.frames_out: list[dict] = []
        self.errors_out: list[dict] = []
        self.gaps = {"to_server": 0, "to_client": 0}
        self.first_gap: dict[str, int] = {}

    def data(self, direction: str, offset: int, ts_us: int, data: bytes) -> None:
        super().data(direction, offset, ts_us, data)
        self._drain()

    def gap(self, direction: str, offset: int, length: int, ts_us: int) -> None:
        self.gaps[direction] += length
        self.first_gap.setdefault(direction, offset)
        super().gap(direction, offset, length, ts_us)
        self._drain()

    def close(self, connection: ConnectionRecord) -> None:
        super().close(connection)
        self._drain()

    def _drain(self) -> None:
        self.frames_out += self.drain_frames()
        self.errors_out += self.drain_errors() + self.drain_frame_errors()


def read_packets(path: str | os.PathLike, capture_id: str = "capture") -> tuple[dict[str, list], SplitResult]:
    """The capture's packet columns sorted by (flow_key, ts_us, record_offset), as the job's shuffle sorts them,
    and the reader (its ``stats`` and ``errors``)."""
    reader = read_capture(str(path), capture_id)
    merged: dict[str, list] = {}
    for batch in reader:
        for name, values in batch.items():
            merged.setdefault(name, []).extend(values)
    n = len(merged.get("ts_us", []))
    order = sorted(range(n), key=lambda i: (merged["flow_key"][i], merged["ts_us"][i], merged["record_offset"][i]))
    return {name: [values[i] for i in order] for name, values in merged.items()}, reader


def reassemble(path: str | os.PathLike, consumer_factory: Callable[[ConnectionInfo], StreamConsumer | None], *,
               amqp_ports: tuple[int, ...] = (5672,), tls_ports: tuple[int, ...] = (5671,), sniff: bool = True,
               capture_id: str = "capture", max_ooo_bytes: int = 4 << 20) -> tuple[TcpReassembler, SplitResult]:
    """The capture's TCP streams, without a codec: every connection the flow selection keeps gets a consumer from
    ``consumer_factory`` (``None``: not followed) and its in-order bytes and gaps (``StreamConsumer``), as in the job
    (``max_ooo_bytes``: ``capture.max_ooo_buffer``).
    Returns the finished reassembler (``drain_connections``, ``drain_gaps``) and the reader (``stats``, ``errors``)."""
    packets, reader = read_packets(path, capture_id)
    reassembler = TcpReassembler(capture_id, amqp_ports=amqp_ports, tls_ports=tls_ports, sniff=sniff,
                                 max_ooo_bytes=max_ooo_bytes, consumer_factory=consumer_factory)
    if packets:  # a file with no packet (empty, or no capture) has no columns
        reassembler.feed_columns(packets)
    reassembler.finish()
    return reassembler, reader


def decode_capture(path: str | os.PathLike, *, amqp_ports: tuple[int, ...] = (5672,), tls_ports: tuple[int, ...] = (5671,),
                   sniff: bool = True, options: DecodeOptions | None = None, tls: bool = True,
                   capture_id: str = "capture", max_ooo_bytes: int = 4 << 20) -> DecodedCapture:
    """Decode the capture at ``path`` (pcap or pcapng); see the module's doc.

    ``amqp_ports``/``tls_ports``/``sniff`` select the flows as ``capture.amqp_ports``, ``capture.tls_ports`` and
    ``capture.sniff`` do, ``max_ooo_bytes`` bounds the out-of-order buffer as ``capture.max_ooo_buffer``;
    ``options`` are the codecs' (``DecodeOptions``: key log, redaction, body prefixes, ...);
    ``tls=False`` leaves connections on the TLS ports out; ``capture_id`` goes into the rows' ids.
    """
    options = options or DecodeOptions()
    consumers: dict[str, _Recorder] = {}

    def factory(info: ConnectionInfo) -> _Recorder | None:
        if info.tls and not tls:
            return None
        consumers[info.connection_id] = _Recorder(info.connection_id, options, info.tls)
        return consumers[info.connection_id]

    reassembler, reader = reassemble(path, factory, amqp_ports=amqp_ports, tls_ports=tls_ports, sniff=sniff,
                                     capture_id=capture_id, max_ooo_bytes=max_ooo_bytes)
    connections = []
    for record in reassembler.drain_connections():
        c = consumers.get(record.connection_id)
        if c is None:
            connections.append(DecodedConnection(record, [], [], {}, {"to_server": 0, "to_client": 0}, {}))
            continue
        c._drain()
        connections.append(DecodedConnection(record, c.frames_out, c.errors_out, c.connection_facts(), c.gaps, c.first_gap))
    return DecodedCapture(str(path), connections, list(reader.errors), reassembler.drain_gaps(), reader.stats)
