"""Decode a capture through the project's own pieces (read_capture, TcpReassembler, the codec registry)."""

from __future__ import annotations

from amqp_decode.codecs import DecodeOptions, DecodingConsumer
from amqp_decode.tcp import TcpReassembler
from tests.v1_0.captures import packet_batch


def decode_capture(path, amqp_ports=(5672,)) -> list[tuple]:
    """``[(record, frames, errors, facts), ...]`` per connection, decoded by whichever codec the registry picks."""
    consumers: dict = {}
    rows: dict = {}

    def factory(info):
        c = DecodingConsumer(info.connection_id, DecodeOptions(), lambda *_: None)
        consumers[info.connection_id] = c
        rows[info.connection_id] = ([], [])
        return c

    reassembler = TcpReassembler("cap", amqp_ports=amqp_ports, consumer_factory=factory)
    reassembler.feed_columns(packet_batch(path))
    reassembler.finish()
    out = []
    for record in reassembler.drain_connections():
        c = consumers[record.connection_id]
        frames, errors = rows[record.connection_id]
        frames += c.drain_frames()
        errors += c.drain_errors()
        out.append((record, frames, errors, c.connection_facts()))
    return out
