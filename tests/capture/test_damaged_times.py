"""A damaged record time inside 1990..2100 (issue 38.5): one time years away from its neighbours is a
``ts_out_of_line`` row and its packet takes the next record's time, so the capture's window stays that of
the packets; a real jump of the clock (the later packets 30 days on) is kept as it is.

Bad input tried, on real captures of a RabbitMQ broker (tests/data/broker) and their pcapng copies: a flipped
high bit of one record's seconds (the first, a middle and the last record), every bit 20..31 of a middle
record, the seconds 0 and 2^32 - 1, two records damaged alike in a row, and the later half shifted by 30 days.
"""

from __future__ import annotations

import pytest
from capture_builders import epb, idb, pcap_bytes, read_pcap_frames, shb
from capture_helpers import DATA, read_all, write
from test_splits import assert_splits_equal_single_pass

from amqplens.decode import clock

FIXTURE = DATA / "broker" / "publish_confirms.pcap"
FRAMES = read_pcap_frames(FIXTURE)
DAY = 86_400
SPLIT_SIZES = [200, 1500, 9000]


def _offsets(frames):
    out, pos = [], 24
    for f in frames:
        out.append(pos)
        pos += 16 + len(f[2])
    return out


OFFSETS = _offsets(FRAMES)


def _us(frame) -> int:
    return frame[0] * 1_000_000 + frame[1]


def _with_seconds(frames, at: int, sec: int):
    return [(sec, *f[1:]) if i == at else f for i, f in enumerate(frames)]


def _times(rows):
    return {r["record_offset"]: r["ts_us"] for r in rows}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    path = tmp_path_factory.mktemp("clean") / "clean.pcap"
    path.write_bytes(pcap_bytes(FRAMES))
    rows, result = read_all(path)
    assert not result.errors and len(FRAMES) > 40
    return _times(rows), result.stats


@pytest.mark.parametrize("at", [0, len(FRAMES) // 2, len(FRAMES) - 1], ids=["first", "middle", "last"])
def test_one_flipped_record_time_is_a_row_and_leaves_the_window_alone(tmp_path, clean, at):
    times, stats = clean
    sec = FRAMES[at][0] ^ (1 << 27)  # 4.25 years away, still inside 1990..2100
    assert clock.in_range(sec * 1_000_000)
    path = write(tmp_path, "x.pcap", pcap_bytes(_with_seconds(FRAMES, at, sec)))
    rows, result = read_all(path)
    assert [(e.offset, e.reason) for e in result.errors] == [(OFFSETS[at], "ts_out_of_line")]
    assert str(sec) in result.errors[0].detail  # the raw value is kept in the row
    got = _times(rows)
    # the packet takes the next record's time (the last one, having none after it, the last good time)
    want = _us(FRAMES[at + 1]) if at + 1 < len(FRAMES) else _us(FRAMES[at - 1])
    if OFFSETS[at] in got:  # a TCP packet
        assert got[OFFSETS[at]] == want
    assert {o: t for o, t in got.items() if o != OFFSETS[at]} == {o: t for o, t in times.items() if o != OFFSETS[at]}
    assert (result.stats.first_ts_us, result.stats.last_ts_us) == (
        min(_us(f) for i, f in enumerate(FRAMES) if i != at), max(_us(f) for i, f in enumerate(FRAMES) if i != at))
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


@pytest.mark.parametrize("sec", [*(FRAMES[20][0] ^ (1 << b) for b in range(20, 32)), 0, 0xFFFFFFFF])
def test_any_second_a_record_says_reads_without_raising(tmp_path, clean, sec):
    times, stats = clean
    path = write(tmp_path, "x.pcap", pcap_bytes(_with_seconds(FRAMES, 20, sec)))
    rows, result = read_all(path)
    assert [e.reason for e in result.errors] in (["ts_out_of_line"], ["ts_out_of_range"])
    assert (result.stats.first_ts_us, result.stats.last_ts_us) == (stats.first_ts_us, stats.last_ts_us)
    assert len(rows) == len(times)


def test_two_records_damaged_alike_in_a_row_stay_as_they_say(tmp_path, clean):
    """Not a lone time: two neighbours agree with each other, so the rule keeps them (documented limit)."""
    frames = _with_seconds(_with_seconds(FRAMES, 20, FRAMES[20][0] + 400 * DAY), 21, FRAMES[21][0] + 400 * DAY)
    rows, result = read_all(write(tmp_path, "x.pcap", pcap_bytes(frames)))
    assert not result.errors


def test_later_packets_thirty_days_on_are_a_real_jump(tmp_path, clean):
    times, stats = clean
    half = len(FRAMES) // 2
    frames = [(f[0] + 30 * DAY, *f[1:]) if i >= half else f for i, f in enumerate(FRAMES)]
    path = write(tmp_path, "x.pcap", pcap_bytes(frames))
    rows, result = read_all(path)
    assert not result.errors
    assert _times(rows) == {o: t + (30 * DAY * 1_000_000 if o >= OFFSETS[half] else 0) for o, t in times.items()}
    assert result.stats.last_ts_us == stats.last_ts_us + 30 * DAY * 1_000_000
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)


def test_pcapng_record_years_away(tmp_path, clean):
    times, _ = clean
    at = len(FRAMES) // 3
    blocks = [epb("<", 0, _us(f) + (5 * 366 * DAY * 1_000_000 if i == at else 0), f[2], f[3]) for i, f in enumerate(FRAMES)]
    path = write(tmp_path, "x.pcapng", shb("<") + idb("<", 1) + b"".join(blocks))
    rows, result = read_all(path)
    assert [e.reason for e in result.errors] == ["ts_out_of_line"]
    assert sorted(r["ts_us"] for r in rows) == sorted(
        t if i != at else _us(FRAMES[at + 1]) for i, t in enumerate(_us(f) for f in FRAMES) if OFFSETS[i] in times)
    for size in SPLIT_SIZES:
        assert_splits_equal_single_pass(path, size)
