"""Frame boundaries of the drafts' streams, one direction at a time.

``DraftFramer`` keeps the unconsumed bytes (at most one partial frame, bounded
by ``layouts.MAX_FRAME``) and cuts frames with the layout's ``parse``. A protocol
header is taken at the start; bytes that are not frames become one error region
each run (``streaming.ErrorRegion``) while the framer scans for the next
offset where a frame parses and the frame after it parses too (or the bytes
end there). Every byte fed is in exactly one frame or one region.
"""

from __future__ import annotations

from typing import cast

from amqplens.decode.detect import AMQP, HEADER_SIZE, could_be_header
from amqplens.decode.drafts.layouts import NEED, Frame
from amqplens.decode.streaming import OPAQUE, RESYNC, START, SYNCED, FramerCore  # noqa: F401  (START: this module's name for it)
from amqplens.decode.streaming import ErrorRegion


class DraftFramer(FramerCore):
    """``owner`` provides ``on_protocol_header(framer, offset, ts, head) -> mode``,
    ``on_frame(framer, offset, ts, frame, buf)`` and ``on_error(framer, region)``."""

    def __init__(self, direction: str, owner, parse, max_error_bytes: int) -> None:
        super().__init__(direction, owner, max_error_bytes)
        self.parse = parse
        self.extended = False  # the last frame was META: an extended frame header follows
        self.reason = ("not_amqp", "bytes that are neither a protocol header nor frames")

    def feed(self, offset: int, ts_us: int, data: bytes) -> None:
        if offset > self.expected:
            self.gap(self.expected, offset - self.expected, ts_us, reported=False)
        elif offset < self.expected:
            data, offset = data[self.expected - offset :], self.expected
        if not data:
            return
        if not self.started:
            self.started = True
            if offset:
                self.mode, self.reason = RESYNC, ("resync_skipped", "bytes before the first plausible frame (mid-stream start)")
        self.fed += len(data)
        self.expected = offset + len(data)
        self.marks.add(offset, ts_us)
        self.pending += data
        self._run(False)

    def gap(self, offset: int, length: int, ts_us: int, reported: bool = True) -> None:
        self._run(True, ("truncated_by_gap", "a frame cut short by missing bytes"))
        self._flush_region()
        self.gap_bytes += length if reported else 0
        self.started = True
        self.expected = max(self.expected, offset + length)
        self.base = self.expected
        self.extended = False
        if self.mode != OPAQUE:
            self.mode, self.reason = RESYNC, ("resync_skipped", "bytes skipped after missing bytes, up to the next plausible frame")
        self.marks.clear()
        self.marks.add(self.expected, ts_us)

    def close(self) -> None:
        self._run(True, ("truncated_at_close", "a partial frame at the end of the stream"))
        self._flush_region()

    # -- the loop -----------------------------------------------------------------------
    def _run(self, final: bool, final_reason: tuple = ("", "")) -> None:
        buf = self.pending
        pos, n = 0, len(buf)
        while pos < n:
            step = getattr(self, "_" + self.mode)(buf, pos, final)
            if step is None:
                break
            pos = step
        if final and pos < n:
            if self.region is None:
                self._open_region(pos, *final_reason)
            cast(ErrorRegion, self.region).add(buf[pos:n])  # opened above if it was not
            pos = n
        self.pending = buf[pos:]
        self.base += pos

    def _emit(self, buf: bytes, pos: int, frame: Frame) -> int:
        off = self.base + pos
        self.owner.on_frame(self, off, self._ts(off), frame, buf)
        self.frame_bytes += frame.total
        self.extended = frame.ftype == 9
        return pos + frame.total

    # -- modes ------------------------------------------------------------------------------
    def _start(self, buf: bytes, pos: int, final: bool):
        head = buf[pos : pos + HEADER_SIZE]
        if len(head) < HEADER_SIZE and could_be_header(head) and not final:
            return None
        if len(head) == HEADER_SIZE and head.startswith(AMQP):
            off = self.base + pos
            self.mode = self.owner.on_protocol_header(self, off, self._ts(off), head)
            self.frame_bytes += HEADER_SIZE
            if self.mode == OPAQUE:
                self._open_region(pos + HEADER_SIZE, "unsupported_dialect", f"bytes after the protocol header {head.hex()}")
            return pos + HEADER_SIZE
        self.mode = RESYNC
        return pos

    def _synced(self, buf: bytes, pos: int, final: bool):
        frame = self.parse(buf, pos, self.extended)
        if frame == NEED:
            return None
        if isinstance(frame, Frame):
            return self._emit(buf, pos, frame)
        self._open_region(pos, *frame)
        cast(ErrorRegion, self.region).add(buf[pos : pos + 1])  # just opened
        self.mode, self.extended = RESYNC, False
        return pos + 1

    def _resync(self, buf: bytes, pos: int, final: bool):
        if self.region is None:
            self._open_region(pos, *self.reason)
        q = pos
        while q < len(buf):
            frame = self.parse(buf, q)
            if frame == NEED and not final:
                break
            if isinstance(frame, Frame):
                after = q + frame.total
                nxt = self.parse(buf, after, frame.ftype == 9) if after < len(buf) else None
                if isinstance(nxt, Frame) or (nxt == NEED and not final and frame.ftype != 9) or (nxt is None and (final or frame.ftype != 9)):
                    cast(ErrorRegion, self.region).add(buf[pos:q])  # opened above if it was not
                    self._flush_region()
                    self.mode = SYNCED
                    return q
                if nxt == NEED and not final:
                    break
            q += 1
        cast(ErrorRegion, self.region).add(buf[pos:q])
        return q if q > pos else None

    def _opaque(self, buf: bytes, pos: int, final: bool):
        if self.region is None:
            self._open_region(pos, "unsupported_dialect", "a stream in a dialect this codec does not decode")
        cast(ErrorRegion, self.region).add(buf[pos:])  # opened above if it was not
        return len(buf)
