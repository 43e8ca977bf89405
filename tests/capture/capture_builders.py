"""Byte-exact writers for pcap and pcapng files, for tests.

Independent of the reader under test: every field is packed here by hand
from the format documents, so a reader bug is not mirrored by a writer bug.
"""

from __future__ import annotations

import struct
from pathlib import Path

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D


def pcap_bytes(records, *, linktype: int = 1, endian: str = "<", nanos: bool = False, snaplen: int = 262144) -> bytes:
    """records: ``(ts_sec, ts_frac, data[, origlen])`` with frac in us (or ns when ``nanos``)."""
    out = [struct.pack(endian + "IHHiIII", PCAP_MAGIC_NS if nanos else PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, linktype)]
    for rec in records:
        sec, frac, data = rec[:3]
        origlen = rec[3] if len(rec) > 3 else len(data)
        out.append(struct.pack(endian + "IIII", sec, frac, len(data), origlen) + data)
    return b"".join(out)


def read_pcap_frames(path) -> list[tuple[int, int, bytes, int]]:
    """``(ts_sec, ts_frac, data, origlen)`` of a little-endian pcap (the fixtures tcpdump wrote)."""
    raw = Path(path).read_bytes()
    assert raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    pos, frames = 24, []
    while pos + 16 <= len(raw):
        sec, frac, caplen, origlen = struct.unpack_from("<IIII", raw, pos)
        frames.append((sec, frac, raw[pos + 16 : pos + 16 + caplen], origlen))
        pos += 16 + caplen
    return frames


def _pad(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 4)


def block(endian: str, btype: int, body: bytes) -> bytes:
    body = _pad(body)
    total = 12 + len(body)
    return struct.pack(endian + "II", btype, total) + body + struct.pack(endian + "I", total)


def option(endian: str, code: int, value: bytes) -> bytes:
    return struct.pack(endian + "HH", code, len(value)) + _pad(value)


def options(endian: str, *opts: bytes) -> bytes:
    return b"".join(opts) + struct.pack(endian + "HH", 0, 0) if opts else b""


def shb(endian: str = "<", *, comment: bytes | None = None) -> bytes:
    body = struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1)
    if comment is not None:
        body += options(endian, option(endian, 1, comment))
    return block(endian, 0x0A0D0D0A, body)


def idb(endian: str = "<", linktype: int = 1, snaplen: int = 262144, *, tsresol: int | None = None, tsoffset: int | None = None) -> bytes:
    opts = []
    if tsresol is not None:
        opts.append(option(endian, 9, bytes([tsresol])))
    if tsoffset is not None:
        opts.append(option(endian, 14, struct.pack(endian + "q", tsoffset)))
    return block(endian, 1, struct.pack(endian + "HHI", linktype, 0, snaplen) + options(endian, *opts))


def epb(endian: str, iface: int, ts_units: int, data: bytes, origlen: int | None = None) -> bytes:
    head = struct.pack(endian + "IIIII", iface, ts_units >> 32, ts_units & 0xFFFFFFFF, len(data), len(data) if origlen is None else origlen)
    return block(endian, 6, head + _pad(data))


def spb(endian: str, data: bytes, origlen: int | None = None) -> bytes:
    return block(endian, 3, struct.pack(endian + "I", len(data) if origlen is None else origlen) + _pad(data))


def obsolete_pb(endian: str, iface: int, ts_units: int, data: bytes, origlen: int | None = None) -> bytes:
    head = struct.pack(endian + "HHIIII", iface, 0, ts_units >> 32, ts_units & 0xFFFFFFFF, len(data), len(data) if origlen is None else origlen)
    return block(endian, 2, head + _pad(data))


def isb(endian: str, iface: int, ts_units: int) -> bytes:
    return block(endian, 5, struct.pack(endian + "III", iface, ts_units >> 32, ts_units & 0xFFFFFFFF))


def nrb(endian: str) -> bytes:
    record = struct.pack(endian + "HH", 1, 8) + bytes([127, 0, 0, 1]) + b"lo\x00\x00"
    return block(endian, 4, record + struct.pack(endian + "HH", 0, 0))


# ---- frames: link layers and IP variants built from a real IP packet ----

ETH_HEADER = bytes(6) + bytes.fromhex("020000000001")


