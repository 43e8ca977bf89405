"""The pcapng container: sections, interfaces, timestamp resolutions, block types."""

from __future__ import annotations

from fractions import Fraction

import pytest
from capture_builders import block, epb, idb, isb, linux_sll, nrb, obsolete_pb, read_pcap_frames, shb, spb
from capture_helpers import DATA, assert_matches_tshark, needs_tshark, read_all, read_in_splits, write

from amqplens.decode.capture import sniff_format

FRAMES = read_pcap_frames(DATA / "capture" / "lo_us.pcap")
REFERENCE, _ = read_all(DATA / "capture" / "lo_us.pcap")


def _us(frame) -> int:
    return frame[0] * 1_000_000 + frame[1]


def _units(ts_us: int, tsresol: int | None) -> int:
    """Timestamp units of an IDB with ``tsresol`` for a microsecond timestamp (truncating)."""
    if tsresol is None:
        return ts_us
    per_second = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    return int(Fraction(ts_us, 1_000_000) * per_second)


def _expected_us(units: int, tsresol: int | None, tsoffset: int = 0) -> int:
    per_second = 1_000_000 if tsresol is None else 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10**tsresol
    return int(Fraction(units * 1_000_000, per_second)) + tsoffset * 1_000_000


def _without_offsets(rows, *also):
    return [{k: v for k, v in r.items() if k != "record_offset" and k not in also} for r in rows]


def _section(endian="<", frames=FRAMES, *, tsresol=None, tsoffset=None, linktype=1, wrap=lambda d: d):
    blocks = [shb(endian), idb(endian, linktype, tsresol=tsresol, tsoffset=tsoffset)]
    for frame in frames:
        data = wrap(frame[2])
        blocks.append(epb(endian, 0, _units(_us(frame), tsresol), data, frame[3] - len(frame[2]) + len(data)))
    return b"".join(blocks)


@pytest.mark.parametrize("endian", ["<", ">"], ids=["little", "big"])
def test_byte_orders(tmp_path, endian):
    path = write(tmp_path, "x.pcapng", _section(endian))
    rows, result = read_all(path)
    assert sniff_format(path) == "pcapng" and result.errors == []
    assert _without_offsets(rows) == _without_offsets(REFERENCE)
    assert rows[0]["record_offset"] == len(shb(endian)) + len(idb(endian))


@needs_tshark
@pytest.mark.parametrize("endian", ["<", ">"], ids=["little", "big"])
def test_byte_orders_match_tshark(tmp_path, endian):
    assert_matches_tshark(write(tmp_path, "x.pcapng", _section(endian)))


@pytest.mark.parametrize(
    "tsresol, tsoffset",
    [(None, None), (3, None), (6, None), (9, None), (0, None), (0x80 | 20, None), (0x80 | 10, None), (0x80 | 32, None), (9, -3600), (6, 86400)],
)  # fmt: skip
def test_timestamp_resolution_and_offset(tmp_path, tsresol, tsoffset):
    rows, result = read_all(write(tmp_path, "x.pcapng", _section(tsresol=tsresol, tsoffset=tsoffset)))
    tcp_frames = [f for f, r in zip(FRAMES, _frames_with_rows()) if r]
    expected = [_expected_us(_units(_us(f), tsresol), tsresol, tsoffset or 0) for f in tcp_frames]
    assert [r["ts_us"] for r in rows] == expected
    assert result.stats.first_ts_us == min(_expected_us(_units(_us(f), tsresol), tsresol, tsoffset or 0) for f in FRAMES)


def _frames_with_rows():
    offsets = {r["record_offset"] for r in REFERENCE}
    pos, has_row = 24, []
    for frame in FRAMES:
        has_row.append(pos in offsets)
        pos += 16 + len(frame[2])
    return has_row


@needs_tshark
@pytest.mark.parametrize("tsresol", [3, 9, 0x80 | 20], ids=["ms", "ns", "2^-20"])
def test_timestamp_resolutions_match_tshark(tmp_path, tsresol):
    assert_matches_tshark(write(tmp_path, "x.pcapng", _section(tsresol=tsresol, tsoffset=100)))


def _multi_section_file():
    first, second, third = FRAMES[:30], FRAMES[30:60], FRAMES[60:]
    section3 = [shb("<"), idb("<", 1), idb("<", 101, tsresol=9)]
    for i, frame in enumerate(third):
        if i % 2:
            section3.append(epb("<", 1, _units(_us(frame), 9), frame[2][14:], frame[3] - 14))
        else:
            section3.append(epb("<", 0, _us(frame), frame[2], frame[3]))
    return (
        _section("<", first)
        + _section(">", second, tsresol=9, linktype=113, wrap=lambda d: linux_sll(d[14:]))
        + b"".join(section3)
    )


def test_several_sections_byte_orders_and_interfaces(tmp_path):
    rows, result = read_all(write(tmp_path, "x.pcapng", _multi_section_file()))
    assert result.errors == []
    assert result.stats.link_types == {1, 113, 101}
    # Linux cooked headers are 2 bytes longer than Ethernet's, raw IP has none.
    assert _without_offsets(rows, "wire_len") == _without_offsets(REFERENCE, "wire_len")


@needs_tshark
def test_several_sections_match_tshark(tmp_path):
    assert_matches_tshark(write(tmp_path, "x.pcapng", _multi_section_file()))


@pytest.mark.parametrize("split_size", [64, 100, 333, 1024, 4096])
def test_several_sections_in_splits(tmp_path, split_size):
    path = write(tmp_path, "x.pcapng", _multi_section_file())
    rows, _, errors = read_in_splits(path, split_size)
    assert errors == [] and rows == read_all(path)[0]


