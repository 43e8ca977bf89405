"""Decode a capture file through the project's own pipeline pieces, as the ingest job does.

``read_capture`` gives packet batches; they are sorted by (flow_key, ts_us,
record_offset) like the Spark job's sortWithinPartitions, and fed to
``TcpReassembler`` whose consumers are ``Amqp10StreamDecoder``s. Each connection
comes back with its TCP record, its frame and error rows, its gaps and facts.
"""

from __future__ import annotations

import dataclasses

from amqp_decode.capture import read_capture
from amqp_decode.tcp import ConnectionRecord, TcpReassembler
from amqp_decode.v1_0 import Amqp10StreamDecoder


@dataclasses.dataclass
class Decoded:
    record: ConnectionRecord
    frames: list
    errors: list
    gaps: dict  # direction -> missing bytes reported to the decoder
    first_gap: dict  # direction -> stream offset of the first missing byte
    facts: dict


def packet_batch(path, capture_id: str = "cap") -> dict:
    merged: dict[str, list] = {}
    for batch in read_capture(str(path), capture_id):
        for name, values in batch.items():
            merged.setdefault(name, []).extend(values)
    order = sorted(range(len(merged.get("ts_us", []))), key=lambda i: (merged["flow_key"][i], merged["ts_us"][i], merged["record_offset"][i]))
    return {name: [values[i] for i in order] for name, values in merged.items()}


class _Recording(Amqp10StreamDecoder):
    def __init__(self, connection_id: str, **options) -> None:
        super().__init__(connection_id, **options)
        self.frames_out: list = []
        self.errors_out: list = []
        self.gaps = {"to_server": 0, "to_client": 0}
        self.first_gap: dict = {}
        self.record: ConnectionRecord | None = None

    def data(self, direction, offset, ts_us, data):
        super().data(direction, offset, ts_us, data)
        self._drain()

    def gap(self, direction, offset, length, ts_us):
        self.gaps[direction] += length
        self.first_gap.setdefault(direction, offset)
        super().gap(direction, offset, length, ts_us)
        self._drain()

    def close(self, connection=None):
        super().close(connection)
        self.record = connection
        self._drain()

    def _drain(self):
        self.frames_out += self.drain_frames()
        self.errors_out += self.drain_errors()


def decode_capture(path, amqp_ports=(5672,), **options) -> list[Decoded]:
    """Every selected connection of the capture, in the order they ended."""
    consumers: dict[str, _Recording] = {}

    def factory(info):
        consumers[info.connection_id] = _Recording(info.connection_id, **options)
        return consumers[info.connection_id]

    reassembler = TcpReassembler("cap", amqp_ports=amqp_ports, consumer_factory=factory)
    reassembler.feed_columns(packet_batch(path))
    reassembler.finish()
    out = []
    for record in reassembler.drain_connections():
        c = consumers[record.connection_id]
        out.append(Decoded(record, c.frames_out, c.errors_out, c.gaps, c.first_gap, c.connection_facts()))
    return out
