"""Byte-range splits: the union of all splits equals one pass over the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from capture_builders import epb, idb, pcap_bytes, read_pcap_frames, shb
from capture_helpers import ALL_CAPTURES, DATA, read_all, read_in_splits, rows_of, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplens.decode.capture import SplitStats, plan_splits, read_split

FRAMES = read_pcap_frames(DATA / "capture" / "lo_us.pcap")


def _synthetic(tmp_path) -> list:
    """Variants the real captures lack: big-endian pcap, nanosecond big-endian pcapng."""
    be_pcap = write(tmp_path, "be.pcap", pcap_bytes([(s, f * 1000, d, o) for s, f, d, o in FRAMES], endian=">", nanos=True))
    blocks = [shb(">"), idb(">", 1, tsresol=9)] + [epb(">", 0, (s * 1_000_000 + f) * 1000, d, o) for s, f, d, o in FRAMES]
    be_ng = write(tmp_path, "be.pcapng", b"".join(blocks))
    return [be_pcap, be_ng]


def _merged(stats: list[SplitStats]) -> SplitStats:
    total = SplitStats()
    for s in stats:
        total = total.merge(s)
    return total


def assert_splits_equal_single_pass(path, split_size: int) -> None:
    single, result = read_all(path)
    rows, stats, errors = read_in_splits(path, split_size)
    assert [r["record_offset"] for r in rows] == [r["record_offset"] for r in single], f"split size {split_size}"
    assert rows == single
    assert [(e.offset, e.length, e.reason) for e in errors] == [(e.offset, e.length, e.reason) for e in result.errors]
    merged = _merged(stats)
    assert merged.bytes_read == path.stat().st_size == result.stats.bytes_read
    expected = dataclasses.asdict(result.stats)
    assert dataclasses.asdict(merged) == expected


def test_plan_covers_the_file(tmp_path):
    path = DATA / "capture" / "lo_us.pcap"
    size = path.stat().st_size
    splits = plan_splits(path, 1000)
    assert splits[0][0] == 0 and splits[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:]))
    assert all(0 < end - start <= 1000 for start, end in splits)
    assert plan_splits(path, 10 * size) == [(0, size)]
    assert plan_splits(write(tmp_path, "empty", b""), 100) == [(0, 0)]
    with pytest.raises(ValueError):
        plan_splits(path, 0)


@pytest.mark.parametrize("split_size", [64, 257, 1024, 4096, 65536])
@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_capture_in_splits(path, split_size):
    assert_splits_equal_single_pass(path, split_size)


@pytest.mark.parametrize(
    "name, split_size",
    [("deepflow_amqp091_amqplib.pcap", n) for n in (1, 7, 16, 24, 25, 40)]
    + [("adverb_amqp10_hello_world_qpidd_ipv6.pcapng", n) for n in (12, 28, 40)],
)
def test_tiny_splits_on_small_captures(name, split_size):
    assert_splits_equal_single_pass(DATA / "public" / name, split_size)


# 66 and 67 put boundaries just after the start of small big-endian blocks, where
# the blocks also chain when read little-endian 3 bytes on (a bug once).
@pytest.mark.parametrize("split_size", [64, 66, 67, 101, 250, 999, 8192])
def test_synthetic_variants_in_splits(tmp_path, split_size):
    for path in _synthetic(tmp_path):
        assert_splits_equal_single_pass(path, split_size)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split_size=st.integers(min_value=48, max_value=6000), index=st.integers(0, len(ALL_CAPTURES) - 1))
def test_any_split_size(split_size, index):
    assert_splits_equal_single_pass(ALL_CAPTURES[index], split_size)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split_size=st.integers(min_value=40, max_value=3000))
def test_any_split_size_synthetic(tmp_path_factory, split_size):
    for path in _synthetic(tmp_path_factory.mktemp("synthetic")):
        assert_splits_equal_single_pass(path, split_size)


def test_a_split_owns_records_starting_in_its_range():
    path = DATA / "capture" / "lo_us.pcap"
    single, _ = read_all(path)
    for start, end in plan_splits(path, 5000):
        offsets = [r["record_offset"] for r in rows_of(read_split(path, "cap", start, end))]
        # Records past ``end`` only when the next split could not have found them (none here).
        assert all(start <= o < end for o in offsets)


def test_batches_are_bounded_and_match_the_schema():
    import pyarrow as pa

    from amqplens.decode.capture import PACKET_SCHEMA

    path = DATA / "capture" / "lo_us.pcap"
    batches = list(read_split(path, "cap", 0, path.stat().st_size, batch_rows=7))
    assert all(0 < len(b["ts_us"]) <= 7 for b in batches)
    table = pa.Table.from_batches([pa.RecordBatch.from_pydict(b, schema=PACKET_SCHEMA) for b in batches])
    assert table.schema == PACKET_SCHEMA and table.num_rows == sum(len(b["ts_us"]) for b in batches)


def test_result_can_be_iterated_again():
    path = DATA / "public" / "deepflow_amqp091_amqplib.pcap"
    result = read_split(path, "cap", 0, path.stat().st_size)
    assert rows_of(result) == rows_of(result) and result.stats.records == 24


def _resident_kib_of(path) -> int:
    """Rss (KiB) of this process's mappings of ``path``, from /proc/self/smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
                inside = len(head) >= 6 and head[-1] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc smaps")
def test_a_long_split_keeps_few_pages_of_the_file_resident(tmp_path, monkeypatch):
    """Memory stays flat as splits grow: the pages behind the read position leave the worker's RSS.

    A 24 MB generated capture read as one split: without releasing, every page read
    stays resident until the split ends (measured here too, as the control). With
    ``RELEASE_STEP`` at 2 MiB, the file's resident pages seen at each batch stay
    within a few steps, and the rows are the same as the unreleased read's.
    """
    from amqplens.decode.capture import splits
    from tools.gen_capture import generate

    path = tmp_path / "long.pcap"
    generate(path, 24, seed=3)
    size = path.stat().st_size

    def read(step):
        monkeypatch.setattr(splits, "RELEASE_STEP", step)
        peak, rows = 0, []
        for batch in read_split(path, "cap", 0, size, batch_rows=512):
            peak = max(peak, _resident_kib_of(path))
            rows.append(batch)
        return peak, rows

    kept_peak, kept_rows = read(1 << 62)  # never releases
    peak, rows = read(2 << 20)
    assert kept_peak > 16 * 1024, kept_peak  # control: the unreleased read held most of the file
    assert peak < 8 * 1024, peak
    assert rows == kept_rows