def _other_blocks_file():
    blocks = [shb("<", comment=b"made by a test"), idb("<", 1), nrb("<")]
    for i, frame in enumerate(FRAMES):
        blocks.append(epb("<", 0, _us(frame), frame[2], frame[3]))
        if i % 5 == 0:
            blocks.append(block("<", 0x00000BAD, b"\x00\x00\x7f\x00custom data"))  # custom block, copyable
        if i % 7 == 0:
            blocks.append(block("<", 0x7777, b"a block type nobody defined"))
        if i % 11 == 0:
            blocks.append(isb("<", 0, _us(frame)))
    return b"".join(blocks)


def test_unknown_and_non_packet_blocks_are_skipped(tmp_path):
    rows, result = read_all(write(tmp_path, "x.pcapng", _other_blocks_file()))
    assert result.errors == [] and result.stats.records == len(FRAMES)
    assert _without_offsets(rows) == _without_offsets(REFERENCE)


@pytest.mark.parametrize("split_size", [64, 200, 1500])
def test_unknown_blocks_in_splits(tmp_path, split_size):
    path = write(tmp_path, "x.pcapng", _other_blocks_file())
    assert read_in_splits(path, split_size)[0] == read_all(path)[0]


def _spb_and_pb_file(endian="<"):
    blocks = [shb(endian), idb(endian, 1, snaplen=200), idb(endian, 113)]
    for i, frame in enumerate(FRAMES):
        if i % 2:
            blocks.append(spb(endian, frame[2][:200], frame[3]))
        else:
            blocks.append(obsolete_pb(endian, 1, _us(frame), linux_sll(frame[2][14:]), frame[3] + 2))
    return b"".join(blocks)


def _spb_offsets(path, rows) -> set[int]:
    data = path.read_bytes()
    return {r["record_offset"] for r in rows if data[r["record_offset"] : r["record_offset"] + 4] in (b"\3\0\0\0", b"\0\0\0\3")}


@pytest.mark.parametrize("endian", ["<", ">"], ids=["little", "big"])
def test_simple_and_obsolete_packet_blocks(tmp_path, endian):
    path = write(tmp_path, "x.pcapng", _spb_and_pb_file(endian))
    rows, result = read_all(path)
    assert result.errors == [] and result.stats.records == len(FRAMES)
    assert result.stats.link_types == {1, 113}
    assert len(rows) == len(REFERENCE)
    spb = _spb_offsets(path, rows)
    for i, (row, ref) in enumerate(zip(rows, REFERENCE)):
        if row["record_offset"] in spb:  # an SPB: interface 0, cut at its snaplen of 200, no timestamp
            # its time is the next record's (in file order): at or after its true one, at or before the next TCP row's
            assert ref["ts_us"] <= row["ts_us"] <= (rows[i + 1]["ts_us"] if i + 1 < len(rows) else row["ts_us"])
            assert row["wire_len"] == ref["wire_len"]
            assert row["payload"] == ref["payload"][: len(row["payload"])]
            assert row["payload_truncated"] == (ref["wire_len"] > 200)
        else:  # an obsolete PB on interface 1 (Linux cooked)
            assert row["ts_us"] == ref["ts_us"] and row["payload"] == ref["payload"]
            assert row["wire_len"] == ref["wire_len"] + 2


@needs_tshark
def test_simple_and_obsolete_packet_blocks_match_tshark(tmp_path):
    path = write(tmp_path, "x.pcapng", _spb_and_pb_file())
    rows, _ = read_all(path)
    # tshark shows an SPB's missing time as 0; ours takes the previous packet's (its place in time order)
    spb = _spb_offsets(path, rows)
    assert_matches_tshark(path, [r | {"ts_us": 0} if r["record_offset"] in spb else r for r in rows])


def _late_idb_file():
    """Interfaces defined after packets of the section were already written (behind a block nobody knows)."""
    blocks = [shb("<"), idb("<", 1)]
    for i, frame in enumerate(FRAMES):
        if i == 40:
            blocks.append(block("<", 0x7777, b"unknown block type before a late IDB"))
            blocks.append(idb("<", 101, tsresol=3))
        if i > 40 and i % 2:
            blocks.append(epb("<", 1, _us(frame) // 1000, frame[2][14:], frame[3] - 14))
        else:
            blocks.append(epb("<", 0, _us(frame), frame[2], frame[3]))
    return b"".join(blocks)


@pytest.mark.parametrize("split_size", [None, 64, 700, 5000, 40000])
def test_interface_defined_mid_section(tmp_path, split_size):
    path = write(tmp_path, "x.pcapng", _late_idb_file())
    rows, result = read_all(path)
    assert result.errors == [] and result.stats.link_types == {1, 101}
    assert len(rows) == len(REFERENCE)
    if split_size is not None:
        split_rows, _, errors = read_in_splits(path, split_size)
        assert errors == [] and split_rows == rows


@needs_tshark
def test_interface_defined_mid_section_matches_tshark(tmp_path):
    assert_matches_tshark(write(tmp_path, "x.pcapng", _late_idb_file()))


def test_editcap_nanosecond_pcapng_equals_its_pcap():
    rows_ng, _ = read_all(DATA / "capture" / "lo_ns.pcapng")
    rows_pcap, _ = read_all(DATA / "capture" / "lo_ns.pcap")
    assert _without_offsets(rows_ng) == _without_offsets(rows_pcap)
