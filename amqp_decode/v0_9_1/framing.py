"""Frame boundaries in one direction of a stream: buffering, errors and resynchronisation.

``DirectionFramer`` takes in-order stream bytes (and gaps) of one direction and
cuts them into frames, handing each complete frame to its owner. It keeps at
most one partial frame (bounded by the frame size limit) between calls, so a
frame split across any number of ``feed`` calls is seen once, whole.

Every byte fed ends up in exactly one frame or one error region, so per
direction: frame bytes + error bytes = bytes fed (and gaps are counted apart).

Modes:

- START: the first bytes of the direction; a protocol header (``AMQP`` + 4)
  is taken when it is there, anything else is searched for frames;
- SYNCED: frame after frame; a header that cannot be a frame (unknown type,
  too large, bad frame-end) opens an error region and switches to RESYNC;
- RESYNC: scan forward for the next plausible frame: known type, size within
  the limit, frame-end 0xCE where the size says, content that fits the type
  (a known method, a content header of a known class, an empty heartbeat on
  channel 0) and, where the bytes are there, a plausible next frame header;
- FOREIGN: the stream speaks another protocol; everything is one error region.
"""

from __future__ import annotations

import collections
import hashlib
import re

from amqp_decode.detect import AMQP, HEADER_SIZE, could_be_header
from amqp_decode.v0_9_1.primitives import FRAME_HEADER

START, SYNCED, RESYNC, FOREIGN = "start", "synced", "resync", "foreign"
FRAME_END = 0xCE
YES, NO, WAIT = 1, 0, -1


class ErrorRegion:
    """A contiguous run of stream bytes that is not a frame."""

    __slots__ = ("offset", "length", "reason", "detail", "ts_us", "raw", "hasher", "cap")

    def __init__(self, offset: int, ts_us: int, reason: str, detail: str, cap: int) -> None:
        self.offset, self.ts_us, self.reason, self.detail, self.cap = offset, ts_us, reason, detail, cap
        self.length = 0
        self.raw = bytearray()
        self.hasher = hashlib.sha256()

    def add(self, chunk) -> None:
        if not len(chunk):
            return
        self.length += len(chunk)
        self.hasher.update(chunk)
        room = self.cap - len(self.raw)
        if room > 0:
            self.raw += chunk[:room]


