"""Decode a capture through the public ``amqplens.decode.decode_capture`` (the job's pieces, in its order)."""

from __future__ import annotations

from amqplens.decode import decode_capture as _decode


def decode_capture(path, amqp_ports=(5672,)) -> list[tuple]:
    """``[(record, frames, errors, facts), ...]`` per connection, decoded by whichever codec the registry picks."""
    return [(c.record, c.frames, c.errors, c.facts) for c in _decode(path, amqp_ports=amqp_ports, capture_id="cap")]
