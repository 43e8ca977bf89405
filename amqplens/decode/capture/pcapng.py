"""The pcapng container: sections of blocks, each block framed by its length twice.

Sections (SHB) set the byte order and start a fresh interface list; IDBs
give each interface its link type, snaplen and timestamp resolution/offset;
packets come in EPBs, SPBs (interface 0, no timestamp) and obsolete PBs.
Other block types are skipped. ``iter_records`` walks one split (see ``scan``
for the ownership rule); a split that starts mid-file first finds its section
and the interfaces defined before its first block.
"""

from __future__ import annotations

import struct
from typing import cast

import numpy as np

from amqplens.decode.capture.linklayer import LINK_DECODERS
from amqplens.decode.capture.scan import ErrorLog, SplitWalk, u32_at_every_offset, windows
from amqplens.decode.errors import CaptureFormatError, Truncated

SHB_MAGIC = b"\x0a\x0d\x0d\x0a"  # the same in both byte orders
SHB, IDB, PB, SPB, NRB, ISB, EPB, JOURNAL, DSB = 0x0A0D0D0A, 1, 2, 3, 4, 5, 6, 9, 10
CUSTOM, CUSTOM_NOCOPY = 0x00000BAD, 0x40000BAD
BOMS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
# Smallest legal total length of each block type we know; resync trusts only these.
MIN_BLOCK_LEN = {
    SHB: 28, IDB: 20, PB: 32, SPB: 16, NRB: 12, ISB: 24, EPB: 32, JOURNAL: 12, DSB: 20, CUSTOM: 16, CUSTOM_NOCOPY: 16,
}  # fmt: skip
# A block holds at most one packet; anything longer is a corrupt length.
MAX_BLOCK_LEN = 32 << 20
# Consecutive plausible blocks needed to trust a resync point.
CHAIN = 3
# No capture has this many interfaces. The bound matters: blocks of one byte
# order with small fields also chain, 3 bytes on, when read in the other order,
# but then the interface id is made of timestamp bytes and is huge.
MAX_INTERFACES = 1 << 16
PACKET_BLOCKS = frozenset((EPB, SPB, PB))
NO_LINKTYPE = -1  # a packet on an interface no IDB defined

OPT_END, OPT_IF_TSRESOL, OPT_IF_TSOFFSET = 0, 9, 14


class Interface:
    """One IDB: link type, snaplen and the timestamp conversion to microseconds."""

    __slots__ = ("linktype", "snaplen", "mul", "shift", "div", "offset_us")

    def __init__(self, linktype: int, snaplen: int, tsresol: int = 6, tsoffset: int = 0) -> None:
        self.linktype, self.snaplen = linktype, snaplen
        exponent = tsresol & 0x7F
        self.mul, self.shift, self.div = 1, 0, 1
        if tsresol & 0x80:  # units of 2**-exponent seconds
            self.mul, self.shift = 1_000_000, exponent
        elif exponent <= 6:
            self.mul = 10 ** (6 - exponent)
        else:
            self.div = 10 ** (exponent - 6)
        self.offset_us = tsoffset * 1_000_000

    def ts_us(self, units: int) -> int:
        """Any time the block says, as a Python int (2^64 - 1 units included): ``splits.guard_timestamps``
        turns one outside ``clock``'s range into an error row before it reaches an int64 column."""
        return ((units * self.mul) >> self.shift) // self.div + self.offset_us


class Section:
    """One SHB: byte order, the structs to read its blocks, and its interfaces so far."""

    def __init__(self, offset: int, endian: str, block_len: int) -> None:
        self.offset, self.endian, self.block_len = offset, endian, block_len
        self.header = struct.Struct(endian + "II")
        self.u32 = struct.Struct(endian + "I")
        self.epb = struct.Struct(endian + "IIIII")
        self.pb = struct.Struct(endian + "HHIIII")
        self.interfaces: list[Interface] = []
        # False while a split that began mid-section knows only the leading IDBs.
        self.complete = True


