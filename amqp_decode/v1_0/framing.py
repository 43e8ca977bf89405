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

import collections
import re
import struct

from amqp_decode.detect import AMQP, HEADER_SIZE, could_be_header
from amqp_decode.v0_9_1.framing import ErrorRegion

START, SYNCED, RESYNC, OPAQUE = "start", "synced", "resync", "opaque"
YES, NO, WAIT = 1, 0, -1
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


class DirectionFramer:
    """Frames of one direction; ``owner`` receives frames, protocol headers and error regions.

    The owner provides ``frame_limit(direction)`` and ``resync_limit(direction)``,
    ``plausible_body(ftype, body)`` (0 no, 1 maybe, 2 yes), and the callbacks
    ``on_frame(framer, offset, ts_us, ftype, channel, frame, doff)``,
    ``on_protocol_header(framer, offset, ts_us, head)`` (returns the next mode
    and, for OPAQUE, the region's reason and detail) and ``on_error(framer, region)``.
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
        self.need = 0  # pending bytes needed before another attempt can progress
        self.marks: collections.deque = collections.deque()  # (stream offset, ts_us) per feed
        self.region: ErrorRegion | None = None
        self.resync_reason = ("not_amqp", "bytes at the start of the stream that are neither a protocol header nor frames")
        self.opaque_reason = ("tls", "")
        self.skip_to: int | None = None  # stream offset where the frame cut by a gap ends
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
        """Consume what can be consumed; returns, when a partial frame is dropped, where it would end."""
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
        step = _STEPS
        while pos < n and not self.stalled:
            pos = step[self.mode](self, buf, mv, pos, n, final)
        if final and pos < n:
            if self.mode == SYNCED and n - pos >= 8:
                size, doff, ftype, _ = FRAME_HEADER.unpack_from(buf, pos)
                if header_problem(size, doff, ftype, self.owner.resync_limit(self.direction)) is None:
                    cut_frame_end = self.base + pos + size  # trusted enough to skip to its end after a gap
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
        if len(head) < HEADER_SIZE and could_be_header(head):
            self.need = HEADER_SIZE
            self.stalled = True
            return pos
        if len(head) == HEADER_SIZE and head.startswith(AMQP):
            return self._header(mv, pos)
        self.mode = RESYNC
        return pos

    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if n - pos < 8:
            self.need = 8
            self.stalled = True
            return pos
        if buf.startswith(AMQP, pos):
            return self._header(mv, pos)
        size, doff, ftype, channel = FRAME_HEADER.unpack_from(buf, pos)
        problem = header_problem(size, doff, ftype, self.owner.frame_limit(self.direction))
        if problem is not None:
            self._open_region(pos, *problem)
            self.region.add(mv[pos : pos + 1])  # the bad header's first octet; the scan starts after it
            self.mode = RESYNC
            return pos + 1
        end = pos + size
        if end > n:
            self.need = size
            self.stalled = True
            return pos
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), ftype, channel, mv[pos:end], doff)
        self.frame_bytes += size
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
        search = _CANDIDATE.search
        m = search(buf, start)
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
            m = search(buf, q + 1)
        # a frame or protocol header may start in the last 7 bytes: the search needs more to see it
        cut = n if final else max(pos, start, n - HEADER_SIZE + 1)
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

    def _wait(self, needed: int) -> int:
        self.need = needed  # pending is cut at the candidate before the next attempt
        return WAIT


_KNOWN_HEADERS = (b"\x00\x01\x00\x00", b"\x03\x01\x00\x00", b"\x02\x01\x00\x00")
_STEPS = {
    START: DirectionFramer._start,
    SYNCED: DirectionFramer._synced,
    RESYNC: DirectionFramer._resync,
    OPAQUE: DirectionFramer._opaque,
}

__all__ = ["DirectionFramer", "FRAME_HEADER", "START", "SYNCED", "RESYNC", "OPAQUE", "header_problem"]
