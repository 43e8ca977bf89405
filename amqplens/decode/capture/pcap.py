"""The classic libpcap container: a 24-byte file header, then records.

Both byte orders, micro- and nanosecond magic. ``PcapFile`` knows the header
and how to judge a record header; ``iter_records`` walks one split's records
(see ``scan`` for the ownership rule) and reports container problems.
"""

from __future__ import annotations

import struct
from typing import cast

import numpy as np

from amqplens.decode.capture.scan import ErrorLog, SplitWalk, u32_at_every_offset, windows
from amqplens.decode.errors import CaptureFormatError, Truncated

FILE_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
MAGICS = {  # first four bytes -> (struct byte order, nanosecond timestamps)
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
# No link layer frame we decode is longer; bigger lengths mean a corrupt header.
MAX_RECORD_LEN = 16 << 20
# Record timestamps are judged against the file's clock (the median of its
# first few records, so one bogus first timestamp cannot mislead): from a day
# earlier (clock steps, multi-queue reordering) to ten years later.
TS_BEFORE = 86_400
TS_AFTER = 10 * 366 * 86_400
CLOCK_SAMPLE = 9
# Consecutive plausible record headers needed to trust a resync point.
CHAIN = 4


class PcapFile:
    """The file header of a pcap file and the plausibility test for its records."""

    def __init__(self, buf, size: int) -> None:
        if size < 4 or bytes(buf[:4]) not in MAGICS:
            raise CaptureFormatError("not a pcap file (bad magic)", offset=0)
        endian, self.nanos = MAGICS[bytes(buf[:4])]
        if size < FILE_HEADER_LEN:
            raise Truncated("pcap file header is cut short", needed=FILE_HEADER_LEN - size, offset=0)
        self.endian = endian
        major, _minor, _zone, _sigfigs, snaplen, linktype = struct.unpack_from(endian + "HHiIII", buf, 4)
        if major != 2:
            raise CaptureFormatError(f"unsupported pcap version {major}", offset=4)
        self.snaplen = snaplen
        self.linktype = linktype & 0xFFFF  # upper bits carry FCS information
        self.max_caplen = MAX_RECORD_LEN
        self.frac_limit = 1_000_000_000 if self.nanos else 1_000_000
        self.record = struct.Struct(endian + "IIII")
        self.buf, self.size = buf, size
        if 0 < snaplen < MAX_RECORD_LEN and not self._first_record_beyond(snaplen):
            self.max_caplen = snaplen
        self.ts_lo = self.ts_hi = None
        clock = self._file_clock()
        if clock is not None:
            self.ts_lo, self.ts_hi = clock - TS_BEFORE, clock + TS_AFTER

    def _first_record_beyond(self, snaplen: int) -> bool:
        """The file's first record is longer than the header's snaplen and it starts a chain of framed records: the
        header's snaplen is wrong (a flipped bit, a tool that wrote it wrong), not the records, which libpcap and
        Wireshark read whole; it must not make every record a corrupt header (seen: snaplen 1, the capture failed)."""
        if FILE_HEADER_LEN + RECORD_HEADER_LEN > self.size:
            return False
        if self.record.unpack_from(self.buf, FILE_HEADER_LEN)[2] <= snaplen:
            return False
        pos = FILE_HEADER_LEN
        for _ in range(CHAIN):
            if pos == self.size:
                return True
            if pos + RECORD_HEADER_LEN > self.size:
                return False
            fields = self.record.unpack_from(self.buf, pos)
            if not self.framed(*fields):
                return False
            pos += RECORD_HEADER_LEN + fields[2]
        return pos <= self.size

    def _file_clock(self) -> int | None:
        seconds: list[int]
        seconds, pos = [], FILE_HEADER_LEN
        while len(seconds) < CLOCK_SAMPLE and pos + RECORD_HEADER_LEN <= self.size:
            fields = self.record.unpack_from(self.buf, pos)
            if not self.framed(*fields):
                break
            seconds.append(fields[0])
            pos += RECORD_HEADER_LEN + fields[2]
        return sorted(seconds)[len(seconds) // 2] if seconds else None

    def framed(self, sec: int, frac: int, caplen: int, origlen: int) -> bool:
        """The header can frame a record. No frame on a wire has length 0, and a run
        of zero bytes would otherwise frame endlessly."""
        if frac >= self.frac_limit or caplen > self.max_caplen:
            return False
        return 0 < origlen <= MAX_RECORD_LEN and caplen <= origlen

    def timely(self, sec: int) -> bool:
        return self.ts_lo is None or self.ts_lo <= sec <= cast(int, self.ts_hi)  # set with ts_lo

    def plausible(self, sec: int, frac: int, caplen: int, origlen: int) -> bool:
        """Framed and timely: what every header of a resync chain must be."""
        return self.framed(sec, frac, caplen, origlen) and self.timely(sec)

    def believable(self, pos: int, sec: int, caplen: int) -> bool:
        """What a sequential read demands beyond framing: a timely clock, or else a
        framed record right after (a clock that jumped is still a record; garbage
        that happens to frame rarely has a framed successor)."""
        if self.timely(sec):
            return True
        nxt = pos + RECORD_HEADER_LEN + caplen
        if nxt == self.size:
            return True
        if nxt + RECORD_HEADER_LEN > self.size:
            return False
        fields = self.record.unpack_from(self.buf, nxt)
        return self.framed(*fields) and nxt + RECORD_HEADER_LEN + fields[2] <= self.size

    def chain_ok(self, pos: int) -> bool:
        """A run of CHAIN plausible record headers from ``pos``, or one that ends exactly at EOF."""
        buf, size, record = self.buf, self.size, self.record
        for _ in range(CHAIN):
            if pos == size:
                return True
            if pos + RECORD_HEADER_LEN > size:
                return False
            fields = record.unpack_from(buf, pos)
            if not self.plausible(*fields):
                return False
            pos += RECORD_HEADER_LEN + fields[2]
            if pos > size:
                return False
        return True

    def resync(self, pos: int) -> int:
        """The first offset >= ``pos`` where a trustworthy chain of records starts, else EOF."""
        pos = max(pos, FILE_HEADER_LEN)
        last = self.size - RECORD_HEADER_LEN  # last offset a whole record header fits at
        for lo, count in windows(pos, last + 1):
            for cand in self._candidates(lo, count):
                if self.chain_ok(cand):
                    return cand
        return self.size

    def _candidates(self, lo: int, count: int):
        e = self.endian
        sec = u32_at_every_offset(self.buf, lo, count, e)
        frac = u32_at_every_offset(self.buf, lo + 4, count, e)
        caplen = u32_at_every_offset(self.buf, lo + 8, count, e)
        origlen = u32_at_every_offset(self.buf, lo + 12, count, e)
        ok = (frac < self.frac_limit) & (caplen <= self.max_caplen)
        ok &= (caplen <= origlen) & (origlen <= MAX_RECORD_LEN) & (origlen > 0)
        if self.ts_lo is not None:
            ok &= (sec >= max(self.ts_lo, 0)) & (sec <= min(cast(int, self.ts_hi), 0xFFFFFFFF))  # set with ts_lo
        return (np.flatnonzero(ok) + lo).tolist()


def iter_records(pf: PcapFile, walk: SplitWalk, errors: ErrorLog):
    """Yield ``(record_offset, linktype, ts_us, data_offset, caplen, origlen)`` for one split's walk.

    A header that cannot frame a record is either corrupt itself or was
    reached through a wrong length in the record before it (bytes lost or
    added inside that record). So the resync starts just after the previous
    record's start, not after the bad header: that finds the true next record
    in both cases, as a split boundary falling there would.
    """
    buf, size, record = pf.buf, pf.size, pf.record.unpack_from
    framed, believable, resync = pf.framed, pf.believable, pf.resync
    div = 1000 if pf.nanos else 1
    linktype = pf.linktype
    ts_lo, ts_hi = (pf.ts_lo, pf.ts_hi) if pf.ts_lo is not None else (0, 1 << 32)
    pos = walk.first(FILE_HEADER_LEN)
    previous = None
    while pos < size:
        whole_header = pos + RECORD_HEADER_LEN <= size
        good = False
        if whole_header:
            sec, frac, caplen, origlen = record(buf, pos)
            data = pos + RECORD_HEADER_LEN
            good = (
                framed(sec, frac, caplen, origlen)
                and data + caplen <= size
                and (ts_lo <= sec <= ts_hi or believable(pos, sec, caplen))
            )
        # Past the next split's first record the walk stops, unless it overshot it
        # through a wrong length: then the bad header leads back to it, as in one pass.
        if walk.reached(pos) and (good or pos == walk.stop):
            break
        if good:
            yield pos, linktype, sec * 1_000_000 + frac // div, data, caplen, origlen
            previous, pos = pos, data + caplen
            continue
        nxt = resync(pos + 1 if previous is None else previous + 1)
        if nxt == size and (not whole_header or framed(sec, frac, caplen, origlen)):
            detail = "record runs past the end of the file" if whole_header else "record header cut short by EOF"
            errors.add(pos, size - pos, "truncated_record", detail)
            walk.finished_at = size
            return
        if nxt > pos:
            detail = f"skipped {nxt - pos} bytes to the next valid record"
        else:
            detail = f"the previous record's length was wrong; the next valid record starts {pos - nxt} bytes earlier"
        errors.add(pos, max(0, nxt - pos), "bad_record_header",
                   f"implausible record header (caplen={caplen}, origlen={origlen}, ts={sec}.{frac}); {detail}"
                   if whole_header else detail)  # fmt: skip
        pos = nxt
    walk.finished_at = pos
