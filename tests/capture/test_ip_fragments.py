"""IP fragments: reassembly within a split, in bounded memory."""

from __future__ import annotations

import random

import pytest
from capture_builders import ethernet, ipv4_fragments, ipv6_fragments, pcap_bytes, read_pcap_frames
from capture_helpers import DATA, assert_matches_tshark, needs_tshark, read_all, read_in_splits, write

from amqplens.decode.capture.ip import Fragment, FragmentBuffer

FRAMES = read_pcap_frames(DATA / "capture" / "lo_us.pcap")
REFERENCE, _ = read_all(DATA / "capture" / "lo_us.pcap")


def _fragmented(frames, chunk: int, order=lambda frags: frags):
    """Records where every IP packet longer than ``chunk`` is sent as fragments."""
    records = []
    for i, (sec, frac, data, _) in enumerate(frames):
        ip = data[14:]
        if len(ip) - 40 <= chunk:
            records.append((sec, frac, data))
            continue
        frags = ipv4_fragments(ip, chunk, ident=i) if ip[0] >> 4 == 4 else ipv6_fragments(ip, chunk, ident=i)
        records.extend((sec, frac, ethernet(f)) for f in order(frags))
    return records


def _compare_to_reference(rows):
    keys = ("ts_us", "src_ip", "dst_ip", "src_port", "dst_port", "seq", "ack", "tcp_flags", "window", "payload")
    assert [tuple(r[k] for k in keys) for r in rows] == [tuple(r[k] for k in keys) for r in REFERENCE]


@pytest.mark.parametrize("chunk", [8, 512, 1000])
def test_fragments_in_order(tmp_path, chunk):
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(_fragmented(FRAMES, chunk))))
    stats = result.stats
    assert result.errors == [] and stats.ip_fragments > 0
    assert stats.ip_fragments_unreassembled == 0
    assert stats.records == stats.tcp_packets + stats.non_tcp_packets + stats.ip_fragments - stats.ip_datagrams_reassembled
    _compare_to_reference(rows)


def test_fragments_out_of_order_and_duplicated(tmp_path):
    rng = random.Random(7)

    def shuffle_and_repeat(frags):
        frags = frags + frags[:1]  # one fragment sent twice
        rng.shuffle(frags)
        return frags

    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(_fragmented(FRAMES, 256, shuffle_and_repeat))))
    assert result.stats.ip_fragments_unreassembled > 0  # only the stray duplicates, after their datagram completed
    _compare_to_reference(rows)


@needs_tshark
@pytest.mark.parametrize("chunk", [8, 512])
def test_reassembly_matches_tshark(tmp_path, chunk):
    assert_matches_tshark(write(tmp_path, "x.pcap", pcap_bytes(_fragmented(FRAMES, chunk))))


def test_missing_fragment_leaves_datagram_unreassembled(tmp_path):
    big = next(f for f in FRAMES if f[2][12:14] == b"\x08\x00" and len(f[2]) > 1400)
    frags = ipv4_fragments(big[2][14:], 400)
    records = [(1700000000, i, ethernet(f)) for i, f in enumerate(frags) if i != 1]
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(records)))
    assert rows == []
    assert result.stats.ip_fragments == result.stats.ip_fragments_unreassembled == len(frags) - 1


def test_fragment_cut_by_snaplen_marks_payload_truncated(tmp_path):
    big = next(f for f in FRAMES if f[2][12:14] == b"\x08\x00" and len(f[2]) > 1400)
    frags = [ethernet(f) for f in ipv4_fragments(big[2][14:], 600)]
    records = [(1700000000, 0, frags[0]), (1700000000, 1, frags[1][:100], len(frags[1])), (1700000000, 2, frags[2])]
    rows, _ = read_all(write(tmp_path, "x.pcap", pcap_bytes(records)))
    assert len(rows) == 1 and rows[0]["payload_truncated"]
    original = next(r for r in REFERENCE if r["seq"] == rows[0]["seq"] and r["src_port"] == rows[0]["src_port"])
    assert original["payload"].startswith(rows[0]["payload"]) and len(rows[0]["payload"]) < len(original["payload"])


def test_ipv6_atomic_fragment(tmp_path):
    v6 = next(f for f in FRAMES if f[2][12:14] == b"\x86\xdd" and len(f[2]) > 200)
    (atomic,) = ipv6_fragments(v6[2][14:], 65000)
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes([(1700000000, 0, ethernet(atomic))])))
    assert len(rows) == 1 and result.stats.ip_datagrams_reassembled == 1


def test_fragments_across_a_split_boundary_are_counted_not_lost_silently(tmp_path):
    path = write(tmp_path, "x.pcap", pcap_bytes(_fragmented(FRAMES, 512)))
    single, result = read_all(path)
    rows, stats, _ = read_in_splits(path, 4096)
    assert {r["record_offset"] for r in rows} <= {r["record_offset"] for r in single}
    lost = len(single) - len(rows)
    assert sum(s.ip_fragments_unreassembled for s in stats) >= lost
    assert sum(s.ip_fragments for s in stats) == result.stats.ip_fragments


def _frag(key, offset, more, proto=6):
    return Fragment(key, offset, more, proto)


def test_buffer_completes_out_of_order():
    buf = FragmentBuffer()
    assert buf.add(_frag("a", 16, False), b"C" * 4, 4) is None
    assert buf.add(_frag("a", 0, True), b"A" * 8, 8) is None
    assert buf.add(_frag("a", 8, True), b"B" * 8, 8) == (6, b"A" * 8 + b"B" * 8 + b"CCCC", False)
    assert buf.pending == {} and buf.nbytes == 0


def test_buffer_first_arrival_wins_on_overlap():
    buf = FragmentBuffer()
    buf.add(_frag("a", 0, True), b"A" * 16, 16)
    assert buf.add(_frag("a", 8, False), b"B" * 16, 16) == (6, b"A" * 16 + b"B" * 8, False)


def test_buffer_is_bounded_by_datagram_count():
    buf = FragmentBuffer(max_datagrams=2)
    for key in "abc":
        buf.add(_frag(key, 0, True), b"x" * 8, 8)
    assert list(buf.pending) == ["b", "c"] and buf.unreassembled == 1
    buf.close()
    assert buf.unreassembled == 3 and buf.nbytes == 0


def test_buffer_is_bounded_by_bytes():
    buf = FragmentBuffer(max_bytes=100)
    for i in range(5):
        buf.add(_frag(i, 0, True), b"x" * 40, 40)
    assert buf.nbytes <= 100 and buf.unreassembled == 3


def test_buffer_rejects_fragments_beyond_the_largest_datagram():
    buf = FragmentBuffer()
    assert buf.add(_frag("a", 65528, False), b"x" * 200, 200) is None
    assert buf.unreassembled == 1 and buf.pending == {}
