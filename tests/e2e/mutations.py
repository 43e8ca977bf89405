"""Field-class mutations of the shared public captures, the fixtures and a broker log, for one wild ``amqplens run``.

Each mutant changes one class of field of a clean original (which goes into the same run):
the pcap global header, record header times, record header lengths, the link / IP / TCP headers
of one packet, an AMQP frame header, log line times. The offsets come from the formats (libpcap
file and record headers, pcapng EPB, Ethernet II, IPv4, TCP, the AMQP frame headers of each
dialect), not from our reader. Also here: the 1.0 conversation of the tests with a sender beyond
its link credit, the shape of a public Qpid capture where that happens.
"""

from __future__ import annotations

import re
import struct

from tests.conftest import DATA
from tests.e2e.hostile_captures import records, with_records
from tests.v1_0 import conversation as conv10
from tests.v1_0 import encoder as E10
from tests.v1_0.pcap_writer import connection_pcap

ETH, IP4_MIN, TCP_MIN = 14, 20, 20
YEAR_49195_US = int((49195 - 1970) * 365.2425 * 86400) * 1_000_000  # what one flipped high bit made a record claim
ORIGINALS = ("public/deepflow_amqp091_consume_publish.pcap", "public/adverb_amqp10_hello_world_qpidd_ipv6.pcapng",
             "broker/consume_prefetch_ack.pcap", "broker/amqp10_rich.pcap", "v0_10/publish_consume.pcap")


# ----------------------------------------------------------------- pcap (little-endian microsecond files)
def pcap_header(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, offset, value)
    return bytes(out)


def _tcp_payload_at(packet: bytes) -> int | None:
    """Offset of the TCP payload in an Ethernet II / IPv4 / TCP packet, None when it is something else."""
    if len(packet) < ETH + IP4_MIN + TCP_MIN or packet[12:14] != b"\x08\x00" or packet[ETH] >> 4 != 4 or packet[ETH + 9] != 6:
        return None
    tcp = ETH + (packet[ETH] & 0x0F) * 4
    return tcp + (packet[tcp + 12] >> 4) * 4


def _with_payload(data: bytes) -> list[int]:
    """Indexes of the records that carry a TCP payload, in file order."""
    return [i for i, r in enumerate(records(data)) if (at := _tcp_payload_at(r[2])) is not None and len(r[2]) > at]


