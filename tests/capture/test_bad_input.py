"""Bad input: every case is an error row with a clear reason, never an exception or a stop."""

from __future__ import annotations

import struct

import pytest
from capture_builders import epb, idb, pcap_bytes, read_pcap_frames, shb
from capture_helpers import DATA, read_all, read_in_splits, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_splits import assert_splits_equal_single_pass

from amqplens.decode.capture import plan_splits, read_split, sniff_format

FRAMES = read_pcap_frames(DATA / "capture" / "lo_us.pcap")[:40]
PCAP = pcap_bytes(FRAMES)
PCAP_OFFSETS = []  # record offsets of PCAP
_pos = 24
for _f in FRAMES:
    PCAP_OFFSETS.append(_pos)
    _pos += 16 + len(_f[2])

NG_HEAD = shb("<") + idb("<", 1)
NG_BLOCKS = [epb("<", 0, s * 1_000_000 + f, d, o) for s, f, d, o in FRAMES]
PCAPNG = NG_HEAD + b"".join(NG_BLOCKS)
NG_OFFSETS = [len(NG_HEAD) + sum(len(b) for b in NG_BLOCKS[:i]) for i in range(len(NG_BLOCKS))]

SPLIT_SIZES = [64, 300, 1500, 10000]


def _reasons(result):
    return [(e.offset, e.length, e.reason) for e in result.errors]


def _record_offsets(rows):
    return [r["record_offset"] for r in rows]


def _tcp_offsets(offsets, skip=()):
    reference, _ = read_all(DATA / "capture" / "lo_us.pcap")
    tcp_indexes = {r["record_offset"] for r in reference}
    pcap_offsets = [24]
    for f in read_pcap_frames(DATA / "capture" / "lo_us.pcap"):
        pcap_offsets.append(pcap_offsets[-1] + 16 + len(f[2]))
    return [o for i, o in enumerate(offsets) if pcap_offsets[i] in tcp_indexes and i not in skip]


def test_empty_file(tmp_path):
    path = write(tmp_path, "empty.pcap", b"")
    rows, result = read_all(path)
    assert rows == [] and _reasons(result) == [(0, 0, "empty_file")]
    assert result.stats.format is None and sniff_format(path) is None
    assert plan_splits(path, 1000) == [(0, 0)]


@pytest.mark.parametrize("content", [b"hello, this is not a capture\n" * 20, b"ab", b"\x00" * 64])
def test_not_a_capture(tmp_path, content):
    path = write(tmp_path, "notes.txt", content)
    rows, result = read_all(path)
    assert rows == [] and result.stats.format is None and sniff_format(path) is None
    assert [e.reason for e in result.errors] == ["not_a_capture"]
    assert result.errors[0].raw == content[:4096]
    # Only the first split reports it.
    for start, end in plan_splits(path, 100)[1:]:
        later = read_split(path, "cap", start, end)
        assert list(later) == [] and later.errors == []


@pytest.mark.parametrize(
    "content, reason",
    [
        (PCAP[:10], "truncated_file_header"),
        (PCAP[:4] + struct.pack("<HH", 3, 0) + PCAP[8:], "bad_file_header"),
        (shb("<")[:20], "truncated_file_header"),
        (b"\x0a\x0d\x0d\x0a" + bytes(40), "not_a_capture"),  # "\\n\\r\\r\\n" alone may be text
    ],
    ids=["pcap-short-header", "pcap-version-3", "pcapng-short-shb", "pcapng-no-byte-order-magic"],
)
def test_bad_file_header(tmp_path, content, reason):
    rows, result = read_all(write(tmp_path, "x.cap", content))
    assert rows == [] and [e.reason for e in result.errors] == [reason]


