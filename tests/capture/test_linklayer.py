"""Link layers, IPv4 options, IPv6 extension headers and what is not TCP."""

from __future__ import annotations

import struct

import pytest
from capture_builders import (
    DEST_OPTS,
    HOP_BY_HOP,
    ROUTING,
    bsd_null,
    ethernet,
    ipv4_with,
    ipv6_with_ext,
    linux_sll,
    linux_sll2,
    openbsd_loop,
    pcap_bytes,
    read_pcap_frames,
)
from capture_helpers import DATA, assert_matches_tshark, needs_tshark, read_all, write

FRAMES = read_pcap_frames(DATA / "capture" / "lo_us.pcap")
REFERENCE, _ = read_all(DATA / "capture" / "lo_us.pcap")


def _ip(frame) -> bytes:
    return frame[2][14:]


def _pcap(tmp_path, wrap, linktype, frames=FRAMES):
    records = [(sec, frac, wrap(_ip(f)), orig - len(f[2]) + len(wrap(_ip(f)))) for f in frames for sec, frac, orig in [(f[0], f[1], f[3])]]
    return write(tmp_path, f"lt{linktype}.pcap", pcap_bytes(records, linktype=linktype))


def _same_packets(rows, reference=REFERENCE):
    drop = ("record_offset", "wire_len")
    return [{k: v for k, v in r.items() if k not in drop} for r in rows] == [
        {k: v for k, v in r.items() if k not in drop} for r in reference
    ]


LINK_VARIANTS = {
    "802.1Q": (1, lambda ip: ethernet(ip, vlan_tags=((0x8100, 42),))),
    "802.1ad-QinQ": (1, lambda ip: ethernet(ip, vlan_tags=((0x88A8, 100), (0x8100, 42)))),
    "0x9100-outer": (1, lambda ip: ethernet(ip, vlan_tags=((0x9100, 7), (0x8100, 8)))),
    "linux-sll": (113, linux_sll),
    "linux-sll2": (276, linux_sll2),
    "null-le-24": (0, lambda ip: bsd_null(ip, "<", 24)),
    "null-le-28": (0, lambda ip: bsd_null(ip, "<", 28)),
    "null-be-30": (0, lambda ip: bsd_null(ip, ">", 30)),
    "openbsd-loop": (108, openbsd_loop),
    "raw-101": (101, lambda ip: ip),
    "raw-12": (12, lambda ip: ip),
    "raw-14": (14, lambda ip: ip),
}


@pytest.mark.parametrize("name", LINK_VARIANTS)
def test_link_layers(tmp_path, name):
    linktype, wrap = LINK_VARIANTS[name]
    rows, result = read_all(_pcap(tmp_path, wrap, linktype))
    assert result.errors == [] and result.stats.link_types == {linktype}
    assert _same_packets(rows)


@needs_tshark
@pytest.mark.parametrize("name", LINK_VARIANTS)
def test_link_layers_match_tshark(tmp_path, name):
    linktype, wrap = LINK_VARIANTS[name]
    assert_matches_tshark(_pcap(tmp_path, wrap, linktype))


@pytest.mark.parametrize("linktype, version", [(228, 4), (229, 6)])
def test_ip_only_link_types(tmp_path, linktype, version):
    frames = [f for f in FRAMES if _ip(f)[0] >> 4 == version]
    rows, result = read_all(_pcap(tmp_path, lambda ip: ip, linktype, frames))
    assert result.errors == [] and rows
    assert _same_packets(rows, [r for r in REFERENCE if r["ip_version"] == version])


def _with_ipv4_options(ip: bytes) -> bytes:
    if ip[0] >> 4 != 4:
        return ip
    record_route = bytes([7, 11, 4]) + bytes(8) + b"\x00"  # 2 empty slots, then end of options
    ihl = (ip[0] & 0x0F) * 4
    return ipv4_with(ip[:20], ip[ihl:], options=record_route)


def _with_ipv6_extensions(ip: bytes) -> bytes:
    if ip[0] >> 4 != 6:
        return ip
    return ipv6_with_ext(ip, [HOP_BY_HOP, ROUTING, DEST_OPTS])


