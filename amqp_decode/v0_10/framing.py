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

import collections
import re
import struct

from amqp_decode.detect import AMQP, HEADER_SIZE, could_be_header
from amqp_decode.v0_9_1.framing import ErrorRegion

START, SYNCED, RESYNC, OPAQUE = "start", "synced", "resync", "opaque"
YES, NO, WAIT = 1, 0, -1
FRAME_HEADER = struct.Struct(">BBHBBHI")  # flags, segment type, size, reserved, track, channel, reserved
FRAME_HEADER_SIZE = 12
# a frame header with every reserved bit zero, or a protocol header
_CANDIDATE = re.compile(rb"(?=[\x00-\x0f][\x00-\x03][\x00-\xff]{2}\x00[\x00-\x0f][\x00-\xff]{2}\x00\x00\x00\x00)|AMQP")


def header_problem(flags: int, stype: int, size: int, strict: bool, r1: int = 0, track: int = 0, r2: int = 0):
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


class DirectionFramer:
    """Frames of one direction; ``owner`` receives frames, protocol headers and error regions.

    The owner provides ``plausible_payload(stype, payload)`` (0 no, 1 maybe, 2 yes) and the
    callbacks ``on_frame(framer, offset, ts_us, header, payload)`` (header: the unpacked
    ``FRAME_HEADER`` tuple), ``on_protocol_header(framer, offset, ts_us, head)`` (returns the
    next mode and, for OPAQUE, the region's reason and detail) and ``on_error(framer, region)``.
    """

    def __init__(self, direction: str, owner, max_error_bytes: int) -> None:
        self.direction = direction
        self.owner = owner
        self.max_error_bytes = max_error_bytes
        self.mode = START
        self.pending = b""
        self.chunks: list[bytes] = []
        self.chunks_len = 0
        self.base = 0  # stream offset of pending[0]
        self.need = 0
        self.marks: collections.deque = collections.deque()  # (stream offset, ts_us) per feed
        self.region: ErrorRegion | None = None
        self.resync_reason = ("not_amqp", "bytes at the start of the stream that are neither a protocol header nor frames")
        self.opaque_reason = ("unsupported_dialect", "")
        self.skip_to: int | None = None
        self.expected = 0
        self.started = False
        self.fed = self.frame_bytes = self.error_bytes = self.gap_bytes = 0
        self.stalled = False

    # -- input ------------------------------------------------------------------------
    def feed(self, offset: int, ts_us: int, data: bytes) -> None:
        if offset > self.expected:  # a hole nobody reported: handle it like a gap
            self.gap(self.expected, offset - self.expected, ts_us, reported=False)
        elif offset < self.expected:
            data = data[self.expected - offset :]
            offset = self.expected
        if not data:
            return
        if not self.started:
            self.started = True
            if offset != 0:
                self.mode = RESYNC
                self.resync_reason = ("resync_skipped", "bytes before the first plausible frame of a capture that starts mid-stream")
        self.fed += len(data)
        self.expected = offset + len(data)
        self.marks.append((offset, ts_us))
        self.chunks.append(bytes(data))
        self.chunks_len += len(data)
        if len(self.pending) + self.chunks_len >= self.need:
            self._run(final=False)

    def gap(self, offset: int, length: int, ts_us: int, reported: bool = True) -> None:
        frame_end = self._run(final=True, final_reason=("truncated_by_gap", "a frame cut short by missing bytes"))
        self._flush_region()
        if reported:
            self.gap_bytes += length
        self.started = True
        self.expected = max(self.expected, offset + length)
        if self.mode != OPAQUE:
            self.mode = RESYNC
            self.resync_reason = ("resync_skipped", "bytes skipped after missing bytes, up to the next plausible frame")
        self.skip_to = frame_end if frame_end is not None and frame_end > self.expected else None
        self.base = self.expected
        self.marks.clear()
        self.marks.append((self.expected, ts_us))

    def close(self) -> None:
        self._run(final=True, final_reason=("truncated_at_close", "a partial frame at the end of the stream"))
        self._flush_region()

    # -- the loop ------------------------------------------------------------------------
    def _run(self, final: bool, final_reason: tuple = ("", "")) -> int | None:
        if self.chunks:
            self.pending = b"".join([self.pending, *self.chunks]) if self.pending else b"".join(self.chunks)
            self.chunks.clear()
            self.chunks_len = 0
        buf = self.pending
        n = len(buf)
        mv = memoryview(buf)
        pos = 0
        self.need = 0
        self.stalled = False
        cut_frame_end = None
        while pos < n and not self.stalled:
            pos = _STEPS[self.mode](self, buf, mv, pos, n, final)
        if final and pos < n:
            if self.mode == SYNCED and n - pos >= FRAME_HEADER_SIZE:
                cut_frame_end = self.base + pos + FRAME_HEADER.unpack_from(buf, pos)[2]  # skip to its end after a gap
            if self.region is None or self.mode not in (RESYNC, OPAQUE):
                self._open_region(pos, *final_reason)
            self.region.add(mv[pos:n])
            pos = n
        self.pending = buf[pos:] if pos < n else b""
        self.base += pos
        return cut_frame_end

    def _ts(self, stream_offset: int) -> int:
        marks = self.marks
        while len(marks) > 1 and marks[1][0] <= stream_offset:
            marks.popleft()
        return marks[0][1] if marks else 0

    def _open_region(self, pos: int, reason: str, detail: str) -> None:
        self._flush_region()
        off = self.base + pos
        self.region = ErrorRegion(off, self._ts(off), reason, detail, self.max_error_bytes)

    def _flush_region(self) -> None:
        region, self.region = self.region, None
        if region is not None and region.length:
            self.error_bytes += region.length
            self.owner.on_error(self, region)

    def _header(self, mv: memoryview, pos: int) -> int:
        off = self.base + pos
        result = self.owner.on_protocol_header(self, off, self._ts(off), bytes(mv[pos : pos + HEADER_SIZE]))
        self.frame_bytes += HEADER_SIZE
        self.mode = result[0]
        if self.mode == OPAQUE:
            self.opaque_reason = result[1:]
            self._open_region(pos + HEADER_SIZE, *self.opaque_reason)
        return pos + HEADER_SIZE

    # -- modes ---------------------------------------------------------------------------
    def _start(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        head = buf[pos : pos + HEADER_SIZE]
        if len(head) < HEADER_SIZE and could_be_header(head) and not final:
            self.need = HEADER_SIZE
            self.stalled = True
            return pos
        if len(head) == HEADER_SIZE and head.startswith(AMQP):
            return self._header(mv, pos)
        self.mode = RESYNC
        return pos

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
            self._open_region(pos, *problem)
            self.region.add(mv[pos : pos + 1])  # the bad header's first octet; the scan starts after it
            self.mode = RESYNC
            return pos + 1
        end = pos + header[2]
        if end > n:
            self.need = header[2]
            self.stalled = True
            return pos
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), header, mv[pos + FRAME_HEADER_SIZE : end])
        self.frame_bytes += header[2]
        return end

    def _resync(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if self.region is None:
            self._open_region(pos, *self.resync_reason)
        start = pos
        if self.skip_to is not None:
            target = self.skip_to - self.base
            if target > n:
                self.region.add(mv[pos:n])
                return n
            start = max(pos, target)
            self.skip_to = None
        m = _CANDIDATE.search(buf, start)
        while m is not None:
            q = m.start()
            verdict = self._plausible(buf, q, n, final)
            if verdict == YES:
                self.region.add(mv[pos:q])
                self._flush_region()
                self.mode = SYNCED
                return q
            if verdict == WAIT:
                self.region.add(mv[pos:q])
                self.stalled = True
                return q
            m = _CANDIDATE.search(buf, q + 1)
        cut = n if final else max(pos, start, n - FRAME_HEADER_SIZE + 1)  # a header may start in the tail
        self.region.add(mv[pos:cut])
        if cut < n:
            self.need = n - cut + 1
            self.stalled = True
        return cut

    def _opaque(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if self.region is None:
            self._open_region(pos, *self.opaque_reason)
        self.region.add(mv[pos:n])
        return n

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        if buf.startswith(AMQP, q):
            if q + HEADER_SIZE > n:
                return NO if final else self._wait(HEADER_SIZE)
            return YES if buf[q + 4 : q + 8] == b"\x01\x01\x00\x0a" else NO
        if q + FRAME_HEADER_SIZE > n:
            return NO if final else self._wait(FRAME_HEADER_SIZE)
        header = FRAME_HEADER.unpack_from(buf, q)
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
            nxt = FRAME_HEADER.unpack_from(buf, end)
            return YES if header_problem(*nxt[:3], True, nxt[3], nxt[4], nxt[6]) is None else NO
        if final or (end == n and strength > 1):
            return YES
        return self._wait(header[2] + FRAME_HEADER_SIZE)

    def _wait(self, needed: int) -> int:
        self.need = needed
        return WAIT


_STEPS = {
    START: DirectionFramer._start,
    SYNCED: DirectionFramer._synced,
    RESYNC: DirectionFramer._resync,
    OPAQUE: DirectionFramer._opaque,
}

__all__ = ["DirectionFramer", "FRAME_HEADER", "FRAME_HEADER_SIZE", "START", "SYNCED", "RESYNC", "OPAQUE", "header_problem"]