@pytest.mark.parametrize("cut", [5, 16 + 20, -1])
def test_pcap_truncated_last_record(tmp_path, cut):
    last = PCAP_OFFSETS[-1]
    cut = cut % (len(PCAP) - last)  # -1: all but the last byte
    path = write(tmp_path, "x.pcap", PCAP[: last + cut])
    rows, result = read_all(path)
    assert _reasons(result) == [(last, cut, "truncated_record")]
    assert _record_offsets(rows) == _tcp_offsets(PCAP_OFFSETS[:-1])
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


@pytest.mark.parametrize("cut", [6, 40, -1])
def test_pcapng_truncated_last_block(tmp_path, cut):
    last = NG_OFFSETS[-1]
    cut = cut % (len(PCAPNG) - last)
    path = write(tmp_path, "x.pcapng", PCAPNG[: last + cut])
    rows, result = read_all(path)
    assert _reasons(result) == [(last, cut, "truncated_block")]
    assert _record_offsets(rows) == _tcp_offsets(NG_OFFSETS[:-1])
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def _corrupt_pcap(index: int, patch) -> bytes:
    data = bytearray(PCAP)
    patch(data, PCAP_OFFSETS[index])
    return bytes(data)


PCAP_CORRUPTIONS = {
    "caplen-huge": lambda d, o: struct.pack_into("<I", d, o + 8, 0xFFFFFFF0),
    "caplen-over-origlen": lambda d, o: struct.pack_into("<I", d, o + 12, 1),
    "usec-too-big": lambda d, o: struct.pack_into("<I", d, o + 4, 2_000_000),
    "random-header": lambda d, o: d.__setitem__(slice(o, o + 16), bytes.fromhex("deadbeefcafebabe0123456789abcdef")),
}


@pytest.mark.parametrize("kind", PCAP_CORRUPTIONS)
def test_pcap_corrupt_record_header_in_the_middle(tmp_path, kind):
    bad = 17
    path = write(tmp_path, "x.pcap", _corrupt_pcap(bad, PCAP_CORRUPTIONS[kind]))
    rows, result = read_all(path)
    skipped = PCAP_OFFSETS[bad + 1] - PCAP_OFFSETS[bad]
    assert _reasons(result) == [(PCAP_OFFSETS[bad], skipped, "bad_record_header")]
    assert result.errors[0].raw == path.read_bytes()[PCAP_OFFSETS[bad] : PCAP_OFFSETS[bad + 1]]
    assert "skipped" in result.errors[0].detail
    assert _record_offsets(rows) == _tcp_offsets(PCAP_OFFSETS, skip={bad})
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_pcap_record_with_odd_timestamp_is_still_a_record(tmp_path):
    """A record header claiming 1970-01-01T00:01:40 (outside 1990..2100): the record is read, its time is one
    ts_out_of_range row, and the packet takes the time of the record after it (its place in time order)."""
    path = write(tmp_path, "x.pcap", _corrupt_pcap(17, lambda d, o: struct.pack_into("<I", d, o, 100)))
    rows, result = read_all(path)
    assert _reasons(result) == [(PCAP_OFFSETS[17], 0, "ts_out_of_range")] and len(rows) == len(_tcp_offsets(PCAP_OFFSETS))
    ts = {r["record_offset"]: r["ts_us"] for r in rows}
    assert ts[PCAP_OFFSETS[17]] == ts[PCAP_OFFSETS[18]]
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_pcap_garbage_between_records(tmp_path):
    junk = b"\x13\x37" * 50 + b"!"
    at = PCAP_OFFSETS[20]
    path = write(tmp_path, "x.pcap", PCAP[:at] + junk + PCAP[at:])
    rows, result = read_all(path)
    assert _reasons(result) == [(at, len(junk), "bad_record_header")]
    assert len(rows) == len(_tcp_offsets(PCAP_OFFSETS))
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_error_rows_keep_at_most_max_error_bytes(tmp_path):
    junk = bytes(range(256)) * 40
    at = PCAP_OFFSETS[5]
    path = write(tmp_path, "x.pcap", PCAP[:at] + junk + PCAP[at:])
    result = read_split(path, "cap", 0, path.stat().st_size, max_error_bytes=100)
    list(result)
    assert [(e.offset, e.length) for e in result.errors] == [(at, len(junk))]
    assert result.errors[0].raw == junk[:100]