class PcapngFile:
    def __init__(self, buf, size: int) -> None:
        if size < 4 or bytes(buf[:4]) != SHB_MAGIC:
            raise CaptureFormatError("not a pcapng file (no section header block)", offset=0)
        if size < MIN_BLOCK_LEN[SHB]:
            raise Truncated("pcapng section header block is cut short", needed=MIN_BLOCK_LEN[SHB] - size, offset=0)
        self.buf, self.size = buf, size
        if self.section_at(0) is None:
            raise CaptureFormatError("pcapng section header has a bad byte-order magic or version", offset=8)

    def section_at(self, pos: int) -> Section | None:
        """The SHB at ``pos`` (its block length may still be bad: see ``block_len``)."""
        buf = self.buf
        if pos + MIN_BLOCK_LEN[SHB] > self.size or bytes(buf[pos : pos + 4]) != SHB_MAGIC:
            return None
        endian = BOMS.get(bytes(buf[pos + 8 : pos + 12]))
        if endian is None or struct.unpack_from(endian + "H", buf, pos + 12)[0] != 1:
            return None
        return Section(pos, endian, struct.unpack_from(endian + "I", buf, pos + 4)[0])

    def block_len(self, pos: int, endian: str) -> tuple[int, str]:
        """``(total length, byte order)`` of a plausible known block at ``pos``; length 0 if none."""
        buf, size = self.buf, self.size
        if pos + 12 > size:
            return 0, endian
        if bytes(buf[pos : pos + 4]) == SHB_MAGIC:
            section = self.section_at(pos)
            if section is None:
                return 0, endian
            endian = section.endian
        btype, blen = struct.unpack_from(endian + "II", buf, pos)
        minimum = MIN_BLOCK_LEN.get(btype)
        if minimum is None or blen < minimum or blen % 4 or blen > MAX_BLOCK_LEN or pos + blen > size:
            return 0, endian
        if struct.unpack_from(endian + "I", buf, pos + blen - 4)[0] != blen:
            return 0, endian
        if btype in (EPB, PB) and struct.unpack_from(endian + "I", buf, pos + 20)[0] > blen - 32:
            return 0, endian
        if btype in (EPB, ISB) and struct.unpack_from(endian + "I", buf, pos + 8)[0] >= MAX_INTERFACES:
            return 0, endian
        return blen, endian

    def chain_ok(self, pos: int, endian: str) -> bool:
        for _ in range(CHAIN):
            if pos == self.size:
                return True
            blen, endian = self.block_len(pos, endian)
            if not blen:
                return False
            pos += blen
        return True

    def resync(self, pos: int) -> int:
        """The first offset >= ``pos`` where a chain of plausible blocks starts (either byte order), else EOF."""
        pos = max(pos, 0)
        for lo, count in windows(pos, self.size - 11):
            for cand, endian in self._candidates(lo, count):
                if self.chain_ok(cand, endian):
                    return cand
        return self.size

    def _candidates(self, lo: int, count: int) -> list[tuple[int, str]]:
        found: list[tuple[int, str]] = []
        for endian in "<>":
            btype = u32_at_every_offset(self.buf, lo, count, endian)
            blen = u32_at_every_offset(self.buf, lo + 4, count, endian)
            # Block types 1..10 (a superset of the small ones we know; block_len refines), custom, SHB.
            known = (btype - np.uint32(1) < 10) | (btype == CUSTOM) | (btype == CUSTOM_NOCOPY) | (btype == SHB)
            ok = known & (blen % 4 == 0) & (blen >= 12) & (blen <= MAX_BLOCK_LEN)
            found.extend((int(i) + lo, endian) for i in np.flatnonzero(ok))
        found.sort()
        return found

    def find_section(self, pos: int) -> Section:
        """The section a block at ``pos`` belongs to: the nearest valid SHB at or before it."""
        hi = pos + 4
        while True:
            shb = self.buf.rfind(SHB_MAGIC, 0, hi)
            if shb <= 0:
                return cast(Section, self.section_at(0))  # the constructor checked the SHB at 0
            section = self.section_at(shb)
            if section is not None:  # the test a sequential read applies to an SHB
                return section
            hi = shb + 3

    def framed_len(self, pos: int, section: Section) -> int:
        """Total length of the block at ``pos`` if its framing holds (any block type), else 0.

        What a sequential read demands of a block: a length that is a multiple
        of 4, fits in the file, and is repeated at the block's end.
        """
        if pos + 12 > self.size:
            return 0
        blen = section.u32.unpack_from(self.buf, pos + 4)[0]
        if blen < 12 or blen % 4 or pos + blen > self.size:
            return 0
        return blen if section.u32.unpack_from(self.buf, pos + blen - 4)[0] == blen else 0

    def learn_interfaces(self, section: Section, upto: int, *, all_blocks: bool) -> None:
        """Read the IDBs of ``section`` defined before ``upto``: by default only those
        before its first packet block (where writers put them), with ``all_blocks``
        every one (a header-only walk over the whole section so far, stepping over
        bad blocks the way a sequential read does)."""
        section.interfaces = []
        section.complete = all_blocks
        pos = section.offset
        while pos < upto:
            blen = self.framed_len(pos, section)
            if not blen:
                pos = self.resync(pos + 1)
                continue
            if pos != section.offset and bytes(self.buf[pos : pos + 4]) == SHB_MAGIC and self.section_at(pos):
                return
            btype = section.u32.unpack_from(self.buf, pos)[0]
            if btype == IDB and blen >= MIN_BLOCK_LEN[IDB]:
                section.interfaces.append(parse_idb(self.buf, pos, blen, section))
            elif btype in PACKET_BLOCKS and not all_blocks:
                return
            pos += blen