@pytest.mark.parametrize("wrap", [_with_ipv4_options, _with_ipv6_extensions], ids=["ipv4-options", "ipv6-ext"])
def test_ip_header_extensions(tmp_path, wrap):
    rows, result = read_all(_pcap(tmp_path, lambda ip: ethernet(wrap(ip)), 1))
    assert result.errors == [] and _same_packets(rows)


@needs_tshark
@pytest.mark.parametrize("wrap", [_with_ipv4_options, _with_ipv6_extensions], ids=["ipv4-options", "ipv6-ext"])
def test_ip_header_extensions_match_tshark(tmp_path, wrap):
    assert_matches_tshark(_pcap(tmp_path, lambda ip: ethernet(wrap(ip)), 1))


def _tcp_frame() -> bytes:
    return next(f[2] for f in FRAMES if f[2][12:14] == b"\x08\x00" and f[2][23] == 6)


def _udp_frame() -> bytes:
    return next(f[2] for f in FRAMES if f[2][12:14] == b"\x08\x00" and f[2][23] == 17)


def _odd_frames() -> dict[str, tuple[bytes, str]]:
    tcp = _tcp_frame()
    ip = tcp[14:]
    arp = tcp[:12] + b"\x08\x06" + bytes(28)
    llc = tcp[:12] + struct.pack(">H", 38) + bytes(38)
    bad_ihl = tcp[:14] + bytes([0x43]) + tcp[15:]
    bad_version = tcp[:14] + bytes([0x55]) + tcp[15:]
    short_total = ipv4_with(ip[:20], b"")[:2] + b"\x00\x10" + ip[4:]
    tcp_doff_4 = tcp[:46] + bytes([0x40 | (tcp[46] & 0x0F)]) + tcp[47:]
    icmp_proto = tcp[:23] + b"\x01" + tcp[24:]
    return {
        "arp": (arp, "non_tcp_packets"),
        "802.3-llc": (llc, "non_tcp_packets"),
        "udp": (_udp_frame(), "non_tcp_packets"),
        "not-tcp-proto": (icmp_proto, "non_tcp_packets"),
        "short-ethernet": (tcp[:10], "malformed_packets"),
        "ihl-below-5": (bad_ihl, "malformed_packets"),
        "ip-version-5": (bad_version, "malformed_packets"),
        "total-length-below-ihl": (tcp[:14] + short_total, "malformed_packets"),
        "tcp-data-offset-4": (tcp_doff_4, "malformed_packets"),
        "cut-in-tcp-header": (tcp[:14 + 20 + 10], "malformed_packets"),
        "cut-in-ip-header": (tcp[:14 + 12], "malformed_packets"),
        "vlan-tag-cut": (tcp[:12] + b"\x81\x00\x00", "malformed_packets"),
    }


@pytest.mark.parametrize("name", _odd_frames())
def test_frames_that_are_not_tcp_are_counted(tmp_path, name):
    frame, counter = _odd_frames()[name]
    records = [(1700000000, 0, _tcp_frame()), (1700000000, 1, frame), (1700000000, 2, _tcp_frame())]
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(records)))
    assert len(rows) == 2 and result.errors == []
    assert getattr(result.stats, counter) == 1
    assert result.stats.records == 3


def test_tcp_options_cut_by_snaplen_still_give_a_row(tmp_path):
    syn = next(f[2] for f in FRAMES if f[2][12:14] == b"\x08\x00" and f[2][47] & 0x02 and (f[2][46] >> 4) > 5)
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes([(1700000000, 0, syn[: 14 + 20 + 22], len(syn))])))
    assert len(rows) == 1 and rows[0]["payload"] == b"" and rows[0]["payload_truncated"]


def test_unknown_link_type_is_reported_once(tmp_path):
    records = [(1700000000, i, f[2]) for i, f in enumerate(FRAMES)]
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(records, linktype=147)))
    assert rows == []
    assert [(e.offset, e.reason) for e in result.errors] == [(0, "unknown_link_type")]
    assert "147" in result.errors[0].detail
    assert result.stats.unknown_link_packets == result.stats.records == len(FRAMES)