PCAPNG_CORRUPTIONS = {
    "length-not-multiple-of-4": lambda d, o: struct.pack_into("<I", d, o + 4, struct.unpack_from("<I", d, o + 4)[0] + 2),
    "length-too-small": lambda d, o: struct.pack_into("<I", d, o + 4, 8),
    "length-past-eof": lambda d, o: struct.pack_into("<I", d, o + 4, 0x00FFFFF0),
    "trailer-differs": lambda d, o: struct.pack_into("<I", d, o + struct.unpack_from("<I", d, o + 4)[0] - 4, 4),
}


@pytest.mark.parametrize("kind", PCAPNG_CORRUPTIONS)
def test_pcapng_bad_block_length(tmp_path, kind):
    bad = 11
    data = bytearray(PCAPNG)
    PCAPNG_CORRUPTIONS[kind](data, NG_OFFSETS[bad])
    path = write(tmp_path, "x.pcapng", bytes(data))
    rows, result = read_all(path)
    assert _reasons(result) == [(NG_OFFSETS[bad], NG_OFFSETS[bad + 1] - NG_OFFSETS[bad], "bad_block_length")]
    assert _record_offsets(rows) == _tcp_offsets(NG_OFFSETS, skip={bad})
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_pcapng_packet_block_caplen_beyond_block(tmp_path):
    bad = 3
    data = bytearray(PCAPNG)
    struct.pack_into("<I", data, NG_OFFSETS[bad] + 20, 60000)
    rows, result = read_all(write(tmp_path, "x.pcapng", bytes(data)))
    assert [(e.offset, e.reason) for e in result.errors] == [(NG_OFFSETS[bad], "bad_packet_block")]
    assert _record_offsets(rows) == _tcp_offsets(NG_OFFSETS, skip={bad})


def test_pcapng_bad_section_header_length_still_reads_packets(tmp_path):
    data = bytearray(PCAPNG)
    struct.pack_into("<I", data, 4, 30)  # not a multiple of 4
    rows, result = read_all(write(tmp_path, "x.pcapng", bytes(data)))
    assert [(e.offset, e.reason) for e in result.errors] == [(0, "bad_block_length")]
    assert _record_offsets(rows) == _tcp_offsets(NG_OFFSETS)


def test_pcapng_unknown_link_type_reported_once_per_interface(tmp_path):
    blocks = [shb("<"), idb("<", 1), idb("<", 147)]
    for i, (s, f, d, o) in enumerate(FRAMES):
        blocks.append(epb("<", i % 2, s * 1_000_000 + f, d, o))
    path = write(tmp_path, "x.pcapng", b"".join(blocks))
    rows, result = read_all(path)
    idb_offset = len(blocks[0]) + len(blocks[1])
    assert _reasons(result) == [(idb_offset, len(blocks[2]), "unknown_link_type")]
    assert result.stats.unknown_link_packets == len(FRAMES) // 2
    assert result.stats.link_types == {1, 147}
    assert all(r["record_offset"] in NG_OFFSETS_FOR(blocks, even=True) for r in rows)
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def NG_OFFSETS_FOR(blocks, even: bool):
    offsets, pos = set(), sum(len(b) for b in blocks[:3])
    for i, b in enumerate(blocks[3:]):
        if (i % 2 == 0) == even:
            offsets.add(pos)
        pos += len(b)
    return offsets


