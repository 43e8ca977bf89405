"""The frame layouts of the two pre-standard drafts in the seeds, as data plus one ``parse`` each.

0-9 draft (seed 000, "General Frame Format")::

    | type | cycle | channel |   size   |  payload   | frame-end |
      octet  octet    short      long     size octets    %xCE

AMQP/Fast 0.9a5 (seed 003, "The Frame Header Wire Format", "Extended Frame Header Wire Format")::

    | type | channel |   size   |  frame body   | frame-end |
      octet   octet     short     size-1 octets     %xCE       (size includes the frame-end)

    META (type 9, channel 0, size 0: no body, no frame-end), then at once an extended frame:
    | type | flags | channel | frame-size | frame body ... |
      octet  octet    short    long long    frame-size octets

The document does not say whether an extended frame's frame-size includes a
frame-end; it says the body "is not affected in any way" by the meta frame, so
we read it like a normal frame: frame-size counts the body and its frame-end.

``parse(buf, pos, extended)`` returns ``NEED`` (more bytes), a ``(reason, detail)``
problem, or ``Frame``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

FRAME_END = 0xCE
NEED = "need"
D0_9_DRAFT = "0-9-draft"
AMQP_FAST = "amqp-fast-0.9a5"
FRAME_TYPES = {1: "method", 2: "header", 3: "body", 4: "oob_method", 5: "oob_header", 6: "oob_body", 7: "trace", 8: "heartbeat"}
FAST_FRAME_TYPES = {**FRAME_TYPES, 9: "meta"}
MAX_FRAME = 1 << 20  # largest frame believed without a negotiated limit: more is noise, not a frame
_DRAFT = struct.Struct(">BBHI")
_FAST = struct.Struct(">BBH")
_EXTENDED = struct.Struct(">BBHQ")


class Frame(NamedTuple):
    ftype: int
    channel: int
    payload: slice  # of the buffer
    total: int  # octets of the whole frame
    cycle: int | None = None  # the draft's cycle octet
    extended: bool = False


def parse_draft(buf, pos: int, extended: bool = False):
    if len(buf) - pos < 8:
        return NEED
    ftype, cycle, channel, size = _DRAFT.unpack_from(buf, pos)
    if ftype not in FRAME_TYPES:
        return "unknown_frame_type", f"frame type {ftype} (the draft defines 1-8)"
    if size > MAX_FRAME:
        return "frame_too_large", f"frame header claims {size} payload octets"
    total = 8 + size + 1
    if len(buf) - pos < total:
        return NEED
    if buf[pos + total - 1] != FRAME_END:
        return "bad_frame_end", f"octet 0x{buf[pos + total - 1]:02x} where the frame-end 0xce belongs"
    return Frame(ftype, channel, slice(pos + 8, pos + 8 + size), total, cycle)


def parse_fast(buf, pos: int, extended: bool = False):
    if extended:
        if len(buf) - pos < 12:
            return NEED
        ftype, flags, channel, size = _EXTENDED.unpack_from(buf, pos)
        head = 12
        if ftype == 9:
            return "bad_extended_frame", "a meta frame may not follow a meta frame"
    else:
        if len(buf) - pos < 4:
            return NEED
        ftype, channel, size = _FAST.unpack_from(buf, pos)
        head, flags = 4, 0
        if ftype == 9:
            if channel or size:
                return "bad_meta_frame", f"a meta frame has channel {channel} and size {size}; both must be 0"
            return Frame(9, 0, slice(pos + 4, pos + 4), 4)
    if ftype not in FAST_FRAME_TYPES:
        return "unknown_frame_type", f"frame type {ftype} (AMQP/Fast defines 1-9)"
    if size < 1 or size > MAX_FRAME:
        return "bad_frame_size", f"frame size {size} (it counts the frame-end, so at least 1)"
    total = head + size
    if len(buf) - pos < total:
        return NEED
    if buf[pos + total - 1] != FRAME_END:
        return "bad_frame_end", f"octet 0x{buf[pos + total - 1]:02x} where the frame-end 0xce belongs"
    if flags:
        return "bad_extended_frame", f"extended frame flags 0x{flags:02x} (reserved, must be 0)"
    return Frame(ftype, channel, slice(pos + head, pos + total - 1), total, None, extended)


LAYOUTS = {D0_9_DRAFT: parse_draft, AMQP_FAST: parse_fast}


_PUBLISHED_0_9 = struct.Struct(">BHI")


def parse_published_0_9(buf, pos: int, extended: bool = False):
    """The published 0-9's 7-octet frame header (type, channel short, size long, payload, frame-end):
    only to tell it apart from AMQP/Fast, which sends the same protocol header."""
    if len(buf) - pos < 7:
        return NEED
    ftype, channel, size = _PUBLISHED_0_9.unpack_from(buf, pos)
    if ftype not in FRAME_TYPES:
        return "unknown_frame_type", f"frame type {ftype}"
    if size > MAX_FRAME:
        return "frame_too_large", f"frame header claims {size} payload octets"
    if len(buf) - pos < size + 8:
        return NEED
    if buf[pos + size + 7] != FRAME_END:
        return "bad_frame_end", "no frame-end where the size points"
    return Frame(ftype, channel, slice(pos + 7, pos + 7 + size), size + 8)