def ethernet(ip: bytes, *, vlan_tags: tuple[tuple[int, int], ...] = ()) -> bytes:
    """An Ethernet frame with optional (tpid, vid) tags, outermost first."""
    ethertype = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
    tags = b"".join(struct.pack(">HH", tpid, vid) for tpid, vid in vlan_tags)
    return ETH_HEADER + tags + struct.pack(">H", ethertype) + ip


def ethertype_of(ip: bytes) -> int:
    return 0x0800 if ip[0] >> 4 == 4 else 0x86DD


def linux_sll(ip: bytes) -> bytes:
    return struct.pack(">HHH8sH", 0, 772, 6, bytes(8), ethertype_of(ip)) + ip


def linux_sll2(ip: bytes) -> bytes:
    return struct.pack(">HHIHBB8s", ethertype_of(ip), 0, 1, 772, 0, 6, bytes(8)) + ip


def bsd_null(ip: bytes, endian: str = "<", inet6: int = 24) -> bytes:
    return struct.pack(endian + "I", 2 if ip[0] >> 4 == 4 else inet6) + ip


def openbsd_loop(ip: bytes) -> bytes:
    return struct.pack(">I", 2 if ip[0] >> 4 == 4 else 24) + ip


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_with(header: bytes, payload: bytes, *, options: bytes = b"", flags_offset: int | None = None) -> bytes:
    """Rebuild an IPv4 header (from a real one) with new options, fragment field and payload."""
    ihl = 5 + len(options) // 4
    fields = bytearray(header[:20] + options)
    fields[0] = 0x40 | ihl
    struct.pack_into(">H", fields, 2, len(fields) + len(payload))
    if flags_offset is not None:
        struct.pack_into(">H", fields, 6, flags_offset)
    struct.pack_into(">H", fields, 10, 0)
    struct.pack_into(">H", fields, 10, _checksum(bytes(fields)))
    return bytes(fields) + payload


def ipv4_fragments(ip: bytes, chunk: int, *, ident: int | None = None) -> list[bytes]:
    """Split an IPv4 packet into fragments carrying ``chunk`` (a multiple of 8) payload bytes each."""
    ihl = (ip[0] & 0x0F) * 4
    header, payload = bytearray(ip[:ihl]), ip[ihl:]
    if ident is not None:
        struct.pack_into(">H", header, 4, ident)
    frags = []
    for off in range(0, len(payload), chunk):
        more = off + chunk < len(payload)
        frags.append(ipv4_with(bytes(header[:20]), payload[off : off + chunk], options=bytes(header[20:]),
                               flags_offset=(0x2000 if more else 0) | (off // 8)))  # fmt: skip
    return frags


def ipv6_with_ext(ip: bytes, ext: list[tuple[int, bytes]]) -> bytes:
    """Insert extension headers ``(type, body after the next-header byte)`` after the fixed header."""
    next_header = ip[6]
    chain = b""
    for i in range(len(ext) - 1, -1, -1):
        etype, body = ext[i]
        chain = bytes([next_header]) + body + chain
        next_header = etype
    fixed = bytearray(ip[:40])
    fixed[6] = next_header
    struct.pack_into(">H", fixed, 4, len(chain) + len(ip) - 40)
    return bytes(fixed) + chain + ip[40:]


HOP_BY_HOP = (0, bytes([0, 1, 4, 0, 0, 0, 0]))  # hdr len 0, PadN of 4
DEST_OPTS = (60, bytes([0, 1, 4, 0, 0, 0, 0]))
ROUTING = (43, bytes([0, 0, 0, 0, 0, 0, 0]))  # type 0, segments left 0


def ipv6_fragments(ip: bytes, chunk: int, ident: int = 0x1234) -> list[bytes]:
    proto, payload = ip[6], ip[40:]
    frags = []
    for off in range(0, len(payload), chunk):
        more = off + chunk < len(payload)
        fh = struct.pack(">BBHI", proto, 0, off | (1 if more else 0), ident)
        part = payload[off : off + chunk]
        fixed = bytearray(ip[:40])
        fixed[6] = 44
        struct.pack_into(">H", fixed, 4, 8 + len(part))
        frags.append(bytes(fixed) + fh + part)
    return frags
