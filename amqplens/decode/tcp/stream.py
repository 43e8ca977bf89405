"""One direction of a TCP connection: sequence space to stream offsets.

``HalfStream`` turns the segments one side sent into in-order, de-duplicated
stream bytes and gaps. The reassembler inlines the in-order case (the segment
starts exactly at the next expected sequence number and nothing is buffered);
everything else comes through ``segment``.

Offsets are plain ints counted from the first byte of the stream, so they keep
growing past 4 GiB; sequence numbers are mapped to offsets relative to the next
expected byte, which makes the 2**32 wrap invisible.

Output goes through two callables the owner sets and may swap at any time:
``emit(offset, ts_us, data)`` and ``emit_gap(offset, length, ts_us, reason)``.
Every call starts exactly where the previous one ended, so per direction the
calls tile ``[0, next)``: no offset repeats and nothing is skipped.

The ``ts_us`` of emitted bytes never goes back: it is the time of the packet
that carried them, or the time of the bytes before them when that is later.
A segment that arrived ahead of a hole is released with the time of the
packet that filled the hole (as a reader of the socket gets it, and as
tshark shows its PDUs in the packet that completes them); so in stream order
a direction's frames are in time order too, which is what lets the lifecycle
merge the two directions by time with a small window (``LifecycleRunner``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import cast

M32 = 0xFFFFFFFF
HALF = 1 << 31
# TCP's largest window (65535 << 14): a sender cannot have more than this in
# flight, so a segment further ahead of (or behind) the next expected byte is garbage.
MAX_AHEAD = 1 << 30

GAP_MISSING = "missing_segment"
GAP_OVERFLOW = "buffer_overflow"
GAP_SNAPLEN = "snaplen"

HEAD_BYTES = 8  # enough for an AMQP protocol header or a TLS record header

# the owner's callables: emit(offset, ts_us, data), emit_gap(offset, length, ts_us, reason), on_head(half_stream)
Emit = Callable[[int, int, bytes], None]
EmitGap = Callable[[int, int, int, str], None]
OnHead = Callable[["HalfStream"], None]


class HalfStream:
    """Reassembly state of the bytes one side sends, plus its counters."""

    __slots__ = (
        "direction",
        "nseq",
        "next",
        "ooo_offs",
        "ooo_segs",
        "ooo_bytes",
        "ooo_cap",
        "hist_offs",
        "hist_data",
        "hist_bytes",
        "hist_cap",
        "snap_end",
        "fin_off",
        "peer_ack",
        "packets",
        "wire_bytes",
        "retransmitted",
        "out_of_order",
        "missing",
        "conflicts",
        "head",
        "head_open",
        "last_ts",
        "on_head",
        "emit",
        "emit_gap",
    )

    def __init__(self, ooo_cap: int, hist_cap: int) -> None:
        self.direction: str | None = None
        self.nseq: int | None = None  # sequence number of the next expected byte
        self.next = 0  # stream offset of the next expected byte
        # Out-of-order buffer: sorted, non-overlapping; segs hold (data, ts_us, truncated).
        self.ooo_offs: list[int] = []
        self.ooo_segs: list[tuple[bytes, int, bool]] = []
        self.ooo_bytes = 0
        self.ooo_cap = ooo_cap
        # Recently delivered bytes, kept to compare retransmissions with the first copy.
        self.hist_offs: list[int] = []
        self.hist_data: list[bytes] = []
        self.hist_bytes = 0
        self.hist_cap = hist_cap
        self.snap_end = -1  # where the last snaplen-cut segment's captured bytes end
        self.fin_off: int | None = None  # offset of the FIN: the stream ends there
        self.peer_ack: int | None = None  # last acknowledgement number the peer sent
        self.packets = 0
        self.wire_bytes = 0
        self.retransmitted = 0
        self.out_of_order = 0
        self.missing = 0
        self.conflicts = 0
        self.head = b""  # the first bytes delivered, for protocol sniffing
        self.head_open = True
        self.last_ts = -(1 << 63)  # ts_us of the last bytes emitted: the next never goes below it
        self.on_head: OnHead | None = None  # called with self once ``head`` holds 4 bytes
        self.emit: Emit | None = None
        self.emit_gap: EmitGap | None = None

    # -- sequence space -------------------------------------------------

    def set_isn(self, isn: int) -> None:
        """Offset 0 is the byte after the SYN (only before any byte was placed)."""
        if self.nseq is None:
            self.nseq = (isn + 1) & M32

    def offset(self, seq: int) -> int:
        """The stream offset of ``seq``: the one nearest the next expected byte."""
        # every caller has set nseq (segment, _control and stream_end_hint check it first)
        return self.next + (((seq - cast(int, self.nseq) + HALF) & M32) - HALF)

    def stream_end_hint(self) -> int:
        """Where the stream ends as far as the FIN or the peer's ACKs tell."""
        if self.fin_off is not None:
            return self.fin_off
        if self.peer_ack is not None and self.nseq is not None:
            ahead = self.offset(self.peer_ack) - self.next
            if 0 < ahead <= MAX_AHEAD:
                return self.next + ahead
        return self.next

    # -- segments -------------------------------------------------------

    def segment(self, seq: int, data: bytes, ts_us: int, truncated: bool) -> bool:
        """Place one segment's payload; False when it is too far off to be real."""
        if self.nseq is None:
            self.nseq = seq  # no SYN seen: the first captured byte is offset 0
        nxt = self.next
        off = self.offset(seq)
        if not -MAX_AHEAD <= off - nxt <= MAX_AHEAD:
            return False
        n = len(data)
        end = off + n
        if end <= nxt:
            if n == 0:
                if truncated and off == nxt:
                    self.snap_end = nxt
            elif not (n == 1 and end == nxt):  # a one-byte keepalive is not a retransmission
                self._duplicate(off, data)
            return True
        if off < nxt:
            self._duplicate(off, data[: nxt - off])
            data = data[nxt - off :]
            off = nxt
        elif off > nxt and self.snap_end == nxt and (not self.ooo_offs or self.ooo_offs[0] >= off):
            self.gap(off - nxt, ts_us, GAP_SNAPLEN)  # the snaplen cut it: it will never come
            nxt = off
            if not data:  # cut to nothing: its own bytes are the next snaplen hole
                self.snap_end = off
                return True
        if off == nxt and not self.ooo_offs:
            self.deliver(off, data, ts_us, truncated)
        else:
            self._buffer(off, data, ts_us, truncated)
            self._drain(ts_us)
        return True

    def deliver(self, off: int, data: bytes, ts_us: int, truncated: bool) -> None:
        """Hand on bytes that start exactly at ``next`` (at ``ts_us``, or at the time of the bytes before when later)."""
        if ts_us < self.last_ts:
            ts_us = self.last_ts  # it waited in the out-of-order buffer for a later packet
        else:
            self.last_ts = ts_us
        n = len(data)
        self.next = off + n
        self.nseq = (cast(int, self.nseq) + n) & M32  # set: bytes are placed only after it is
        self.hist_offs.append(off)
        self.hist_data.append(data)
        self.hist_bytes += n
        if self.hist_bytes > self.hist_cap:
            self.trim_history()
        if self.head_open:
            self.take_head(data)
        if truncated:
            self.snap_end = self.next
        emit = self.emit  # read late: take_head may have switched it
        if emit is not None:
            emit(off, ts_us, data)

    def gap(self, length: int, ts_us: int, reason: str) -> None:
        off = self.next
        self.next = off + length
        self.nseq = (cast(int, self.nseq) + length) & M32  # set: a gap is only placed after it is
        self.missing += length
        emit_gap = self.emit_gap
        if emit_gap is not None:
            emit_gap(off, length, ts_us, reason)

    def flush(self, ts_us: int) -> None:
        """The connection is over: close every hole, deliver what is buffered, end the stream."""
        if self.nseq is None:
            return
        offs = self.ooo_offs
        while offs:
            if offs[0] > self.next:
                self.gap(offs[0] - self.next, ts_us, self._hole_reason())
                continue
            self._pop_deliver()
        end = self.stream_end_hint()
        if end > self.next:
            self.gap(end - self.next, ts_us, self._hole_reason())

    def take_head(self, data: bytes) -> None:
        head = self.head + data[: HEAD_BYTES - len(self.head)]
        self.head = head
        if len(head) >= 4:
            self.head_open = False
            on_head = self.on_head
            if on_head is not None:
                on_head(self)

    def trim_history(self) -> None:
        """Forget the oldest delivered chunks, down to half the cap (amortised)."""
        keep = self.hist_cap // 2
        data = self.hist_data
        total = self.hist_bytes
        cut = 0
        while total > keep and cut < len(data):
            total -= len(data[cut])
            cut += 1
        del self.hist_offs[:cut]
        del data[:cut]
        self.hist_bytes = total

    def discard(self) -> None:
        """Drop all buffered bytes and stop output (the connection was not selected)."""
        self.ooo_offs.clear()
        self.ooo_segs.clear()
        self.ooo_bytes = 0
        self.hist_offs.clear()
        self.hist_data.clear()
        self.hist_bytes = 0
        self.head_open = False
        self.on_head = self.emit = self.emit_gap = None

    # -- the slow paths ---------------------------------------------------

    def _hole_reason(self) -> str:
        return GAP_SNAPLEN if self.snap_end == self.next else GAP_MISSING

    def _duplicate(self, off: int, data: bytes) -> None:
        """Bytes that were already placed: count them, and count how many differ."""
        self.retransmitted += len(data)
        offs, hist = self.hist_offs, self.hist_data
        end = off + len(data)
        i = max(bisect_right(offs, off) - 1, 0)
        while i < len(offs) and offs[i] < end:
            self._compare(off, data, offs[i], hist[i])
            i += 1

    def _compare(self, off: int, data: bytes, first_off: int, first: bytes) -> None:
        lo = max(off, first_off)
        hi = min(off + len(data), first_off + len(first))
        if lo < hi:
            mine = data[lo - off : hi - off]
            theirs = first[lo - first_off : hi - first_off]
            if mine != theirs:
                self.conflicts += sum(x != y for x, y in zip(mine, theirs))

    def _buffer(self, off: int, data: bytes, ts_us: int, truncated: bool) -> None:
        """Keep the parts of a segment that no buffered segment covers (first copy wins)."""
        offs, segs = self.ooo_offs, self.ooo_segs
        end = off + len(data)
        i = bisect_right(offs, off) - 1
        if i < 0 or offs[i] + len(segs[i][0]) <= off:
            i += 1
        cur = off
        fresh: list[tuple[int, int]] = []
        while i < len(offs) and offs[i] < end:
            first_off, first = offs[i], segs[i][0]
            if first_off > cur:
                fresh.append((cur, first_off))
            overlap_lo = max(cur, first_off)
            overlap_hi = min(end, first_off + len(first))
            if overlap_lo < overlap_hi:
                self.retransmitted += overlap_hi - overlap_lo
                self._compare(off, data, first_off, first)
            cur = max(cur, first_off + len(first))
            i += 1
        if cur < end:
            fresh.append((cur, end))
        for lo, hi in fresh:
            piece = data if (lo == off and hi == end) else data[lo - off : hi - off]
            j = bisect_left(offs, lo)
            offs.insert(j, lo)
            segs.insert(j, (piece, ts_us, truncated and hi == end))
            self.ooo_bytes += hi - lo
            if lo > self.next:
                self.out_of_order += hi - lo

    def _drain(self, ts_us: int) -> None:
        """Deliver buffered segments that now start at ``next``; give up on holes that cannot fill."""
        offs = self.ooo_offs
        while offs:
            hole = offs[0] - self.next
            if hole > 0:
                if self.snap_end == self.next:  # the snaplen cut it: it will never come
                    self.gap(hole, ts_us, GAP_SNAPLEN)
                elif self.ooo_bytes > self.ooo_cap:
                    self.gap(hole, ts_us, GAP_OVERFLOW)
                else:
                    return
            self._pop_deliver()

    def _pop_deliver(self) -> None:
        off = self.ooo_offs.pop(0)
        data, ts_us, truncated = self.ooo_segs.pop(0)
        self.ooo_bytes -= len(data)
        self.deliver(off, data, ts_us, truncated)
