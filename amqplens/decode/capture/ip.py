"""IPv4 and IPv6 headers, extension headers and fragment reassembly.

``ipv4_header``/``ipv6_header`` read one IP header from a captured frame and
return ``IpHeader`` or ``None`` when the header is cut short or impossible.
Fragments go to ``FragmentBuffer``, which reassembles datagrams within one
split in bounded memory.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

IPPROTO_TCP = 6
IPPROTO_FRAGMENT = 44
IPPROTO_AH = 51
IPPROTO_NONE = 59
# Extension headers shaped (next header, length in 8-octet units - 1): hop-by-hop,
# routing, destination options, mobility, HIP, shim6.
_EXT_8OCTET = frozenset((0, 43, 60, 135, 139, 140))
# A real packet carries a handful; a longer chain is a crafted or corrupt one.
MAX_EXT_HEADERS = 16
# No IP datagram (without jumbograms) is longer than this.
MAX_DATAGRAM = 65535 + 40

_IPV4 = struct.Struct(">BxHHHxB2x4s4s")  # ver/ihl, total length, id, flags/offset, proto, src, dst
_IPV6 = struct.Struct(">4xHB1x16s16s")  # payload length, next header, src, dst
_FRAG6 = struct.Struct(">BxHI")  # next header, offset/flags, identification


class Fragment(NamedTuple):
    key: tuple  # identifies the datagram: version, src, dst, (proto,) id
    offset: int  # byte offset of this fragment's data in the datagram's payload
    more: bool  # more fragments follow
    proto: int  # IPv4: the protocol; IPv6: next header after the fragment header


class IpHeader(NamedTuple):
    version: int
    src: bytes
    dst: bytes
    proto: int  # transport protocol (after IPv6 extension headers), or -1 if unknown
    l4_off: int  # where the transport header (or fragment data) starts
    ip_end: int  # where the IP length says the datagram ends (may lie beyond the capture)
    fragment: Fragment | None


def ipv4_header(buf, off: int, end: int) -> IpHeader | None:
    if off + 20 > end:
        return None
    ver_ihl, total_len, ident, flags_off, proto, src, dst = _IPV4.unpack_from(buf, off)
    ihl = (ver_ihl & 0x0F) * 4
    if ver_ihl >> 4 != 4 or ihl < 20 or off + ihl > end:
        return None
    if total_len == 0:  # TSO: the capturing host's NIC fills in the length later
        ip_end = end
    elif total_len < ihl:
        return None
    else:
        ip_end = off + total_len
    fragment = None
    if flags_off & 0x3FFF:  # MF set or a non-zero offset
        fragment = Fragment((4, src, dst, proto, ident), (flags_off & 0x1FFF) * 8, bool(flags_off & 0x2000), proto)
    return IpHeader(4, src, dst, proto, off + ihl, ip_end, fragment)


def ipv6_header(buf, off: int, end: int) -> IpHeader | None:
    if off + 40 > end:
        return None
    payload_len, next_header, src, dst = _IPV6.unpack_from(buf, off)
    if buf[off] >> 4 != 6:
        return None
    # A zero payload length means a jumbogram or TSO; trust the capture then.
    ip_end = off + 40 + payload_len if payload_len else end
    walked = walk_extension_headers(buf, next_header, off + 40, min(end, ip_end))
    if walked is None:
        return None
    proto, l4_off, frag = walked
    fragment = None
    if frag is not None:
        frag_next, frag_off, frag_id = frag
        fragment = Fragment((6, src, dst, frag_id), frag_off & 0xFFF8, bool(frag_off & 1), frag_next)
    return IpHeader(6, src, dst, proto, l4_off, ip_end, fragment)


def walk_extension_headers(buf, next_header: int, off: int, end: int):
    """Skip IPv6 extension headers: ``(proto, offset, fragment_fields | None)`` or None.

    Stops at a fragment header, since what follows it is fragment data.
    """
    for _ in range(MAX_EXT_HEADERS):
        if next_header in _EXT_8OCTET:
            if off + 2 > end:
                return None
            next_header, off = buf[off], off + (buf[off + 1] + 1) * 8
        elif next_header == IPPROTO_AH:
            if off + 2 > end:
                return None
            next_header, off = buf[off], off + (buf[off + 1] + 2) * 4
        elif next_header == IPPROTO_FRAGMENT:
            if off + 8 > end:
                return None
            return -1, off + 8, _FRAG6.unpack_from(buf, off)
        else:
            return (next_header, off, None) if off <= end else None
    return None


class _Datagram:
    __slots__ = ("pieces", "total", "records", "nbytes", "proto")

    def __init__(self, proto: int) -> None:
        self.pieces: list[tuple[int, int, bytes]] = []  # (offset, declared length, captured bytes)
        self.total: int | None = None
        self.records = 0
        self.nbytes = 0
        self.proto = proto


class FragmentBuffer:
    """Reassembles IP datagrams from fragments seen in one split, in bounded memory.

    When a limit is hit the oldest incomplete datagram is dropped; every
    fragment record of a datagram never completed is counted in
    ``unreassembled`` (also the ones still pending when the split ends,
    after ``close()``). Overlapping data: the fragment that arrived first wins.
    """

    def __init__(self, max_datagrams: int = 1024, max_bytes: int = 16 << 20) -> None:
        self.max_datagrams = max_datagrams
        self.max_bytes = max_bytes
        self.pending: dict[tuple, _Datagram] = {}
        self.nbytes = 0
        self.unreassembled = 0

    def add(self, frag: Fragment, data: bytes, declared_len: int):
        """Add one fragment; returns ``(proto, payload, truncated)`` when complete."""
        if frag.offset + declared_len > MAX_DATAGRAM:
            self.unreassembled += 1
            return None
        dgram = self.pending.get(frag.key)
        if dgram is None:
            while self.pending and (
                len(self.pending) >= self.max_datagrams or self.nbytes + len(data) > self.max_bytes
            ):
                self._drop(next(iter(self.pending)))  # the oldest
            dgram = self.pending[frag.key] = _Datagram(frag.proto)
        if frag.offset == 0:
            dgram.proto = frag.proto
        dgram.pieces.append((frag.offset, declared_len, data))
        dgram.records += 1
        dgram.nbytes += len(data)
        self.nbytes += len(data)
        if not frag.more:
            dgram.total = frag.offset + declared_len
        if dgram.total is None or not _covered(dgram.pieces, dgram.total):
            return None
        del self.pending[frag.key]
        self.nbytes -= dgram.nbytes
        payload, truncated = _assemble(dgram.pieces, dgram.total)
        return dgram.proto, payload, truncated

    def close(self) -> None:
        for key in list(self.pending):
            self._drop(key)

    def _drop(self, key: tuple) -> None:
        dgram = self.pending.pop(key)
        self.nbytes -= dgram.nbytes
        self.unreassembled += dgram.records


def _covered(pieces: list, total: int) -> bool:
    reach = 0
    for offset, length, _ in sorted(pieces, key=lambda p: p[0]):
        if offset > reach:
            return False
        reach = max(reach, offset + length)
    return reach >= total


def _assemble(pieces: list, total: int) -> tuple[bytes, bool]:
    out = bytearray(total)
    have = bytearray(total)  # 1 where captured bytes were placed
    for offset, _, data in reversed(pieces):  # earlier arrivals overwrite later ones
        data = data[: max(0, total - offset)]
        out[offset : offset + len(data)] = data
        have[offset : offset + len(data)] = b"\x01" * len(data)
    captured = have.find(0)
    if captured < 0:
        return bytes(out), False
    return bytes(out[:captured]), True
