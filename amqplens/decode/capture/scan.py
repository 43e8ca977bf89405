"""What both containers share: unaligned integer views for resynchronisation,
and the rule that decides where a split's walk over the records stops.

Ownership rule. Every split computes its first record the same way,
``resync(start)``: the first offset at or after ``start`` where a record is
plausible and the following records chain plausibly. A split walks records
from there and stops at the first record at or after ``resync(end)``, which
is exactly where the next split begins. So the walks of all splits join up
into the single-pass walk, even where a corrupt or truncated record keeps a
chain from validating just after a boundary: the previous split then reads
on until the next split's first record.
"""

from __future__ import annotations

import numpy as np

from amqplens.decode.capture.records import CaptureErrorRecord

# Resync judges candidate offsets a window at a time, vectorised. The first
# window is small since a record usually starts within one packet's length;
# windows then grow to the largest while a long corrupt stretch is crossed.
FIRST_WINDOW = 1 << 12
LARGEST_WINDOW = 1 << 20


def u32_at_every_offset(buf, lo: int, count: int, endian: str) -> np.ndarray:
    """``count`` unsigned 32-bit integers starting at ``lo``, ``lo+1``, ... (a view, no copy)."""
    return np.ndarray((count,), dtype=endian + "u4", buffer=buf, offset=lo, strides=(1,))


def windows(lo: int, hi: int):
    """Successive ``(start, count)`` scan windows covering ``[lo, hi)``."""
    size = FIRST_WINDOW
    while lo < hi:
        count = min(size, hi - lo)
        yield lo, count
        lo += count
        size = min(size * 4, LARGEST_WINDOW)


class SplitWalk:
    """Where one split's walk over the records starts and stops.

    ``begin`` is the first byte the split accounts for (0 for the first split,
    which owns the file header) and ``finished_at`` where its walk ended, so
    ``finished_at - begin`` over all splits sums to the file size.
    """

    __slots__ = ("start", "end", "resync", "stop", "begin", "finished_at")

    def __init__(self, start: int, end: int, resync) -> None:
        self.start, self.end, self.resync = start, end, resync
        self.stop: int | None = None
        self.begin = self.finished_at = start

    def first(self, first_record: int) -> int:
        """The split's first position: the first record for split 0, else ``resync(start)``."""
        pos = first_record if self.start == 0 else self.resync(self.start)
        self.begin = 0 if self.start == 0 else pos
        self.finished_at = max(self.begin, pos)
        return pos

    def reached(self, pos: int) -> bool:
        self.finished_at = pos
        if pos < self.end:
            return False
        if self.stop is None:
            self.stop = self.resync(self.end)
        return pos >= self.stop

    @property
    def bytes_walked(self) -> int:
        return max(0, self.finished_at - self.begin)


class ErrorLog:
    """Collects CaptureErrorRecords, keeping at most ``max_bytes`` raw bytes per row."""

    def __init__(self, buf, max_bytes: int) -> None:
        self.buf = buf
        self.max_bytes = max_bytes
        self.records: list[CaptureErrorRecord] = []

    def add(self, offset: int, length: int, reason: str, detail: str) -> None:
        raw = bytes(self.buf[offset : offset + min(length, self.max_bytes)]) if length > 0 else b""
        self.records.append(CaptureErrorRecord(offset, length, reason, detail, raw))