def parse_idb(buf, pos: int, blen: int, section: Section) -> Interface:
    linktype, _, snaplen = struct.unpack_from(section.endian + "HHI", buf, pos + 8)
    tsresol, tsoffset = 6, 0
    opt, end = pos + 16, pos + blen - 4
    while opt + 4 <= end:
        code, length = struct.unpack_from(section.endian + "HH", buf, opt)
        if code == OPT_END:
            break
        if code == OPT_IF_TSRESOL and length >= 1:
            tsresol = buf[opt + 4]
        elif code == OPT_IF_TSOFFSET and length >= 8:
            tsoffset = struct.unpack_from(section.endian + "q", buf, opt + 4)[0]
        opt += 4 + ((length + 3) & ~3)
    return Interface(linktype, snaplen, tsresol, tsoffset)


def iter_records(ng: PcapngFile, walk: SplitWalk, errors: ErrorLog):
    """Yield ``(block_offset, linktype, ts_us, data_offset, caplen, origlen)`` for one split's walk."""
    buf, size = ng.buf, ng.size
    pos = walk.first(0)
    section = cast(Section, ng.section_at(0)) if walk.start == 0 else ng.find_section(pos)  # 0: checked by PcapngFile
    if walk.start != 0:
        ng.learn_interfaces(section, pos, all_blocks=False)
    unknown: set[int] = set()  # interface ids already reported missing
    while pos < size and not walk.reached(pos):
        if pos + 12 > size:
            errors.add(pos, size - pos, "truncated_block", "the last block is cut short by the end of the file")
            pos = size
            break
        new_section = ng.section_at(pos) if bytes(buf[pos : pos + 4]) == SHB_MAGIC else None
        if new_section is not None:
            section, blen, btype = new_section, new_section.block_len, SHB
            unknown.clear()
        else:
            btype, blen = section.header.unpack_from(buf, pos)
        if not ng.framed_len(pos, section):
            nxt = _bad_block(ng, pos, blen, errors)
            if nxt < size and buf.find(SHB_MAGIC, pos + 1, nxt) >= 0:
                # The skip crossed a section header: take up the section as a split starting there would.
                section = ng.find_section(nxt)
                ng.learn_interfaces(section, nxt, all_blocks=False)
                unknown.clear()
            pos = nxt
            continue
        if blen < MIN_BLOCK_LEN.get(btype, 12):
            errors.add(pos, blen, "bad_block_length", f"block type {btype:#x} cannot be {blen} bytes long")
        elif btype == EPB or btype == PB:
            if btype == EPB:
                iface_id, ts_hi, ts_lo, caplen, origlen = section.epb.unpack_from(buf, pos + 8)
            else:
                iface_id, _drops, ts_hi, ts_lo, caplen, origlen = section.pb.unpack_from(buf, pos + 8)
            if caplen > blen - 32:
                detail = f"packet block claims {caplen} captured bytes in a {blen}-byte block"
                errors.add(pos, blen, "bad_packet_block", detail)
            else:
                iface = _interface(ng, section, iface_id, pos, errors, unknown)
                units = (ts_hi << 32) | ts_lo
                if iface is None:
                    yield pos, NO_LINKTYPE, units, pos + 28, caplen, origlen
                else:
                    yield pos, iface.linktype, iface.ts_us(units), pos + 28, caplen, origlen
        elif btype == SPB:
            iface = _interface(ng, section, 0, pos, errors, unknown)
            (origlen,) = section.u32.unpack_from(buf, pos + 8)
            caplen = min(origlen, blen - 16)
            if iface is not None and iface.snaplen:
                caplen = min(caplen, iface.snaplen)
            # An SPB carries no timestamp (Wireshark shows 0): None, and the packet takes its neighbour's time.
            yield pos, iface.linktype if iface is not None else NO_LINKTYPE, None, pos + 12, caplen, origlen
        elif btype == IDB:
            if not section.complete:  # its index depends on every IDB before it
                ng.learn_interfaces(section, pos, all_blocks=True)
            iface = parse_idb(buf, pos, blen, section)
            section.interfaces.append(iface)
            if iface.linktype not in LINK_DECODERS:
                errors.add(pos, blen, "unknown_link_type",
                           f"interface {len(section.interfaces) - 1} has link type {iface.linktype}, "
                           "which the reader does not decode; its packets are counted, not decoded")  # fmt: skip
        pos += blen
    walk.finished_at = pos


