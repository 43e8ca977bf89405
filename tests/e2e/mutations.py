"""Field-class mutations of the shared public captures, the fixtures and a broker log, for one wild ``amqplens run``.

Each mutant changes one class of field of a clean original (which goes into the same run):
the pcap global header, record header times, record header lengths, the link / IP / TCP headers
of one packet, an AMQP frame header, log line times. The offsets come from the formats (libpcap
file and record headers, pcapng EPB, Ethernet II, IPv4, TCP, the AMQP frame headers of each
dialect), not from our reader. Also here: the 1.0 conversation of the tests with a sender beyond
its link credit, the shape of a public Qpid capture where that happens.
"""

from __future__ import annotations

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
