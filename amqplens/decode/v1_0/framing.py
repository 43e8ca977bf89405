"""AMQP 1.0 frame boundaries in one direction of a stream (Part 2 §2.3).

A frame starts with an 8-octet header: SIZE (uint, the whole frame), DOFF (the
body's offset in 4-octet words, >= 2), TYPE (0 AMQP, 1 SASL) and 2 type-specific
octets (the channel for AMQP frames). ``DirectionFramer`` cuts in-order stream
bytes into frames and hands each whole frame to its owner; it keeps at most one
partial frame between calls, so a frame split across any number of ``feed``
calls is seen once, whole.

A protocol header (``AMQP`` + 4 octets) may stand wherever a frame header is
expected: at the start, and again after the SASL exchange (§5.3). Read as a
frame header it would claim ~1 GiB, more than any frame limit, so the two
never collide.

Every byte fed ends up in exactly one frame or one error region (``ErrorRegion``),
so per direction: frame bytes + error bytes = bytes fed; gaps are counted apart.

Modes: START (the direction's first bytes: a protocol header, or a search for
frames), SYNCED (frame after frame; a header that cannot be a frame opens an
error region and switches to RESYNC), RESYNC (scan for the next plausible frame,
see ``_plausible``), OPAQUE (TLS or another protocol: the rest is one region).
"""

from __future__ import annotations

import re
import struct

from amqplens.decode.detect import AMQP, HEADER_SIZE
from amqplens.decode.v1_0 import hotpath
from amqplens.decode.streaming import NO, OPAQUE, RESYNC, START, SYNCED, YES, DirectionFramerBase

FRAME_HEADER = struct.Struct(">IBBH")  # size, doff, type, channel
AMQP_FRAME, SASL_FRAME = 0, 1
# a frame header's DOFF and TYPE octets (a frame starts 4 octets before them), or a protocol header
_CANDIDATE = re.compile(rb"(?=[\x00-\xff]{4}[\x02-\xff][\x00\x01])|AMQP")


def header_problem(size: int, doff: int, ftype: int, limit: int) -> tuple[str, str] | None:
    """Why an 8-octet frame header cannot start a frame, or None."""
    if ftype not in (AMQP_FRAME, SASL_FRAME):
        return "unknown_frame_type", f"frame type {ftype} (only 0 AMQP and 1 SASL exist)"
    if size < 8 or doff < 2 or doff * 4 > size:
        return "bad_frame_header", f"frame size {size} with data offset {doff} (size >= 8, doff >= 2, doff*4 <= size)"
    if size > limit:
        return "frame_too_large", f"frame header claims {size} bytes, over the limit of {limit}"
    return None


class DirectionFramer(DirectionFramerBase):
    """Frames of one direction; ``owner`` receives frames, protocol headers and error regions.

    The owner provides ``frame_limit(direction)`` and ``resync_limit(direction)``,
    ``plausible_body(ftype, body)`` (0 no, 1 maybe, 2 yes), and the callbacks
    ``on_frame(framer, offset, ts_us, ftype, channel, frame, doff)``,
    ``on_protocol_header(framer, offset, ts_us, head)`` (returns the next mode
    and, for OPAQUE, the region's reason and detail) and ``on_error(framer, region)``.
    """

    CANDIDATE = _CANDIDATE
    RESYNC_TAIL = HEADER_SIZE - 1  # a frame or protocol header may start in the last 7 bytes
    OPAQUE_REASON = ("tls", "")

    def _cut_frame_end(self, buf: bytes, pos: int, n: int) -> int | None:
        if n - pos >= 8:
            size, doff, ftype, _ = FRAME_HEADER.unpack_from(buf, pos)
            if header_problem(size, doff, ftype, self.owner.resync_limit(self.direction)) is None:
                return self.base + pos + size  # trusted enough to skip to its end after a gap
        return None

    # -- modes ---------------------------------------------------------------------------
    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        owner = self.owner
        if owner.hot_kernel is not None and n - pos >= owner.hot_min_bytes and owner.hot_ready(self.direction):
            start, pos = pos, hotpath.run(owner, self, buf, mv, pos, n)  # runs of frames through the compiled walk
            if pos > start or self.mode != SYNCED:
                return pos  # the loop steps again: the walk first (a frame it stopped at is the framing loop's below)
        if n - pos < 8:
            self.need = 8
            self.stalled = True
            return pos
        if buf.startswith(AMQP, pos):
            return self._header(mv, pos)
        size, doff, ftype, channel = FRAME_HEADER.unpack_from(buf, pos)
        problem = header_problem(size, doff, ftype, self.owner.frame_limit(self.direction))
        if problem is not None:
            return self._lose_sync(pos, *problem)
        end = pos + size
        if end > n:
            self.need = size
            self.stalled = True
            return pos
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), ftype, channel, mv[pos:end], doff)
        self.frame_bytes += size
        return end

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        """YES, NO or WAIT (more bytes would decide) for a frame or protocol header at ``q``."""
        if q + 8 > n:
            return NO if final else self._wait(8)
        if buf.startswith(AMQP, q):
            return YES if buf[q + 4 : q + 8] in _KNOWN_HEADERS else NO
        limit = self.owner.resync_limit(self.direction)
        size, doff, ftype, _ = FRAME_HEADER.unpack_from(buf, q)
        if header_problem(size, doff, ftype, limit) is not None:
            return NO
        end = q + size
        if end > n:
            return NO if final else self._wait(size)
        strength = self.owner.plausible_body(ftype, memoryview(buf)[q + doff * 4 : end])
        if not strength:
            return NO
        if end + 8 <= n:
            if buf.startswith(AMQP, end):
                return YES
            nsize, ndoff, ntype, _ = FRAME_HEADER.unpack_from(buf, end)
            return YES if header_problem(nsize, ndoff, ntype, limit) is None else NO
        if final or (end == n and strength > 1):
            return YES
        return self._wait(size + 8)


_KNOWN_HEADERS = (b"\x00\x01\x00\x00", b"\x03\x01\x00\x00", b"\x02\x01\x00\x00")

__all__ = ["DirectionFramer", "FRAME_HEADER", "START", "SYNCED", "RESYNC", "OPAQUE", "header_problem"]