def _interface(ng: PcapngFile, section: Section, iface_id: int, pos: int, errors: ErrorLog, reported: set):
    """The interface a packet block names; reports a missing one once per split and section."""
    if iface_id >= len(section.interfaces) and not section.complete:
        # A split that began mid-section knows only the leading IDBs so far.
        ng.learn_interfaces(section, pos, all_blocks=True)
    if iface_id < len(section.interfaces):
        return section.interfaces[iface_id]
    if iface_id not in reported:
        reported.add(iface_id)
        detail = f"packet names interface {iface_id}, which no IDB in its section defines"
        errors.add(pos, 0, "unknown_interface", detail)
    return None


def _bad_block(ng: PcapngFile, pos: int, blen: int, errors: ErrorLog) -> int:
    """Report a block whose length is impossible and return where reading resumes."""
    nxt = ng.resync(pos + 1)
    if nxt == ng.size and 12 <= blen <= MAX_BLOCK_LEN and blen % 4 == 0 and pos + blen > ng.size:
        errors.add(pos, ng.size - pos, "truncated_block", f"block of {blen} bytes runs past the end of the file")
    else:
        errors.add(pos, nxt - pos, "bad_block_length",
                   f"block length {blen} is impossible or does not match its trailing copy; "
                   f"skipped {nxt - pos} bytes to the next valid block")  # fmt: skip
    return nxt
