"""Byte-range splits of a capture file and the reader that turns one split into packet batches.

``plan_splits`` cuts a file into ``[start, end)`` ranges; ``read_split`` reads
the records whose header starts in its range (see ``scan`` for how a split
finds its first record and where it stops) and yields PACKET_SCHEMA column
dicts. Container problems become ``CaptureErrorRecord``s, never exceptions.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import mmap
import os
from typing import Iterator

from amqplens.decode import clock
from amqplens.decode.capture import pcap, pcapng
from amqplens.decode.capture.linklayer import LINK_DECODERS
from amqplens.decode.capture.packets import PacketDecoder
from amqplens.decode.capture.records import CaptureErrorRecord, SplitStats
from amqplens.decode.capture.scan import ErrorLog, SplitWalk
from amqplens.decode.errors import DecodeError, Truncated

DEFAULT_SPLIT_SIZE = 128 << 20
# How far behind the read position the mapped pages are dropped from the process (see ``_Releaser``).
RELEASE_STEP = 8 << 20
# Records with an impossible time held back at the start of a split until a good time arrives (each is a
# tuple of offsets, the bytes stay in the file); past this many, they take the range's first instant.
HOLD_RECORDS = 1024
# How far before a split its first records' neighbours are first looked for (widened until found).
BACK_BYTES = 64 << 10


def sniff_format(path: str | os.PathLike) -> str | None:
    """``"pcap"``, ``"pcapng"`` or ``None`` from the first bytes of the file."""
    with open(path, "rb") as f:
        return sniff_head(f.read(12))


def sniff_head(head: bytes) -> str | None:
    """``"pcap"``, ``"pcapng"`` or ``None`` from a file's first bytes (12 are enough)."""
    if head[:4] in pcap.MAGICS:
        return "pcap"
    if head[:4] == pcapng.SHB_MAGIC and head[8:12] in pcapng.BOMS:
        return "pcapng"
    return None


def plan_splits(path: str | os.PathLike, split_size: int = DEFAULT_SPLIT_SIZE) -> list[tuple[int, int]]:
    """Byte ranges covering the file; an empty file still gets one (empty) split to report it."""
    if split_size <= 0:
        raise ValueError("split_size must be positive")
    size = os.path.getsize(path)
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + split_size, size)) for start in range(0, size, split_size)]


def read_split(
    path: str | os.PathLike,
    capture_id: str,
    start: int,
    end: int,
    *,
    batch_rows: int = 8192,
    max_error_bytes: int = 4096,
) -> SplitResult:
    """Packets of one split as an iterable of column dicts; ``stats``/``errors`` once iterated."""
    return SplitResult(path, capture_id, start, end, batch_rows=batch_rows, max_error_bytes=max_error_bytes)


def read_capture(path: str | os.PathLike, capture_id: str, **kwargs) -> SplitResult:
    """The whole file as one split (a single pass)."""
    return read_split(path, capture_id, 0, max(os.path.getsize(path), 1), **kwargs)


class SplitResult:
    """Iterate for batches; afterwards ``stats`` and ``errors`` describe the split."""

    def __init__(self, path, capture_id: str, start: int, end: int, *, batch_rows: int, max_error_bytes: int):
        self.path, self.capture_id, self.start, self.end = path, capture_id, start, end
        self.batch_rows, self.max_error_bytes = batch_rows, max_error_bytes
        self.stats = SplitStats()
        self.errors: list[CaptureErrorRecord] = []

    def __iter__(self) -> Iterator[dict[str, list]]:
        self.errors = []
        with _mapped(self.path) as (buf, size):
            self.stats = SplitStats(format=sniff_head(bytes(buf[:12])))
            log = ErrorLog(buf, self.max_error_bytes)
            try:
                yield from self._read(buf, size, log)
            finally:
                self.errors = log.records

    def _read(self, buf, size: int, log: ErrorLog) -> Iterator[dict[str, list]]:
        first_split = self.start == 0
        if self.stats.format is None:
            if first_split:
                if size == 0:
                    log.add(0, 0, "empty_file", "the file is empty")
                else:
                    detail = "the file starts with neither a pcap magic nor a pcapng section header"
                    log.add(0, size, "not_a_capture", detail)
            return
        try:
            container = pcap.PcapFile(buf, size) if self.stats.format == "pcap" else pcapng.PcapngFile(buf, size)
        except DecodeError as exc:
            if first_split:
                reason = "truncated_file_header" if isinstance(exc, Truncated) else "bad_file_header"
                log.add(0, min(size, 64), reason, str(exc))
            return
        walk = SplitWalk(self.start, self.end, container.resync)
        if isinstance(container, pcap.PcapFile):
            records = pcap.iter_records(container, walk, log)
            if first_split and container.linktype not in LINK_DECODERS:
                detail = f"link type {container.linktype} is not one the reader decodes; packets are counted, not decoded"
                log.add(0, pcap.FILE_HEADER_LEN, "unknown_link_type", detail)
        else:
            records = pcapng.iter_records(container, walk, log)
        records = guard_timestamps(records, log, lambda: _times_after(container, walk, buf),
                                   lambda: _times_before(container, walk, buf))
        yield from self._decode(records, buf, log)
        self.stats.bytes_read = walk.bytes_walked

    def _decode(self, records, buf, log: ErrorLog) -> Iterator[dict[str, list]]:
        stats = self.stats
        decoder = PacketDecoder(self.capture_id, stats)
        add, batch_rows = decoder.add, self.batch_rows
        release = _Releaser(buf)
        first_ts = last_ts = None
        count, linktype_seen = 0, None
        offset = -1
        try:
            for offset, linktype, ts_us, data, caplen, origlen in records:
                add(offset, linktype, ts_us, buf, data, caplen, origlen)
                count += 1
                if linktype != linktype_seen:
                    linktype_seen = linktype
                    if linktype >= 0:
                        stats.link_types.add(linktype)
                if first_ts is None or ts_us < first_ts:
                    first_ts = ts_us
                if last_ts is None or ts_us > last_ts:
                    last_ts = ts_us
                if decoder.rows >= batch_rows:
                    yield decoder.take()
                    release(offset)
        except Exception as exc:  # a reader bug must not fail the task; the row says where
            log.add(max(offset, 0), 0, "reader_error", f"{type(exc).__name__}: {exc} (after record at {offset})")
        decoder.fragments.close()
        stats.records = count
        stats.first_ts_us, stats.last_ts_us = first_ts, last_ts
        stats.ip_fragments_unreassembled = decoder.fragments.unreassembled
        if decoder.rows:
            yield decoder.take()


