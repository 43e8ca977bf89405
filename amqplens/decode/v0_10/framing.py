"""AMQP 0-10 frame boundaries in one direction of a stream (seed 004, "Frame format").

A frame starts with a 12-octet header::

    octet 0     version (2 bits, 0), reserved (2 bits), first-segment, last-segment, first-frame, last-frame
    octet 1     segment type: 0 control, 1 command, 2 header, 3 body
    octets 2-3  size of the whole frame, header included (uint16)
    octet 4     reserved (0)
    octet 5     reserved (4 bits), track (4 bits): 0 control, 1 command
    octets 6-7  channel
    octets 8-11 reserved (0)

``DirectionFramer`` cuts in-order stream bytes into frames and hands each whole
frame to its owner, keeping at most one partial frame (< 64 KiB) between calls.
Every byte fed ends up in exactly one frame or one error region, so per
direction frame bytes + error bytes = bytes fed; gaps are counted apart.

Modes as in the siblings: START (protocol header or a search), SYNCED (frame
after frame; an impossible header opens an error region), RESYNC (scan for a
header whose reserved octets are zero and whose next frame header, where the
bytes are there, is plausible too), OPAQUE (another protocol: one region).
"""

from __future__ import annotations

import re
import struct

from amqplens.decode.detect import AMQP, HEADER_SIZE
from amqplens.decode.streaming import NO, OPAQUE, RESYNC, START, SYNCED, YES, DirectionFramerBase

FRAME_HEADER = struct.Struct(">BBHBBHI")  # flags, segment type, size, reserved, track, channel, reserved
FrameHeader = tuple[int, int, int, int, int, int, int]  # FRAME_HEADER unpacked
FRAME_HEADER_SIZE = 12
# a frame header with every reserved bit zero, or a protocol header
_CANDIDATE = re.compile(rb"(?=[\x00-\x0f][\x00-\x03][\x00-\xff]{2}\x00[\x00-\x0f][\x00-\xff]{2}\x00\x00\x00\x00)|AMQP")


def header_problem(
    flags: int, stype: int, size: int, strict: bool, r1: int = 0, track: int = 0, r2: int = 0
) -> tuple[str, str] | None:
    """Why a 12-octet header cannot start a frame (reason, detail), or None."""
    if flags & 0xC0:
        return "bad_frame_header", f"frame format version {flags >> 6} (0-10 frames are version 0)"
    if stype > 3:
        return "unknown_segment_type", f"segment type {stype} (0 control, 1 command, 2 header, 3 body)"
    if size < FRAME_HEADER_SIZE:
        return "bad_frame_header", f"frame size {size} is smaller than its 12-octet header"
    if strict and (flags & 0x30 or r1 or track > 0x0F or r2):
        return "bad_frame_header", "reserved bits of the frame header are set"
    return None


class DirectionFramer(DirectionFramerBase):
    """Frames of one direction; ``owner`` receives frames, protocol headers and error regions.

    The owner provides ``plausible_payload(stype, payload)`` (0 no, 1 maybe, 2 yes) and the
    callbacks ``on_frame(framer, offset, ts_us, header, payload)`` (header: the unpacked
    ``FRAME_HEADER`` tuple), ``on_protocol_header(framer, offset, ts_us, head)`` (returns the
    next mode and, for OPAQUE, the region's reason and detail) and ``on_error(framer, region)``.
    """

    CANDIDATE = _CANDIDATE
    RESYNC_TAIL = FRAME_HEADER_SIZE - 1  # a header may start in the tail
    START_WAITS_AT_CLOSE = False

    def _cut_frame_end(self, buf: bytes, pos: int, n: int) -> int | None:
        if n - pos >= FRAME_HEADER_SIZE:
            return self.base + pos + FRAME_HEADER.unpack_from(buf, pos)[2]  # skip to its end after a gap
        return None

    # -- modes ---------------------------------------------------------------------------
    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if n - pos < FRAME_HEADER_SIZE:
            self.need = FRAME_HEADER_SIZE
            self.stalled = True
            return pos
        if buf.startswith(AMQP, pos):
            return self._header(mv, pos)
        header = FRAME_HEADER.unpack_from(buf, pos)
        problem = header_problem(header[0], header[1], header[2], False)
        if problem is not None:
            return self._lose_sync(pos, *problem)
        end = pos + header[2]
        if end > n:
            self.need = header[2]
            self.stalled = True
            return pos
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), header, mv[pos + FRAME_HEADER_SIZE : end])
        self.frame_bytes += header[2]
        return end

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        if buf.startswith(AMQP, q):
            if q + HEADER_SIZE > n:
                return NO if final else self._wait(HEADER_SIZE)
            return YES if buf[q + 4 : q + 8] == b"\x01\x01\x00\x0a" else NO
        if q + FRAME_HEADER_SIZE > n:
            return NO if final else self._wait(FRAME_HEADER_SIZE)
        header: FrameHeader = FRAME_HEADER.unpack_from(buf, q)
        if header_problem(*header[:3], True, header[3], header[4], header[6]) is not None:
            return NO
        end = q + header[2]
        if end > n:
            return NO if final else self._wait(header[2])
        strength = self.owner.plausible_payload(header[1], memoryview(buf)[q + FRAME_HEADER_SIZE : end])
        if not strength:
            return NO
        if end + FRAME_HEADER_SIZE <= n:
            if buf.startswith(AMQP, end):
                return YES
            nxt: FrameHeader = FRAME_HEADER.unpack_from(buf, end)
            return YES if header_problem(*nxt[:3], True, nxt[3], nxt[4], nxt[6]) is None else NO
        if final or (end == n and strength > 1):
            return YES
        return self._wait(header[2] + FRAME_HEADER_SIZE)


__all__ = ["DirectionFramer", "FRAME_HEADER", "FRAME_HEADER_SIZE", "START", "SYNCED", "RESYNC", "OPAQUE", "header_problem"]