def test_pcapng_packet_on_undefined_interface(tmp_path):
    blocks = [shb("<"), idb("<", 1)] + [epb("<", 0 if i != 5 else 3, s * 1_000_000 + f, d, o) for i, (s, f, d, o) in enumerate(FRAMES)]
    path = write(tmp_path, "x.pcapng", b"".join(blocks))
    rows, result = read_all(path)
    assert [(e.offset, e.reason) for e in result.errors] == [(sum(map(len, blocks[:7])), "unknown_interface")]
    assert result.stats.unknown_link_packets == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["pcap", "pcapng"]),
    edits=st.lists(st.tuples(st.integers(0, len(PCAP) - 1), st.binary(min_size=1, max_size=24)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, len(PCAP))),
    split_size=st.integers(200, 5000),
)
def test_mangled_files_never_raise(tmp_path_factory, which, edits, cut, split_size):
    data = bytearray(PCAP if which == "pcap" else PCAPNG)
    for at, patch in edits:
        data[at : at + len(patch)] = patch
    path = write(tmp_path_factory.mktemp("fuzz"), "x.cap", bytes(data[:cut]))
    for read in (lambda: read_all(path), lambda: read_in_splits(path, split_size)):
        rows, *rest = read()
        errors = rest[0].errors if len(rest) == 1 else rest[1]
        assert all(e.reason != "reader_error" for e in errors), errors
        assert all(0 <= e.offset <= len(data) and e.length >= 0 for e in errors)
        assert all(len(r["payload"]) <= 65535 for r in rows)


def test_pcap_whose_first_record_has_a_bogus_clock(tmp_path):
    frames = [(0, 0, FRAMES[0][2], FRAMES[0][3])] + FRAMES[1:]
    path = write(tmp_path, "x.pcap", pcap_bytes(frames))
    rows, result = read_all(path)
    # the record's time (1970-01-01) is one row; the packet takes the next record's time
    assert _reasons(result) == [(24, 0, "ts_out_of_range")] and len(rows) == len(_tcp_offsets(PCAP_OFFSETS))
    assert rows[0]["ts_us"] == FRAMES[1][0] * 1_000_000 + FRAMES[1][1]
    for size in SPLIT_SIZES:  # no later split can trust a chain, so the first one reads on
        assert_splits_equal_single_pass(path, size)


def test_pcap_bytes_lost_inside_a_record(tmp_path):
    """A record shorter than its header says: the walk backs up and finds the next true record."""
    bad = 17
    cut_at = PCAP_OFFSETS[bad + 1] - 6  # inside the record's TCP payload
    path = write(tmp_path, "x.pcap", PCAP[:cut_at] + PCAP[cut_at + 3 :])
    rows, result = read_all(path)
    assert [(e.length, e.reason) for e in result.errors] == [(0, "bad_record_header")]
    assert "earlier" in result.errors[0].detail
    shifted = [o if i <= bad else o - 3 for i, o in enumerate(PCAP_OFFSETS)]
    assert _record_offsets(rows) == _tcp_offsets(shifted)
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_pcapng_skip_across_a_section_header(tmp_path):
    """A resync that jumps over an SHB takes up that section (byte order, interfaces)."""
    second = [shb(">"), idb(">", 1)] + [epb(">", 0, s * 1_000_000 + f, d, o) for s, f, d, o in FRAMES]
    data = bytearray(PCAPNG + b"".join(second))
    struct.pack_into("<I", data, NG_OFFSETS[-1] + 4, 1000)  # last block of section 1: bad length
    first_be = len(PCAPNG) + len(second[0]) + len(second[1])
    struct.pack_into(">I", data, first_be + len(second[2]) - 4, 1)  # first EPB of section 2: bad trailer
    path = write(tmp_path, "x.pcapng", bytes(data))
    rows, result = read_all(path)
    assert [e.reason for e in result.errors] == ["bad_block_length"]
    tcp = len(_tcp_offsets(NG_OFFSETS))
    assert tcp * 2 - 2 <= len(rows) <= tcp * 2  # all but the two damaged blocks (if they were TCP)
    assert result.stats.unknown_link_packets == 0
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)