def guard_timestamps(records, log: ErrorLog, times_after=lambda: [], times_before=lambda: []):
    """The records with every time inside ``clock``'s range and in line with its neighbours.

    A record whose header claims a time outside (a flipped bit, 2^64 - 1 ns, before 1990) is one
    ``ts_out_of_range`` row, one whose time is in range but out of line with the records around it
    (``clock.out_of_line``: a lone time a day or more from each neighbour, say four years in a capture of
    seconds) one ``ts_out_of_line`` row; both, like a record with no time at all (``None``: a pcapng SPB),
    take the time of the next record with a good one, so they keep their place in the (flow, time, offset)
    order and the capture's first/last times, its connections' start and end and the metric buckets stay
    true. Always the next one, never the previous: at the end of a split ``times_after()`` reads the
    records after it (and ``times_before()`` those before it, for the neighbours of its first records), so
    every split cut gives the single pass's times. Past ``HOLD_RECORDS`` bad records in a row, they take the
    last good time.
    """
    held: list[tuple]
    held, last = [], None
    judged = _Judged(times_before, times_after)
    for rec, verdict in judged.run(records):
        if verdict is None:
            ts_us = rec[2]
            yield from _with_time(held, ts_us)
            held.clear()
            last = ts_us
            yield rec
            continue
        if verdict == clock.TS_OUT_OF_LINE:
            log.add(rec[0], 0, verdict, clock.out_of_line_detail(rec[2]) + "; the packet takes the next record's time")
        elif rec[2] is not None:
            log.add(rec[0], 0, verdict,
                    clock.out_of_range_detail(rec[2], "record time") + "; the packet takes the next record's time")
        held.append(rec)
        if len(held) >= HOLD_RECORDS:
            yield from _with_time(held, clock.MIN_TS_US if last is None else last)
            held.clear()
    if held:
        after = judged.good_after()
        yield from _with_time(held, after if after is not None else clock.MIN_TS_US if last is None else last)