def middle_payload_record(data: bytes) -> int:
    found = _with_payload(data)
    return found[len(found) // 2]


def record_field(data: bytes, index: int, fmt: str, field_offset: int, value) -> bytes:
    """Record ``index``'s header field at ``field_offset`` (0 sec, 4 frac, 8 caplen, 12 origlen) set to ``value``."""
    pos = 24
    for _ in range(index):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return pcap_header(data, pos + field_offset, fmt, value)


def packet_bytes(data: bytes, index: int, edit) -> bytes:
    """The pcap with ``edit(bytearray of record index's packet)`` applied (lengths in the record header unchanged)."""
    recs = records(data)
    packet = bytearray(recs[index][2])
    edit(packet)
    recs[index][2] = bytes(packet)
    return with_records(data, recs)


def ip_field(offset: int, value: int, width: int = 1):
    def edit(p: bytearray) -> None:
        p[ETH + offset : ETH + offset + width] = value.to_bytes(width, "big")
    return edit


def tcp_field(offset: int, value: int):
    def edit(p: bytearray) -> None:
        p[ETH + (p[ETH] & 0x0F) * 4 + offset] = value
    return edit


def frame_header(data: bytes, looks, offset: int, value: bytes) -> bytes:
    """The first payload that ``looks(payload)`` like the start of a frame, with ``value`` at ``offset`` of it."""
    recs = records(data)
    for i in _with_payload(data):
        at = _tcp_payload_at(recs[i][2])
        if looks(recs[i][2][at:]):
            return packet_bytes(data, i, lambda p: p.__setitem__(slice(at + offset, at + offset + len(value)), value))
    raise AssertionError("no payload starts with such a frame")


def is_091_method(payload: bytes) -> bool:
    return len(payload) > 8 and payload[0] == 1 and 8 + struct.unpack_from(">I", payload, 3)[0] == len(payload) and payload[-1] == 0xCE


def is_10_amqp_frame(payload: bytes) -> bool:
    return len(payload) > 8 and payload[4] == 2 and payload[5] == 0 and struct.unpack_from(">I", payload, 0)[0] == len(payload)


def is_010_frame(payload: bytes) -> bool:
    return len(payload) >= 12 and payload[0] & 0xF0 == 0 and struct.unpack_from(">H", payload, 2)[0] == len(payload)


# ----------------------------------------------------------------- pcapng (enhanced packet blocks)
def epb_offsets(data: bytes) -> list[int]:
    """Offsets of the EPBs of a little-endian pcapng, walking the block lengths."""
    assert data[8:12] == b"\x4d\x3c\x2b\x1a", "little-endian sections only"
    pos, out = 0, []
    while pos + 12 <= len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            out.append(pos)
        pos += blen
    return out


def epb_time(data: bytes, index: int, units: int) -> bytes:
    """EPB ``index``'s timestamp (high and low words) set to ``units`` (microseconds: the default if_tsresol)."""
    pos = epb_offsets(data)[index]
    return pcap_header(pcap_header(data, pos + 12, "I", units >> 32), pos + 16, "I", units & 0xFFFFFFFF)


# ----------------------------------------------------------------- logs
def log_years(data: bytes, at_lines: dict[int, bytes]) -> bytes:
    """A RabbitMQ 3.x log with the year of the given (0-based) lines replaced."""
    lines = data.splitlines(keepends=True)
    for i, year in at_lines.items():
        assert lines[i][:4].isdigit() and lines[i][4:5] == b"-"
        lines[i] = year + lines[i][4:]
    return b"".join(lines)


# ----------------------------------------------------------------- 1.0 beyond credit
def amqp10_beyond_credit(credit: int = 1) -> tuple[bytes, int]:
    """The tests' 1.0 conversation where the broker grants the client's sender link ``credit`` (it sends 3 deliveries,
    5 transfers): the broker's flow comes before the transfers. Returns the pcap and the transfers past the credit."""
    c, s = conv10.conversation()
    grant = dict(channel=3, next_incoming_id=0, incoming_window=50, next_outgoing_id=0, outgoing_window=50, handle=7,
                 delivery_count=0, echo=True)
    flow100 = E10.performative("flow", link_credit=100, **grant)
    at = s.index(flow100)
    s = s[:at] + E10.performative("flow", link_credit=credit, **grant) + s[at + len(flow100):]
    flow_end = at + len(E10.performative("flow", link_credit=credit, **grant))
    first_transfer = c.index(E10.performative("transfer", channel=1, payload=conv10.message(conv10.SMALL_BODY), handle=0,
                                              delivery_id=0, delivery_tag=b"t0", message_format=0, settled=False))
    turns = [("to_server", c[:first_transfer]), ("to_client", s[:flow_end]), ("to_server", c[first_transfer:]),
             ("to_client", s[flow_end:])]
    return connection_pcap(turns, client=("10.1.0.9", 40009)), 3 - credit


# ----------------------------------------------------------------- the wild run's captures
def capture_mutants() -> dict[str, tuple[str, bytes]]:
    """One mutant capture per field class of ``ORIGINALS`` (name -> (field class, bytes)); the log's are the test's."""
    d091 = (DATA / ORIGINALS[0]).read_bytes()
    ng = (DATA / ORIGINALS[1]).read_bytes()
    ack = (DATA / ORIGINALS[2]).read_bytes()
    a10 = (DATA / ORIGINALS[3]).read_bytes()
    v010 = (DATA / ORIGINALS[4]).read_bytes()
    mid = middle_payload_record(ack)
    tcp = middle_payload_record(d091)
    out = {
        "magic_zeroed": ("global header", pcap_header(d091, 0, "I", 0)),
        "version_9": ("global header", pcap_header(d091, 4, "H", 9)),
        "linktype_beef": ("global header", pcap_header(d091, 20, "I", 0xBEEF)),
        "snaplen_16": ("global header", pcap_header(d091, 16, "I", 16)),
        "cut_in_header": ("global header", d091[:12]),
        "time_2106": ("record times", record_field(ack, mid, "I", 0, 0xFFFFFFFF)),
        "time_1970": ("record times", record_field(ack, mid + 1, "I", 0, 0)),
        "time_49195_pcapng": ("record times", epb_time(ng, len(epb_offsets(ng)) // 2, YEAR_49195_US)),
        "time_2_64_pcapng": ("record times", epb_time(ng, 3, 2**64 - 1)),
        "caplen_over_origlen": ("record lengths", record_field(ack, mid, "I", 12, 20)),
        "origlen_2_31": ("record lengths", record_field(ack, mid, "I", 12, 2**31 - 1)),
        "caplen_16m": ("record lengths", record_field(ack, mid, "I", 8, 16 << 20)),
        "ethertype": ("link/IP/TCP", packet_bytes(d091, tcp, lambda p: p.__setitem__(slice(12, 14), b"\x88\xb5"))),
        "ip_version_7": ("link/IP/TCP", packet_bytes(d091, tcp, ip_field(0, 0x75))),
        "ip_ihl_15": ("link/IP/TCP", packet_bytes(d091, tcp, ip_field(0, 0x4F))),
        "ip_total_length": ("link/IP/TCP", packet_bytes(d091, tcp, ip_field(2, 0xFFFF, 2))),
        "tcp_offset_15": ("link/IP/TCP", packet_bytes(d091, tcp, tcp_field(12, 0xF0))),
        "tcp_offset_0": ("link/IP/TCP", packet_bytes(d091, tcp, tcp_field(12, 0x00))),
        "amqp091_size_2_32": ("AMQP frame header", frame_header(ack, is_091_method, 3, b"\xff\xff\xff\xff")),
        "amqp091_type_77": ("AMQP frame header", frame_header(ack, is_091_method, 0, b"\x77")),
        "amqp10_doff_0": ("AMQP frame header", frame_header(a10, is_10_amqp_frame, 4, b"\x00")),
        "amqp010_size_0": ("AMQP frame header", frame_header(v010, is_010_frame, 2, b"\x00\x00")),
    }
    return out


# ================================================================= seeded field-class mutants (tools/fuzz_jobs.py)
# Every mutant below is one patch of a clean original at an offset the formats define: the libpcap and pcapng
# headers, the link layer named by the link type, IPv4/IPv6, TCP, the frame headers of each AMQP dialect and the
# 1.0 type system (constructor widths), the TLS record header, RabbitMQ log line times and numbers. The offsets are
# walked here from those formats, never asked of amqplens' reader. ``rnd`` picks the record, the frame and the value.

YEAR_S = 31_556_952  # a Gregorian year in seconds
INTERESTING32 = (0, 1, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


class Record:
    """One packet record of a capture file: where its header fields and its packet bytes lie in the file."""

    def __init__(self, hdr: int, data: int, caplen: int, linktype: int, kind: str, ts: int | None = None) -> None:
        self.hdr, self.data, self.caplen, self.linktype, self.kind, self.ts = hdr, data, caplen, linktype, kind, ts

    @property
    def fields(self) -> dict[str, tuple[int, str]]:
        """name -> (offset in the file, struct format, little-endian) of the record header's fields."""
        if self.kind == "pcap":
            return {"ts_sec": (self.hdr, "I"), "ts_frac": (self.hdr + 4, "I"), "caplen": (self.hdr + 8, "I"),
                    "origlen": (self.hdr + 12, "I")}
        return {"interface_id": (self.hdr + 8, "I"), "ts_high": (self.hdr + 12, "I"), "ts_low": (self.hdr + 16, "I"),
                "caplen": (self.hdr + 20, "I"), "origlen": (self.hdr + 24, "I"), "block_length": (self.hdr + 4, "I")}


class CaptureFile:
    """The records and header fields of a little-endian pcap (us or ns) or pcapng (SHB, IDB, EPB, SPB)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.records: list[Record] = []
        self.headers: dict[str, tuple[int, str]] = {}  # global / block header fields: name -> (offset, format)
        if data[:4] == b"\x0a\x0d\x0d\x0a":
            self.kind = "pcapng"
            self._pcapng()
        elif data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            self.kind = "pcap"
            self._pcap()
        else:
            raise ValueError("not a little-endian pcap or pcapng")

    def _pcap(self) -> None:
        d = self.data
        self.headers = {"magic": (0, "I"), "version_major": (4, "H"), "version_minor": (6, "H"), "thiszone": (8, "I"),
                        "sigfigs": (12, "I"), "snaplen": (16, "I"), "linktype": (20, "I")}
        linktype = struct.unpack_from("<I", d, 20)[0]
        pos = 24
        while pos + 16 <= len(d):
            sec, frac, caplen = struct.unpack_from("<III", d, pos)
            if pos + 16 + caplen > len(d):
                break
            self.records.append(Record(pos, pos + 16, caplen, linktype, "pcap", sec))
            pos += 16 + caplen

    def _pcapng(self) -> None:
        d, pos, interfaces, n_idb = self.data, 0, [], 0
        while pos + 12 <= len(d):
            btype, blen = struct.unpack_from("<II", d, pos)
            if blen < 12 or pos + blen > len(d):
                break
            if btype == 0x0A0D0D0A:
                self.headers.update({"shb_version_major": (pos + 12, "H"), "shb_section_length": (pos + 16, "Q"),
                                     "shb_block_length": (pos + 4, "I")})
            elif btype == 1:
                interfaces.append(struct.unpack_from("<H", d, pos + 8)[0])
                self.headers.update({f"idb{n_idb}_linktype": (pos + 8, "H"), f"idb{n_idb}_snaplen": (pos + 12, "I"),
                                     f"idb{n_idb}_block_length": (pos + 4, "I")})
                opt = pos + 16  # the options: code, length, value padded to 4
                while opt + 4 <= pos + blen - 4:
                    code, olen = struct.unpack_from("<HH", d, opt)
                    if code == 0:
                        break
                    if code == 9 and olen == 1:  # if_tsresol
                        self.headers[f"idb{n_idb}_tsresol"] = (opt + 4, "B")
                    opt += 4 + (olen + 3) // 4 * 4
                n_idb += 1
            elif btype == 6:
                iface = struct.unpack_from("<I", d, pos + 8)[0]
                hi, lo, caplen = struct.unpack_from("<III", d, pos + 12)
                link = interfaces[iface] if iface < len(interfaces) else -1
                self.records.append(Record(pos, pos + 28, caplen, link, "epb", hi << 32 | lo))
            pos += blen

    # ------------------------------------------------------------- packet layers
    def tcp_of(self, rec: Record) -> tuple[int, int, int] | None:
        """(IP header offset, TCP header offset, TCP payload offset) in the file, for IPv4/IPv6 TCP; else None."""
        d, p, end = self.data, rec.data, rec.data + rec.caplen
        link = {1: 14, 113: 16, 276: 20, 0: 4, 101: 0, 228: 0, 229: 0}.get(rec.linktype)
        if link is None or end - p < link + 20:
            return None
        ip = p + link
        if rec.linktype == 1 and d[p + 12 : p + 14] == b"\x81\x00":  # one 802.1Q tag
            ip += 4
        version = d[ip] >> 4
        if version == 4 and d[ip + 9] == 6:
            tcp = ip + (d[ip] & 0x0F) * 4
        elif version == 6 and end - ip >= 60 and d[ip + 6] == 6:
            tcp = ip + 40
        else:
            return None
        if tcp + 20 > end:
            return None
        return ip, tcp, tcp + (d[tcp + 12] >> 4) * 4

    def payloads(self) -> list[tuple[Record, int, int]]:
        """(record, payload offset, payload end) of every record with TCP payload bytes."""
        out = []
        for rec in self.records:
            at = self.tcp_of(rec)
            if at is not None and at[2] < rec.data + rec.caplen:
                out.append((rec, at[2], rec.data + rec.caplen))
        return out


def patch(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


def put(data: bytes, offset: int, fmt: str, value: int, endian: str = "<") -> bytes:
    width = struct.calcsize(fmt)
    return patch(data, offset, (value & ((1 << 8 * width) - 1)).to_bytes(width, "little" if endian == "<" else "big"))


# ------------------------------------------------------------- AMQP frame headers of each dialect, walked per segment
class Dialect:
    def __init__(self, header: int, total, plausible, fields: dict[str, tuple[int, int]], method: tuple[int, int] | None) -> None:
        self.header, self.total, self.plausible, self.fields, self.method = header, total, plausible, fields, method


DIALECTS = {
    # type, channel, size (network order), then the method's class and method ids (shorts)
    "0-9-1": Dialect(7, lambda b, i: 8 + int.from_bytes(b[i + 3 : i + 7], "big"), lambda b, i: b[i] in (1, 2, 3, 4, 8),
                     {"type": (0, 1), "channel": (1, 2), "size": (3, 4)}, (7, 2)),
    # size, doff, type, channel; the performative at doff * 4
    "1.0": Dialect(8, lambda b, i: int.from_bytes(b[i : i + 4], "big"), lambda b, i: b[i + 4] >= 2 and b[i + 5] in (0, 1),
                   {"size": (0, 4), "doff": (4, 1), "type": (5, 1), "channel": (6, 2)}, None),
    # flags, segment type, size, reserved, track, channel, reserved; a command's class and code octets follow
    "0-10": Dialect(12, lambda b, i: int.from_bytes(b[i + 2 : i + 4], "big"), lambda b, i: b[i + 1] <= 3 and b[i + 4] == 0,
                    {"flags": (0, 1), "type": (1, 1), "size": (2, 2), "track": (5, 1), "channel": (6, 2)}, (12, 1)),
    # seed 000: type, cycle, channel, size, payload, frame-end
    "draft": Dialect(8, lambda b, i: 9 + int.from_bytes(b[i + 4 : i + 8], "big"), lambda b, i: 1 <= b[i] <= 8,
                     {"type": (0, 1), "cycle": (1, 1), "channel": (2, 2), "size": (4, 4)}, (8, 2)),
    # seed 003: type, channel (octet), size (counts the frame-end)
    "fast": Dialect(4, lambda b, i: 4 + int.from_bytes(b[i + 2 : i + 4], "big"), lambda b, i: 1 <= b[i] <= 9,
                    {"type": (0, 1), "channel": (1, 1), "size": (2, 2)}, (4, 1)),
}


def frames(cap: CaptureFile, dialect: str) -> list[tuple[int, int]]:
    """(file offset, length within the segment) of each frame header found walking segments from their start."""
    dia, d, out = DIALECTS[dialect], cap.data, []
    for _, start, end in cap.payloads():
        i = start + (8 if d[start : start + 4] == b"AMQP" else 0)
        while i + dia.header <= end and dia.plausible(d, i):
            total = dia.total(d, i)
            if total < dia.header:
                break
            out.append((i, min(total, end - i)))
            i += total
    return out


def protocol_headers(cap: CaptureFile) -> list[int]:
    return [start for _, start, end in cap.payloads() if cap.data[start : start + 4] == b"AMQP" and end - start >= 8]


# ------------------------------------------------------------- the 1.0 type system: a performative's fields
def _amqp10_width(d: bytes, i: int, end: int) -> int | None:
    """Bytes of the encoded value at ``i`` (constructor included), from the constructor's subcategory (spec 1.2)."""
    if i >= end:
        return None
    c = d[i]
    if c == 0x00:  # described: the descriptor, then the value
        w = _amqp10_width(d, i + 1, end)
        v = None if w is None else _amqp10_width(d, i + 1 + w, end)
        return None if v is None else 1 + w + v
    fixed = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}.get(c >> 4)
    if fixed is not None:
        return 1 + fixed
    size = {0xA: 1, 0xB: 4, 0xC: 1, 0xD: 4, 0xE: 1, 0xF: 4}.get(c >> 4)
    if size is None or i + 1 + size > end:
        return None
    return 1 + size + int.from_bytes(d[i + 1 : i + 1 + size], "big")


def performatives(cap: CaptureFile) -> list[dict]:
    """Each 1.0 performative found: its code, the list's constructor offset, and the offsets of its fields."""
    d, out = cap.data, []
    for at, length in frames(cap, "1.0"):
        end = at + length
        body = at + d[at + 4] * 4
        if d[at + 5] != 0 or body + 4 > end or d[body : body + 2] != b"\x00\x53":
            continue
        code, lst = d[body + 2], body + 3
        if d[lst] == 0x45:
            out.append({"code": code, "code_at": body + 2, "list": lst, "fields": []})
            continue
        if d[lst] not in (0xC0, 0xD0):
            continue
        width = 1 if d[lst] == 0xC0 else 4
        count = int.from_bytes(d[lst + 1 + width : lst + 1 + 2 * width], "big")
        i, fields = lst + 1 + 2 * width, []
        for _ in range(count):
            w = _amqp10_width(d, i, end)
            if w is None:
                break
            fields.append(i)
            i += w
        out.append({"code": code, "code_at": body + 2, "list": lst, "fields": fields})
    return out


HANDLE_FIELD = {0x12: 1, 0x13: 4, 0x14: 0, 0x16: 0}  # attach, flow, transfer, detach: the index of `handle`


# ------------------------------------------------------------- the field classes
def _pick(rnd, seq):
    return rnd.choice(seq) if seq else None


def _record_time(data, rnd, seconds_choices, units_choices):
    cap = CaptureFile(data)
    rec = _pick(rnd, cap.records)
    if rec is None:
        return None
    f = rec.fields
    if rec.kind == "pcap":
        if seconds_choices is None:  # the fraction beyond its second (1e6 us / 1e9 ns)
            return put(data, f["ts_frac"][0], "I", rnd.choice((1_000_000, 999_999_999, 1_000_000_000, 0xFFFFFFFF)))
        return put(data, f["ts_sec"][0], "I", rnd.choice(seconds_choices(rec.ts or 0)))
    units = rec.ts or 0  # microseconds: the fixtures' if_tsresol
    new = rnd.choice(units_choices(units)) if units_choices else units + 999_999
    return put(put(data, f["ts_high"][0], "I", new >> 32), f["ts_low"][0], "I", new & 0xFFFFFFFF)


def m_record_time(data, rnd, family):
    """One record's time: before 1990 or after 2100 (0, 2^31, 2^32 - 1 s; 2^64 - 1 units; a high bit flipped), hours
    or seconds away from its neighbours, or (pcap) a fraction past its second."""
    if rnd.random() < 0.2:
        return _record_time(data, rnd, None, None)
    return _record_time(data, rnd, lambda s: (0, 1 << 31, 0xFFFFFFFF, 1, s + rnd.randint(1, 48) * 3600, s - rnd.randint(1, 3600)),
                        lambda u: (0, 2**64 - 1, u ^ (1 << rnd.randrange(52, 64)), u + rnd.randint(1, 48) * 3_600_000_000,
                                   max(0, u - rnd.randint(1, 3600) * 10**6)))


def m_record_time_years(data, rnd, family):
    """One record's time years away from its neighbours but inside 1990..2100 (a clock set wrong, one flipped bit of the
    seconds): issue 38 item 5, the capture window and the metric buckets must come from the plausible times."""
    return _record_time(data, rnd, lambda s: (s + rnd.randint(1, 40) * YEAR_S, s - rnd.randint(1, 30) * YEAR_S, s ^ (1 << 28)),
                        lambda u: (u + rnd.randint(1, 40) * YEAR_S * 10**6, u - rnd.randint(1, 30) * YEAR_S * 10**6))


def m_caplen(data, rnd, family):
    rec = _pick(rnd, CaptureFile(data).records)
    if rec is None:
        return None
    value = rnd.choice((0, 1, rec.caplen - 1, rec.caplen + 1, rec.caplen + 4096, 65536, 16 << 20, *INTERESTING32[-4:]))
    return put(data, rec.fields["caplen"][0], "I", value)


def m_origlen(data, rnd, family):
    rec = _pick(rnd, CaptureFile(data).records)
    if rec is None:
        return None
    value = rnd.choice((0, 1, max(0, rec.caplen - 1), rec.caplen + 1, 65536, *INTERESTING32[-4:]))
    return put(data, rec.fields["origlen"][0], "I", value)


def m_file_header(data, rnd, family):
    """A field of the pcap global header or of a pcapng SHB/IDB (version, snaplen, section length, tsresol, lengths)."""
    cap = CaptureFile(data)
    names = sorted(k for k in cap.headers if "linktype" not in k)
    name = _pick(rnd, names)
    offset, fmt = cap.headers[name]
    if name == "magic":  # a byte of the magic: another endianness or resolution, or none
        return patch(data, rnd.randrange(4), bytes([rnd.randrange(256)]))
    if name.endswith("tsresol"):
        return put(data, offset, fmt, rnd.choice((0, 3, 6, 9, 19, 63, 64, 0x80, 0x80 | 10, 0x80 | 63, 0xFF)))
    width = struct.calcsize(fmt)
    return put(data, offset, fmt, rnd.choice((*INTERESTING32, 2**64 - 1, 2**63)) & ((1 << 8 * width) - 1))


LINK_TYPES = (0, 1, 12, 101, 105, 113, 127, 228, 229, 276, 0xBEEF, 0xFFFF)


def m_link_type(data, rnd, family):
    cap = CaptureFile(data)
    name = _pick(rnd, sorted(k for k in cap.headers if "linktype" in k))
    offset, fmt = cap.headers[name]
    return put(data, offset, fmt, rnd.choice(LINK_TYPES))


def m_interface_id(data, rnd, family):
    cap = CaptureFile(data)
    if cap.kind != "pcapng":
        return None
    rec = _pick(rnd, cap.records)
    return put(data, rec.fields["interface_id"][0], "I", rnd.choice((1, 2, 7, 0xFFFF, 0xFFFFFFFF)))


def m_block_length(data, rnd, family):
    """A pcapng block's total length (leading or trailing copy), or a record of a pcap cut short of its caplen."""
    cap = CaptureFile(data)
    if cap.kind != "pcapng":
        rec = _pick(rnd, cap.records)
        return data[: rec.data + rnd.randrange(max(1, rec.caplen))] + data[rec.data + rec.caplen:] if rec else None
    rec = _pick(rnd, cap.records)
    blen = struct.unpack_from("<I", data, rec.hdr + 4)[0]
    offset = rec.hdr + 4 if rnd.random() < 0.5 else rec.hdr + blen - 4
    return put(data, offset, "I", rnd.choice((0, 11, 12, blen - 4, blen + 4, blen + 3, 0xFFFFFFFC, 1 << 30)))


def m_truncation(data, rnd, family):
    """The file cut: anywhere, inside a record's header, or inside its packet."""
    cap = CaptureFile(data)
    rec = _pick(rnd, cap.records)
    where = rnd.random()
    if rec is None or where < 0.3:
        return data[: rnd.randrange(1, len(data))]
    if where < 0.6:
        return data[: rec.hdr + rnd.randrange(1, rec.data - rec.hdr)]
    return data[: rec.data + rnd.randrange(max(1, rec.caplen))]


def m_ip_header(data, rnd, family):
    """A field of one packet's IPv4/IPv6 header: version, IHL, total length, flags/fragment offset, protocol, addresses."""
    cap = CaptureFile(data)
    recs = [(r, at) for r in cap.records if (at := cap.tcp_of(r)) is not None]
    if not recs:
        return None
    rec, (ip, tcp, _) = rnd.choice(recs)
    if data[ip] >> 4 == 6:
        field = rnd.choice(((0, 1, (0x45, 0x70, 0x00)), (4, 2, (0, 1, 0xFFFF)), (6, 1, (17, 44, 59, 0)), (8, 16, None), (24, 16, None)))
    else:
        field = rnd.choice(((0, 1, (0x4F, 0x75, 0x44, 0x60)), (2, 2, (0, 20, 0xFFFF)), (6, 2, (0x2000, 0x20FF, 0x1FFF)),
                            (9, 1, (17, 0, 255)), (12, 4, None), (16, 4, None)))
    off, width, values = field
    value = bytes(rnd.randrange(256) for _ in range(width)) if values is None else rnd.choice(values).to_bytes(width, "big")
    return patch(data, ip + off, value)


def m_tcp_header(data, rnd, family):
    """A field of one segment's TCP header: ports, sequence or ack number, data offset, flags."""
    cap = CaptureFile(data)
    recs = [(r, at) for r in cap.records if (at := cap.tcp_of(r)) is not None]
    if not recs:
        return None
    rec, (ip, tcp, _) = rnd.choice(recs)
    seq = struct.unpack_from(">I", data, tcp + 4)[0]
    field = rnd.choice(("sport", "dport", "seq", "seq", "ack", "offset", "flags"))
    if field in ("sport", "dport"):
        return patch(data, tcp + (0 if field == "sport" else 2), rnd.choice((0, 5672, 5671, 1, 65535)).to_bytes(2, "big"))
    if field == "seq":
        delta = rnd.choice((1, -1, 1400, -1400, 65536, 1 << 31, rnd.randrange(1, 1 << 32)))
        return patch(data, tcp + 4, ((seq + delta) & 0xFFFFFFFF).to_bytes(4, "big"))
    if field == "ack":
        return patch(data, tcp + 8, rnd.randrange(1 << 32).to_bytes(4, "big"))
    if field == "offset":
        return patch(data, tcp + 12, bytes([rnd.choice((0, 1, 4, 6, 15)) << 4]))
    return patch(data, tcp + 13, bytes([rnd.choice((0x02, 0x01, 0x04, 0x12, 0x11, 0xFF, 0x00))]))


FRAME_DIALECTS = {"0-9-1": ("0-9-1",), "1.0": ("1.0",), "0-10": ("0-10",), "drafts": ("draft", "fast")}


def _frame(data, rnd, family):
    cap = CaptureFile(data)
    walked = {d: frames(cap, d) for d in FRAME_DIALECTS.get(family, ())}
    dialect = max(walked, key=lambda d: len(walked[d])) if walked else None  # a draft's capture: the draft it speaks
    found = walked[dialect] if dialect else []
    return (cap, dialect, rnd.choice(found)) if found else (cap, dialect, None)


def m_frame_size(data, rnd, family):
    cap, dialect, frame = _frame(data, rnd, family)
    if frame is None:
        return None
    off, width = DIALECTS[dialect].fields["size"]
    size = int.from_bytes(data[frame[0] + off : frame[0] + off + width], "big")
    value = rnd.choice((0, 1, size - 1, size + 1, size * 2, (1 << 8 * width) - 1, 1 << (8 * width - 1)))
    return put(data, frame[0] + off, {1: "B", 2: "H", 4: "I"}[width], value, ">")


def m_channel(data, rnd, family):
    cap, dialect, frame = _frame(data, rnd, family)
    if frame is None:
        return None
    off, width = DIALECTS[dialect].fields["channel"]
    value = rnd.choice((0, 1, 2, 7, 255, (1 << 8 * width) - 1, rnd.randrange(1 << 8 * width)))
    return put(data, frame[0] + off, {1: "B", 2: "H"}[width], value, ">")


def m_frame_enum(data, rnd, family):
    """An enumerated value of a frame: its type, a 0-10 segment's track or flags, the class and method (or command) ids,
    a 1.0 performative's descriptor code or one of its ubyte / boolean fields (roles, settle modes)."""
    cap, dialect, frame = _frame(data, rnd, family)
    if frame is None:
        return None
    at, length = frame
    dia = DIALECTS[dialect]
    choices = ["type"] + (["track", "flags"] if dialect == "0-10" else [])
    if dia.method and length >= dia.method[0] + 2 * dia.method[1]:
        choices += ["method", "method"]
    if dialect == "1.0":
        choices += ["performative", "field", "field"]
    what = rnd.choice(choices)
    if what == "performative" or what == "field":
        perf = _pick(rnd, performatives(cap))
        if perf is None:
            return None
        if what == "performative":
            return patch(data, perf["code_at"], bytes([rnd.choice((0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1D, 0x77, 0xFF))]))
        small = [i for i in perf["fields"] if data[i] in (0x50, 0x56, 0x41, 0x42)]
        i = _pick(rnd, small)
        if i is None:
            return None
        if data[i] in (0x41, 0x42):
            return patch(data, i, bytes([rnd.choice((0x41, 0x42, 0x40))]))
        return patch(data, i + 1, bytes([rnd.choice((2, 3, 0x7F, 0xFF))]))
    if what == "method":
        off, width = dia.method
        which = rnd.randrange(2)
        value = rnd.choice((0, 1, 10, 20, 40, 60, 85, 90, 0x7F, 0xFF, (1 << 8 * width) - 1))
        return put(data, at + off + which * width, {1: "B", 2: "H"}[width], value, ">")
    off, width = dia.fields.get(what, (0, 1))
    if what == "track":
        return patch(data, at + 5, bytes([rnd.choice((1, 2, 15, 0xFF))]))
    return patch(data, at + off, bytes([rnd.choice((0, 1, 2, 3, 4, 5, 8, 9, 0x7F, 0xCE, 0xFF))]))


def m_counts(data, rnd, family):
    """A count or a length inside a frame: a 0-9-1 content header's body size, a 1.0 list's size or element count,
    a byte of a 0-10 or draft frame's payload set to an interesting integer (struct sizes, packing flags, counts)."""
    cap, dialect, frame = _frame(data, rnd, family)
    if dialect == "1.0":
        perf = _pick(rnd, [p for p in performatives(cap) if p["fields"]])
        if perf is None:
            return None
        lst = perf["list"]
        width = 1 if data[lst] == 0xC0 else 4
        which = rnd.randrange(2)
        return put(data, lst + 1 + which * width, "B" if width == 1 else "I", rnd.choice((0, 1, 0x7F, 0xFF, 0xFFFFFFFF, len(perf["fields"]) + 1)), ">")
    if frame is None:
        return None
    at, length = frame
    if dialect == "0-9-1":
        headers = [(a, n) for a, n in frames(cap, dialect) if data[a] == 2 and n >= 7 + 12]
        if headers:
            a, _ = rnd.choice(headers)
            return put(data, a + 7 + 4, "Q", rnd.choice((0, 1, 2**31, 2**63 - 1, 2**64 - 1, 1 << 40)), ">")
    hdr = DIALECTS[dialect].header
    if length <= hdr + 1:
        return None
    i = at + rnd.randrange(hdr, length - 1)
    width = min(rnd.choice((1, 2, 4)), at + length - i)
    return patch(data, i, (rnd.choice(INTERESTING32) & ((1 << 8 * width) - 1)).to_bytes(width, "big"))


def m_handle_1_0(data, rnd, family):
    """The handle of a 1.0 attach, flow, transfer or detach: another number, a huge one, or null."""
    perfs = [(p, p["fields"][HANDLE_FIELD[p["code"]]]) for p in performatives(CaptureFile(data))
             if p["code"] in HANDLE_FIELD and len(p["fields"]) > HANDLE_FIELD[p["code"]]]
    if not perfs:
        return None
    _, i = rnd.choice(perfs)
    c = data[i]
    if c == 0x52:
        return patch(data, i + 1, bytes([rnd.choice((1, 2, 5, 0xFE, 0xFF))]))
    if c == 0x70:
        return patch(data, i + 1, rnd.choice((1, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)).to_bytes(4, "big"))
    return patch(data, i, bytes([rnd.choice((0x40, 0x41, 0x44))]))  # uint0 -> null, true, ulong0


def m_protocol_header(data, rnd, family):
    cap = CaptureFile(data)
    at = _pick(rnd, protocol_headers(cap))
    if at is None:
        return None
    i = at + rnd.randrange(4, 8)
    return patch(data, i, bytes([rnd.choice((0, 1, 2, 3, 9, 10, 0xFF))]))


def m_tls_record(data, rnd, family):
    """A TLS record header's content type, version or length; or a byte of a hello's random."""
    cap = CaptureFile(data)
    found = []
    for _, start, end in cap.payloads():
        i = start
        while i + 5 <= end and 20 <= data[i] <= 24 and data[i + 1] == 3:
            found.append(i)
            i += 5 + int.from_bytes(data[i + 3 : i + 5], "big")
    at = _pick(rnd, found)
    if at is None:
        return None
    what = rnd.choice(("type", "version", "length", "length", "random"))
    if what == "type":
        return patch(data, at, bytes([rnd.choice((20, 21, 22, 23, 24, 0, 0xFF))]))
    if what == "version":
        return patch(data, at + 1, rnd.choice((b"\x03\x00", b"\x03\x01", b"\x03\x04", b"\x02\x00", b"\xfe\xfd")))
    if what == "length":
        n = int.from_bytes(data[at + 3 : at + 5], "big")
        return patch(data, at + 3, rnd.choice((0, 1, n - 1, n + 1, 0x4000, 0x4800, 0xFFFF)).to_bytes(2, "big"))
    hellos = [i for i in found if data[i] == 22 and data[i + 5] in (1, 2)]
    i = _pick(rnd, hellos)
    return None if i is None else patch(data, i + 11 + rnd.randrange(32), bytes([rnd.randrange(256)]))


# ------------------------------------------------------------- logs
_LOG_TIME = re.compile(rb"(?<![0-9])([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})")
_NUMBER = re.compile(rb"(?<![0-9A-Za-z.])[0-9]+(?![0-9A-Za-z.])")


def _log_time(data, rnd, values):
    found = list(_LOG_TIME.finditer(data))
    if not found:
        return None
    out = data
    for m in rnd.sample(found, min(len(found), rnd.choice((1, 1, 3)))):
        group, value = rnd.choice(values(m))
        width = m.end(group) - m.start(group)
        out = patch(out, m.start(group), value[:width].rjust(width, b"0"))
    return out


def m_log_time(data, rnd, family):
    """One or a few log line times: the year before 1990 or after 2100 (0001, 1969, 2150, 9999), a month, day or hour
    out of range."""
    return _log_time(data, rnd, lambda m: ((1, rnd.choice((b"0001", b"1969", b"2150", b"9999"))), (2, rnd.choice((b"00", b"13"))),
                                           (3, rnd.choice((b"00", b"32"))), (4, b"25")))


def m_log_time_years(data, rnd, family):
    """One or a few log line times years away inside 1990..2100 (issue 38 item 5)."""
    return _log_time(data, rnd, lambda m: ((1, b"%04d" % min(2099, max(1990, int(m.group(1)) + rnd.choice((-20, -3, 1, 7, 40))))),))


def m_log_field(data, rnd, family):
    """A number in a log line (channel, port, pid, size, count, line offset) set to an interesting one, or a line cut,
    duplicated or moved."""
    lines = data.splitlines(keepends=True)
    if not lines:
        return None
    what = rnd.choice(("number", "number", "cut", "dup", "move"))
    if what == "number":
        found = list(_NUMBER.finditer(data))
        m = _pick(rnd, found)
        if m is None:
            return None
        value = rnd.choice((b"0", b"65535", b"65536", b"2147483648", b"18446744073709551616", b"99999999999999999999999"))
        return data[: m.start()] + value + data[m.end():]
    i = rnd.randrange(len(lines))
    if what == "cut":
        lines[i] = lines[i][: rnd.randrange(max(1, len(lines[i])))]
    elif what == "dup":
        lines.insert(i, lines[i])
    else:
        lines.insert(rnd.randrange(len(lines)), lines.pop(i))
    return b"".join(lines)


def m_log_truncation(data, rnd, family):
    return data[: rnd.randrange(1, len(data))] if data else None


CAPTURE = ("0-9-1", "1.0", "0-10", "drafts", "tls", "formats")
AMQP = ("0-9-1", "1.0", "0-10", "drafts")
# field class -> (mutator, the families it applies to)
FIELD_CLASSES = {
    "record_time": (m_record_time, CAPTURE),
    "record_time_years": (m_record_time_years, CAPTURE),
    "caplen": (m_caplen, CAPTURE),
    "origlen": (m_origlen, CAPTURE),
    "file_header": (m_file_header, CAPTURE),
    "link_type": (m_link_type, CAPTURE),
    "interface_id": (m_interface_id, CAPTURE),
    "block_length": (m_block_length, CAPTURE),
    "truncation": (m_truncation, CAPTURE),
    "ip_header": (m_ip_header, CAPTURE),
    "tcp_header": (m_tcp_header, CAPTURE),
    "protocol_header": (m_protocol_header, AMQP),
    "frame_size": (m_frame_size, AMQP),
    "channel": (m_channel, AMQP),
    "enum": (m_frame_enum, AMQP),
    "counts": (m_counts, AMQP),
    "handle_1_0": (m_handle_1_0, ("1.0",)),
    "tls_record": (m_tls_record, ("tls",)),
    "log_time": (m_log_time, ("logs",)),
    "log_time_years": (m_log_time_years, ("logs",)),
    "log_field": (m_log_field, ("logs",)),
    "log_truncation": (m_log_truncation, ("logs",)),
}


# ----------------------------------------------------------------- issue 38's cases (tests/e2e/test_every_stage.py)
def epb_interface_and_time(data: bytes, index: int, iface_id: int, units: int) -> bytes:
    """EPB ``index`` naming interface ``iface_id`` (the EPB's first field) at time ``units``: one record wrong twice."""
    pos = epb_offsets(data)[index]
    return pcap_header(epb_time(data, index, units), pos + 8, "I", iface_id)


def empty_pcapng(linktype: int = 1) -> bytes:
    """A well-formed pcapng with no packets: a section header block (byte-order magic 0x1A2B3C4D, version 1.0, section
    length -1 = unknown) and one interface description block (link type, snaplen 262144), no options."""
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    idb = struct.pack("<IIHHI", 1, 20, linktype, 0, 262144) + struct.pack("<I", 20)
    return shb + idb


def empty_pcap(linktype: int = 1) -> bytes:
    """A libpcap file with its global header only (magic a1b2c3d4, version 2.4, snaplen 65535) and no record."""
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)


def replaced_once(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with the one occurrence of ``old`` replaced by ``new`` (same length: lengths and offsets stay)."""
    assert len(old) == len(new) and data.count(old) == 1, "expected exactly one occurrence"
    return data.replace(old, new)