class DirectionFramer:
    """Frames of one direction; ``owner`` receives frames, headers and error regions.

    The owner provides ``frame_types`` (octet -> name), ``frame_limit()`` and
    ``resync_limit()`` (largest payload accepted when synced / when searching),
    ``plausible_payload(kind, channel, payload)``, and the callbacks
    ``on_frame``, ``on_protocol_header`` (returns the next mode) and ``on_error``.
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
        self.skip_to: int | None = None  # stream offset where the frame cut by a gap ends
        self.expected = 0  # stream offset of the next byte we expect
        self.started = False
        self.fed = self.frame_bytes = self.error_bytes = self.gap_bytes = 0
        self._scan_re = None
        self._scan_types = None
        self._mv: memoryview | None = None
        self.stalled = False

    # -- input ------------------------------------------------------------------------
    def feed(self, offset: int, ts_us: int, data: bytes) -> None:
        if offset > self.expected:  # a hole nobody reported: handle it like a gap
            self.gap(self.expected, offset - self.expected, ts_us, reported=False)
        elif offset < self.expected:  # already seen: keep only the new tail
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
        mv = self._mv = memoryview(buf)
        pos = 0
        self.need = 0
        self.stalled = False
        cut_frame_end = None
        while pos < n and not self.stalled:
            pos = _STEPS[self.mode](self, buf, mv, pos, n, final)
        if final and pos < n:
            if self.mode == SYNCED and n - pos >= 7:
                size = FRAME_HEADER.unpack_from(buf, pos)[2]
                if size <= self.owner.resync_limit():  # trusted enough to skip to its end after a gap
                    cut_frame_end = self.base + pos + size + 8
            if self.region is None or self.mode not in (RESYNC, FOREIGN):
                self._open_region(pos, *final_reason)
            self.region.add(mv[pos:n])
            pos = n
        self.pending = buf[pos:] if pos < n else b""
        self.base += pos
        self._mv = None
        return cut_frame_end

    def _ts(self, pos_offset: int) -> int:
        marks = self.marks
        while len(marks) > 1 and marks[1][0] <= pos_offset:
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

    def _emit(self, mv: memoryview, pos: int, end: int, kind: str, channel: int) -> None:
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), kind, channel, mv[pos + 7 : end - 1], end - pos)
        self.frame_bytes += end - pos

    # -- modes ---------------------------------------------------------------------------
    def _start(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        head = buf[pos : pos + HEADER_SIZE]
        if len(head) < HEADER_SIZE and could_be_header(head):
            self.need = HEADER_SIZE
            self.stalled = True
            return pos
        if len(head) == HEADER_SIZE and head.startswith(AMQP):
            off = self.base + pos
            self.mode = self.owner.on_protocol_header(self, off, self._ts(off), head)
            self.frame_bytes += HEADER_SIZE
            if self.mode == FOREIGN:
                self._open_region(pos + HEADER_SIZE, "unsupported_dialect", "a stream in a dialect this codec does not decode")
            return pos + HEADER_SIZE
        self.mode = RESYNC
        return pos

    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if n - pos < 7:
            self.need = 7
            self.stalled = True
            return pos
        ftype, channel, size = FRAME_HEADER.unpack_from(buf, pos)
        kind = self.owner.frame_types.get(ftype)
        if size > self.owner.frame_limit():
            return self._lose_sync(pos, "frame_too_large", f"frame header claims {size} payload bytes, over the limit of {self.owner.frame_limit()}")
        end = pos + size + 8
        if end > n:
            if kind is None and size > self.owner.resync_limit():
                return self._lose_sync(pos, "unknown_frame_type", f"frame type {ftype} with an implausible size {size}")
            self.need = end - pos
            self.stalled = True
            return pos
        if buf[end - 1] != FRAME_END:
            if kind is None:
                return self._lose_sync(pos, "unknown_frame_type", f"frame type {ftype} and no frame-end where its size points")
            return self._lose_sync(pos, "bad_frame_end", f"octet 0x{buf[end - 1]:02x} where the frame-end 0xce belongs ({kind} frame of {size} bytes)")
        if kind is None:  # well delimited, just not a type of this dialect: keep it as one error
            self._open_region(pos, "unknown_frame_type", f"frame type {ftype} is not defined in this dialect ({size} payload bytes)")
            self.region.add(mv[pos:end])
            self._flush_region()
            return end
        self._emit(mv, pos, end, kind, channel)
        return end

    def _lose_sync(self, pos: int, reason: str, detail: str) -> int:
        self._open_region(pos, reason, detail)
        self.region.add(self._mv[pos : pos + 1])  # the bad header's first octet; the scan starts after it
        self.mode = RESYNC
        return pos + 1

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
        scan = self._scanner()
        m = scan(buf, start)
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
            m = scan(buf, q + 1)
        self.region.add(mv[pos:n])
        return n

    def _foreign(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        if self.region is None:
            self._open_region(pos, "unsupported_dialect", "a stream in a dialect this codec does not decode")
        self.region.add(mv[pos:n])
        return n

    def _scanner(self):
        types = tuple(sorted(self.owner.frame_types))
        if types != self._scan_types:
            self._scan_types = types
            self._scan_re = re.compile(b"[" + b"".join(re.escape(bytes([t])) for t in types) + b"]").search
        return self._scan_re

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        """YES, NO or WAIT (more bytes would decide) for a frame starting at ``q``."""
        if q + 7 > n:
            return NO if final else self._wait(q, 7)
        ftype, channel, size = FRAME_HEADER.unpack_from(buf, q)
        kind = self.owner.frame_types.get(ftype)
        if kind is None or size > self.owner.resync_limit():
            return NO
        end = q + size + 8
        if end > n:
            return NO if final else self._wait(q, size + 8)
        if buf[end - 1] != FRAME_END:
            return NO
        strength = self.owner.plausible_payload(kind, channel, self._mv[q + 7 : end - 1])
        if not strength:
            return NO
        if end + 7 <= n:
            ntype, _, nsize = FRAME_HEADER.unpack_from(buf, end)
            ok = ntype in self.owner.frame_types and nsize <= self.owner.resync_limit()
            return YES if ok else NO
        if final or (end == n and strength > 1):
            return YES
        return self._wait(q, end + 7 - q)

    def _wait(self, q: int, needed: int) -> int:
        self.need = needed  # pending is cut at q before the next attempt
        return WAIT


_STEPS = {
    START: DirectionFramer._start,
    SYNCED: DirectionFramer._synced,
    RESYNC: DirectionFramer._resync,
    FOREIGN: DirectionFramer._foreign,
}

__all__ = ["DirectionFramer", "ErrorRegion", "START", "SYNCED", "RESYNC", "FOREIGN"]