class _Judged:
    """Each record with its verdict (None: a good time; else the decode_errors reason), in order.

    A record is judged once ``clock.NEIGHBOURS`` in-range times follow it (or the records end: then the times
    after the split, read once); the records behind it wait, at most that many plus a run of out-of-range ones.
    """

    def __init__(self, times_before, times_after) -> None:
        self.times_before, self.times_after = times_before, times_after
        self.before: collections.deque = collections.deque(maxlen=clock.NEIGHBOURS)
        self.seeded = False
        self.after: list[int] | None = None

    def _verdict(self, ts, following, complete: bool):
        if not clock.in_range(ts):
            return clock.TS_OUT_OF_RANGE
        if not self.seeded and not (self.before and abs(ts - self.before[-1]) <= clock.OUT_OF_LINE_US):
            # the times before the split, read only when a record's nearest one does not settle it
            self.seeded = True
            if len(self.before) < clock.NEIGHBOURS:
                self.before = collections.deque([*self.times_before(), *self.before], maxlen=clock.NEIGHBOURS)
        out = clock.out_of_line(ts, self.before, following, complete=complete)
        return None if out is None else (clock.TS_OUT_OF_LINE if out else False)

    def run(self, records) -> Iterator[tuple]:
        waiting: collections.deque = collections.deque()
        in_range, near = clock.in_range, clock.OUT_OF_LINE_US
        for rec in records:
            ts = rec[2]
            if not waiting and self.before and in_range(ts) and abs(ts - self.before[-1]) <= near:
                self.before.append(ts)  # the common case, settled at once: close to the record before
                yield rec, None
                continue
            waiting.append(rec)
            yield from self._settle(waiting, complete=False)
        if waiting:
            yield from self._settle(waiting, complete=True)

    def _settle(self, waiting: collections.deque, *, complete: bool) -> Iterator[tuple]:
        while waiting:
            rec = waiting[0]
            following = [r[2] for r in itertools.islice(waiting, 1, None) if clock.in_range(r[2])][:clock.NEIGHBOURS]
            if complete:  # the times after the split, 2 * NEIGHBOURS + 1 of them unless the file ends first
                following = (following + self._after())[:clock.NEIGHBOURS]
            verdict = self._verdict(rec[2], following, complete)
            if verdict is None:
                return
            waiting.popleft()
            if clock.in_range(rec[2]):
                self.before.append(rec[2])
            yield rec, (verdict or None)

    def _after(self) -> list[int]:
        if self.after is None:
            self.after = list(self.times_after())
        return self.after

    def good_after(self) -> int | None:
        """The first good time after the split (judged as that record's own split judges it), else None."""
        after = self._after()
        for i, ts in enumerate(after):
            nxt = after[i + 1 : i + 1 + clock.NEIGHBOURS]
            if not clock.out_of_line(ts, self.before, nxt, complete=True):
                return ts
            self.before.append(ts)
        return None


def _with_time(records, ts_us: int):
    for rec in records:
        yield (rec[0], rec[1], ts_us, *rec[3:])


def _times_after(container, walk: SplitWalk, buf) -> list[int]:
    """The in-range times of the records after the split ``walk`` went over (its errors are the next split's): enough
    to judge the first good one (``2 * NEIGHBOURS + 1``), among at most ``HOLD_RECORDS`` records."""
    size = container.size
    if walk.finished_at >= size:
        return []
    later = SplitWalk(walk.finished_at, size, container.resync)
    reader = pcap.iter_records if isinstance(container, pcap.PcapFile) else pcapng.iter_records
    times = []
    for rec in itertools.islice(reader(container, later, ErrorLog(buf, 0)), HOLD_RECORDS):
        if clock.in_range(rec[2]):
            times.append(rec[2])
            if len(times) > 2 * clock.NEIGHBOURS:
                break
    return times


def _times_before(container, walk: SplitWalk, buf) -> list[int]:
    """The in-range times of the last ``NEIGHBOURS`` records before the split's first one (none for the first split):
    the walk of a range that ends where the split begins, widened until it holds that many or starts the file."""
    if walk.start == 0:
        return []
    reader = pcap.iter_records if isinstance(container, pcap.PcapFile) else pcapng.iter_records
    back = BACK_BYTES
    while True:
        lo = max(0, walk.begin - back)
        times = [rec[2] for rec in reader(container, SplitWalk(lo, walk.begin, container.resync), ErrorLog(buf, 0))
                 if clock.in_range(rec[2])]
        if len(times) >= clock.NEIGHBOURS or lo == 0:
            return times[-clock.NEIGHBOURS:]
        back *= 4


class _Releaser:
    """Drops the mapped pages the reader has passed from this process's resident set.

    The split is read through a shared read-only mapping of the file, and every
    page it touches stays resident (and counted in the worker's RSS) until the
    mapping closes: a 128 MB split would hold 128 MB. ``MADV_DONTNEED`` unmaps
    the pages behind the read position (the page cache keeps them; a later
    access, say an IP fragment kept for reassembly, faults them back in from
    the file with the same bytes), so resident capture bytes stay about
    ``RELEASE_STEP`` wide whatever the split size.
    """

    def __init__(self, buf):
        self.madvise = getattr(buf, "madvise", None) if hasattr(mmap, "MADV_DONTNEED") else None
        self.done = 0

    def __call__(self, offset: int) -> None:
        upto = offset - offset % mmap.PAGESIZE
        if self.madvise is None or upto - self.done < RELEASE_STEP:
            return
        with contextlib.suppress(OSError, ValueError):
            self.madvise(mmap.MADV_DONTNEED, self.done, upto - self.done)
        self.done = upto


@contextlib.contextmanager
def _mapped(path):
    """The file as a read-only buffer: an mmap, or bytes where mapping is impossible."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b"", 0
            return
        try:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            data = f.read()
            yield data, len(data)
            return
        try:
            yield mapped, size
        finally:
            with contextlib.suppress(BufferError):
                mapped.close()
