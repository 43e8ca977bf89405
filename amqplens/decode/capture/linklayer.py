"""Link-layer headers: where the IP packet starts inside a captured frame.

Every decoder has the shape ``(buf, off, end) -> (ip_version, l3_offset)``:
``ip_version`` is 4 or 6 for an IP packet starting at ``l3_offset``, 0 for
something that is not IP (ARP, LLC, ...), and the result is ``None`` when the
frame is too short for its own link header. Decoders are found through
``LINK_DECODERS`` by LINKTYPE number (the value in a pcap header or pcapng IDB).
"""

from __future__ import annotations

import struct

LINKTYPE_NULL = 0  # BSD loopback: 4-byte address family in the capturing host's byte order
LINKTYPE_ETHERNET = 1
LINKTYPE_DLT_RAW_12 = 12  # DLT_RAW as written by most BSDs/Linux before LINKTYPE_RAW existed
LINKTYPE_DLT_RAW_14 = 14  # DLT_RAW as written by OpenBSD
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108  # OpenBSD loopback: address family in network byte order
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# 802.1Q, 802.1ad (QinQ outer tag) and the pre-standard 0x9100 outer tag.
VLAN_ETHERTYPES = frozenset((0x8100, 0x88A8, 0x9100))
# More stacked tags than this is not a real frame; stop rather than walk the payload.
MAX_VLAN_TAGS = 8

# BSD address family values for IPv6 differ by OS (NetBSD/OpenBSD 24, FreeBSD 28,
# Darwin 30); Linux's 10 shows up in captures written from Linux "any" tunnels.
AF_INET = 2
AF_INET6_VALUES = frozenset((10, 24, 28, 30))

_U16 = struct.Struct(">H")
_U32_BE = struct.Struct(">I")
_U32_LE = struct.Struct("<I")

_ETHERTYPE_TO_IP = {ETHERTYPE_IPV4: 4, ETHERTYPE_IPV6: 6}


def _after_ethertype(buf, off: int, end: int, ethertype: int):
    """Follow VLAN tags from an ethertype whose payload starts at ``off``."""
    tags = 0
    while ethertype in VLAN_ETHERTYPES:
        tags += 1
        if tags > MAX_VLAN_TAGS or off + 4 > end:
            return None
        ethertype = _U16.unpack_from(buf, off + 2)[0]
        off += 4
    return _ETHERTYPE_TO_IP.get(ethertype, 0), off


def ethernet(buf, off: int, end: int):
    if off + 14 > end:
        return None
    ethertype = _U16.unpack_from(buf, off + 12)[0]
    if ethertype == ETHERTYPE_IPV4:  # the common case, without the VLAN walk
        return 4, off + 14
    return _after_ethertype(buf, off + 14, end, ethertype)


def linux_sll(buf, off: int, end: int):
    if off + 16 > end:
        return None
    return _after_ethertype(buf, off + 16, end, _U16.unpack_from(buf, off + 14)[0])


def linux_sll2(buf, off: int, end: int):
    if off + 20 > end:
        return None
    return _after_ethertype(buf, off + 20, end, _U16.unpack_from(buf, off)[0])


def _family_to_ip(family: int) -> int:
    if family == AF_INET:
        return 4
    return 6 if family in AF_INET6_VALUES else 0


def bsd_null(buf, off: int, end: int):
    if off + 4 > end:
        return None
    family = _U32_LE.unpack_from(buf, off)[0]
    if family > 0xFFFF:  # written big-endian by the capturing host
        family = _U32_BE.unpack_from(buf, off)[0]
    return _family_to_ip(family), off + 4


def openbsd_loop(buf, off: int, end: int):
    if off + 4 > end:
        return None
    return _family_to_ip(_U32_BE.unpack_from(buf, off)[0]), off + 4


def raw_ip(buf, off: int, end: int):
    if off >= end:
        return None
    version = buf[off] >> 4
    return (version if version in (4, 6) else 0), off


def ipv4_only(buf, off: int, end: int):
    return (4, off) if off < end else None


def ipv6_only(buf, off: int, end: int):
    return (6, off) if off < end else None


LINK_DECODERS = {
    LINKTYPE_NULL: bsd_null,
    LINKTYPE_ETHERNET: ethernet,
    LINKTYPE_DLT_RAW_12: raw_ip,
    LINKTYPE_DLT_RAW_14: raw_ip,
    LINKTYPE_RAW: raw_ip,
    LINKTYPE_LOOP: openbsd_loop,
    LINKTYPE_LINUX_SLL: linux_sll,
    LINKTYPE_IPV4: ipv4_only,
    LINKTYPE_IPV6: ipv6_only,
    LINKTYPE_LINUX_SLL2: linux_sll2,
}
