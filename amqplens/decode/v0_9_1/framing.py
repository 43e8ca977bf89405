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

import functools
import re
from typing import cast

from amqplens.decode.detect import HEADER_SIZE
from amqplens.decode.streaming import NO, RESYNC, START, SYNCED, YES, DirectionFramerBase, ErrorRegion
from amqplens.decode.v0_9_1 import hotpath
from amqplens.decode.v0_9_1.frames import CONNECTION_CLASS
from amqplens.decode.v0_9_1.primitives import FRAME_HEADER

FOREIGN = "foreign"
FRAME_END = 0xCE


class DirectionFramer(DirectionFramerBase):
    """Frames of one direction; ``owner`` receives frames, headers and error regions.

    The owner provides ``frame_types`` (octet -> name), ``frame_limit()`` and
    ``resync_limit()`` (largest payload accepted when synced / when searching),
    ``plausible_payload(kind, channel, payload)``, and the callbacks
    ``on_frame``, ``on_protocol_header`` (returns the next mode) and ``on_error``.
    """

    OPAQUE_MODE = FOREIGN
    OPAQUE_REASON = ("unsupported_dialect", "a stream in a dialect this codec does not decode")
    GAP_LEAVES_OPAQUE = False  # a gap in a foreign stream is followed by a search for frames

    def __init__(self, direction: str, owner, max_error_bytes: int) -> None:
        super().__init__(direction, owner, max_error_bytes)
        self._scan_re = None
        self._scan_types = None

    def _keep_raw(self, reason: str, detail: str) -> None:
        self._open_region(0, reason, detail)

    def _cut_frame_end(self, buf: bytes, pos: int, n: int) -> int | None:
        if n - pos >= 7:
            size = FRAME_HEADER.unpack_from(buf, pos)[2]
            if size <= self.owner.resync_limit():  # trusted enough to skip to its end after a gap
                return self.base + pos + size + 8
        return None

    def _emit(self, mv: memoryview, pos: int, end: int, kind: str, channel: int) -> None:
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), kind, channel, mv[pos + 7 : end - 1], end - pos)
        self.frame_bytes += end - pos

    # -- modes ---------------------------------------------------------------------------
    def _header(self, mv: memoryview, pos: int) -> int:
        off = self.base + pos
        self.mode = self.owner.on_protocol_header(self, off, self._ts(off), bytes(mv[pos : pos + HEADER_SIZE]))
        self.frame_bytes += HEADER_SIZE
        if self.mode == FOREIGN:
            self._open_region(pos + HEADER_SIZE, *self.OPAQUE_REASON)
        return pos + HEADER_SIZE

    def _synced(self, buf: bytes, mv: memoryview, pos: int, n: int, final: bool) -> int:
        """Frame after frame while the mode stays SYNCED; runs of frames through the compiled walk when the owner has it."""
        kernel = self.owner.hot_kernel
        if kernel is None:
            return self._frames(buf, mv, pos, n, False)
        while True:
            if n - pos >= self.owner.hot_min_bytes and self._walks(buf, pos, n):
                pos = hotpath.run(kernel, self, buf, mv, pos, n)
                if pos >= n:
                    return pos
            pos = self._frames(buf, mv, pos, n, True)  # the frame that ended the walk
            if pos >= n or self.stalled or self.mode != SYNCED:
                return pos

    def _walks(self, buf: bytes, pos: int, n: int) -> bool:
        """Whether the walk would take the frame at ``pos``: not when it is cut short (a frame of more bytes than the
        buffer holds) or is a connection-class method (the walk stops there, ``hot_kernel._frames``). A short
        connection's buffers start so at least twice (its start and start-ok), and a call that walks nothing still
        costs 13-15 us."""
        if n - pos < 7:
            return False
        ftype, _channel, size = FRAME_HEADER.unpack_from(buf, pos)
        if pos + size + 8 > n:
            return False
        return not (size >= 4 and self.owner.frame_types.get(ftype) == "method"
                    and buf[pos + 7] << 8 | buf[pos + 8] == CONNECTION_CLASS)

    def _frames(self, buf: bytes, mv: memoryview, pos: int, n: int, one: bool) -> int:
        """The reference loop (the ``_run`` loop's test, without its dispatch per frame); ``one``: a single frame."""
        owner = self.owner
        on_frame, frame_limit = owner.on_frame, owner.frame_limit
        unpack, marks, base = FRAME_HEADER.unpack_from, self.marks, self.base
        while True:
            if n - pos < 7:
                self.need = 7
                self.stalled = True
                return pos
            ftype, channel, size = unpack(buf, pos)
            kind = owner.frame_types.get(ftype)
            if size > frame_limit():
                return self._lose_sync(pos, "frame_too_large", f"frame header claims {size} payload bytes, over the limit of {frame_limit()}")
            end = pos + size + 8
            if end > n:
                if kind is None and size > owner.resync_limit():
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
                cast(ErrorRegion, self.region).add(mv[pos:end])  # just opened
                self._flush_region()
                return end
            off = base + pos
            on_frame(self, off, marks.time_at(off), kind, channel, mv[pos + 7 : end - 1], end - pos)
            self.frame_bytes += end - pos
            pos = end
            if one or pos >= n or self.stalled or self.mode != SYNCED:
                return pos

    def _scanner(self):
        types = self.owner.frame_types
        if types is not self._scan_types:
            self._scan_types = types
            self._scan_re = _type_scanner(tuple(sorted(types)))
        return self._scan_re

    def _plausible(self, buf: bytes, q: int, n: int, final: bool) -> int:
        """YES, NO or WAIT (more bytes would decide) for a frame starting at ``q``."""
        if q + 7 > n:
            return NO if final else self._wait(7)
        ftype, channel, size = FRAME_HEADER.unpack_from(buf, q)
        kind = self.owner.frame_types.get(ftype)
        if kind is None or size > self.owner.resync_limit():
            return NO
        end = q + size + 8
        if end > n:
            return NO if final else self._wait(size + 8)
        if buf[end - 1] != FRAME_END:
            return NO
        strength = self.owner.plausible_payload(kind, channel, cast(memoryview, self._mv)[q + 7 : end - 1])  # in _run
        if not strength:
            return NO
        if end + 7 <= n:
            ntype, _, nsize = FRAME_HEADER.unpack_from(buf, end)
            ok = ntype in self.owner.frame_types and nsize <= self.owner.resync_limit()
            return YES if ok else NO
        if final or (end == n and strength > 1):
            return YES
        return self._wait(end + 7 - q)


__all__ = ["DirectionFramer", "ErrorRegion", "START", "SYNCED", "RESYNC", "FOREIGN"]


@functools.lru_cache(maxsize=64)
def _type_scanner(types: tuple[int, ...]):
    """The search for the next octet that is one of a dialect's frame types (made once per set of types: every
    connection's to_client direction starts by searching, having no protocol header)."""
    return re.compile(b"[" + b"".join(re.escape(bytes([t])) for t in types) + b"]").search
