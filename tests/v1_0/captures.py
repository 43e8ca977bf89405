"""Decode a capture file through the public ``amqplens.decode.decode_capture``, as the ingest job does.

Each connection comes back with its TCP record, its frame and error rows, its gaps and facts
(``amqplens.decode.api.DecodedConnection``), in the order the connections ended.
"""

from __future__ import annotations

from amqplens.decode import DecodedConnection
from amqplens.decode import decode_capture as _decode
from amqplens.decode.codecs import DecodeOptions


def decode_capture(path, amqp_ports=(5672,), **options) -> list[DecodedConnection]:
    """Every selected connection of the capture, in the order they ended (``options``: ``DecodeOptions`` fields)."""
    return list(_decode(path, amqp_ports=amqp_ports, options=DecodeOptions(**options), capture_id="cap"))
