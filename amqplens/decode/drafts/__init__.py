"""The two pre-standard dialects of the seeds: the 0-9 draft (seed 000) and AMQP/Fast 0.9a5 (seed 003).

- ``DraftStreamDecoder(connection_id, dialect="0-9-draft" | "amqp-fast-0.9a5")``: the
  per-connection ``StreamConsumer`` (stream.py); ``decode_streams`` for whole streams;
- ``parse_draft`` / ``parse_fast``: one frame of each layout (layouts.py);
- ``choose_framing`` / ``SharedHeaderConsumer``: ``AMQP 1 1 0 9`` is sent by both the
  published 0-9 and AMQP/Fast; the first frames decide (choose.py).
"""

from amqplens.decode.drafts.choose import SharedHeaderConsumer, choose_framing
from amqplens.decode.drafts.layouts import AMQP_FAST, D0_9_DRAFT, Frame, parse_draft, parse_fast
from amqplens.decode.drafts.stream import DraftStreamDecoder, decode_streams

__all__ = [
    "DraftStreamDecoder",
    "decode_streams",
    "parse_draft",
    "parse_fast",
    "Frame",
    "choose_framing",
    "SharedHeaderConsumer",
    "D0_9_DRAFT",
    "AMQP_FAST",
]
