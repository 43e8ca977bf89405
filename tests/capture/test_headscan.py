"""The compiled header scan (headscan, numba) against the Python reader (read_capture), its reference.

Wherever the scan says it read a capture whole (``clean``), its packets (every column, sorted
as the shuffle path sorts them) and its statistics must equal the Python reader's, and the
Python reader must have written no error row; where it gives up, the capture takes the
Python reader. Tried: every fixture capture; every link type the reader decodes, stacked VLAN
tags, IPv6 extension headers, IPv4 and IPv6 fragments, snaplen-cut and cut-short frames,
non-IP and non-TCP frames; pcapng in both byte orders with timestamp resolutions and offsets,
several interfaces, NRB/ISB blocks, SPB and PB blocks; and random byte damage to fixtures.
"""

from __future__ import annotations

import dataclasses
import glob
import random
import struct

import pyarrow as pa
import pytest

from amqplens.decode.capture import PACKET_SCHEMA, headscan, read_capture
from tests.capture import capture_builders as B
from tests.conftest import DATA

pytestmark = pytest.mark.skipif(headscan.load_kernel() is None, reason="numba is not installed")

CAPTURES = sorted(glob.glob(str(DATA / "**" / "*.pcap*"), recursive=True))
SORT = [("flow_key", "ascending"), ("ts_us", "ascending"), ("record_offset", "ascending")]


def _reference(path):
    r = read_capture(path, "c")
    batches = [pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in PACKET_SCHEMA], schema=PACKET_SCHEMA)
               for cols in r]
    return pa.Table.from_batches(batches, schema=PACKET_SCHEMA).sort_by(SORT), r.stats, r.errors


def agree(path) -> bool:
    """Whether the scan read ``path`` whole; when it did, that it gave the Python reader's packets and statistics."""
    scan = headscan.plan(str(path))
    assert scan is not None
    if not scan.clean:
        return False
    table, stats, errors = _reference(path)
    got = pa.Table.from_batches(list(headscan.read_flows(str(path), "c", dict(enumerate(scan.dflows)), batch_rows=7)),
                                schema=PACKET_SCHEMA)
    assert errors == [], f"the scan read whole what the reader reports: {errors[:1]}"
    assert dataclasses.asdict(scan.stats) == dataclasses.asdict(stats)
    assert got.num_rows == table.num_rows
    for name in table.column_names:
        assert got.column(name).equals(table.column(name)), name
    return True


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.split("/data/")[1])
def test_every_fixture_capture_read_whole_and_the_same(path):
    assert agree(path)


def _tcp(payload: bytes, sport=40000, dport=5672, seq=1, flags=0x18, options=b"") -> bytes:
    off = (20 + len(options)) // 4
    return struct.pack(">HHIIBBHHH", sport, dport, seq, 7, off << 4, flags, 512, 0, 0) + options + payload


def _ipv4(l4: bytes, proto=6, src=b"\x0a\0\0\1", dst=b"\x0a\0\0\2", total=None) -> bytes:
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) if total is None else total, 1, 0, 64, proto, 0, src, dst) + l4


def _ipv6(l4: bytes, proto=6, src=b"\xfe\x80" + bytes(13) + b"\x01", dst=b"\xfe\x80" + bytes(13) + b"\x02") -> bytes:
    return struct.pack(">IHBB16s16s", 6 << 28, len(l4), proto, 64, src, dst) + l4


def _packets():
    """IP packets of several flows, TCP and not, whole and damaged."""
    out = []
    for i in range(3):
        out.append(_ipv4(_tcp(b"AMQP\x00\x00\x09\x01" * (i + 1), sport=40000 + i, seq=10 + i)))
        out.append(_ipv6(_tcp(b"x" * (5 + i), sport=41000 + i)))
        out.append(_ipv4(_tcp(b"", dport=40000 + i, sport=5672, flags=0x10)))
    out.append(_ipv4(b"\0" * 8, proto=17))  # UDP
    out.append(_ipv6(b"\0" * 8, proto=58))  # ICMPv6
    out.append(_ipv4(_tcp(b"abc"), total=0))  # TSO: length from the capture
    out.append(_ipv4(_tcp(b"abcdef"))[:-3])  # cut short by the capture: truncated payload
    out.append(_ipv4(_tcp(b"abc"))[:30])  # TCP header cut short: malformed
    bad_off = bytearray(_ipv4(_tcp(b"abc")))
    bad_off[20 + 12] = 0x30  # data offset 3 words: malformed
    out.append(bytes(bad_off))
    out.append(_ipv4(_tcp(b"opt", options=b"\x01\x01\x01\x01")))
    out.append(B.ipv6_with_ext(_ipv6(_tcp(b"ext")), [B.HOP_BY_HOP, B.DEST_OPTS, B.ROUTING]))
    out.append(B.ipv6_with_ext(_ipv6(_tcp(b"ah")), [(51, bytes([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]))]))
    out.append(_ipv4(_tcp(b"q"))[:12])  # IP header cut short
    out.append(b"\x45")  # one byte
    return out


WRAPPERS = {
    1: lambda ip: B.ethernet(ip),
    0: lambda ip: B.bsd_null(ip),
    12: lambda ip: ip, 14: lambda ip: ip, 101: lambda ip: ip,
    108: lambda ip: B.openbsd_loop(ip),
    113: lambda ip: B.linux_sll(ip),
    276: lambda ip: B.linux_sll2(ip),
}


@pytest.mark.parametrize("linktype", sorted(WRAPPERS))
def test_link_types_and_ip_variants(tmp_path, linktype):
    frames = [WRAPPERS[linktype](ip) for ip in _packets()]
    if linktype == 1:
        frames += [B.ethernet(_packets()[0], vlan_tags=((0x8100, 5),)),
                   B.ethernet(_packets()[1], vlan_tags=((0x88A8, 1), (0x8100, 2))),
                   B.ethernet(_packets()[0], vlan_tags=((0x8100, 1),) * 9),  # too many tags: malformed
                   B.ETH_HEADER + b"\x08\x06" + bytes(28), B.ETH_HEADER[:10]]  # ARP; a cut-short header
    if linktype == 0:
        frames += [B.bsd_null(_packets()[1], ">", 30), B.bsd_null(_packets()[1], "<", 10), b"\x02\0"]
    for endian, nanos in (("<", False), (">", True)):
        path = tmp_path / f"{linktype}{endian}{nanos}.pcap"
        recs = [(1_700_000_000 + i, i * 7, f) for i, f in enumerate(frames)]
        recs.append((1_700_000_100, 5, frames[0][:30], len(frames[0])))  # snaplen-cut record
        path.write_bytes(B.pcap_bytes(recs, linktype=linktype, endian=endian, nanos=nanos))
        assert agree(path)


def test_raw_ip_only_link_types(tmp_path):
    v4 = [p for p in _packets() if p[:1] == b"\x45"]
    v6 = [p for p in _packets() if p[0] >> 4 == 6]
    for linktype, frames in ((228, v4), (229, v6)):
        path = tmp_path / f"{linktype}.pcap"
        path.write_bytes(B.pcap_bytes([(1_700_000_000, i, f) for i, f in enumerate(frames)], linktype=linktype))
        assert agree(path)


@pytest.mark.parametrize("endian", "<>")
def test_pcapng_resolutions_interfaces_and_blocks(tmp_path, endian):
    ip = _packets()
    blocks = [B.shb(endian), B.idb(endian, 1), B.idb(endian, 113, tsresol=9), B.idb(endian, 101, tsresol=3, tsoffset=86400),
              B.idb(endian, 276, tsresol=0x80 | 20), B.nrb(endian)]
    base_us = 1_700_000_000_000_000
    for i, p in enumerate(ip):
        blocks.append(B.epb(endian, 0, base_us + i, B.ethernet(p)))
        blocks.append(B.epb(endian, 1, (base_us + i) * 1000 + 999, B.linux_sll(p)))
        blocks.append(B.epb(endian, 2, (base_us - 86_400_000_000) // 1000 + i, p))
        blocks.append(B.epb(endian, 3, ((base_us + i) << 20) // 1_000_000 + 3, B.linux_sll2(p)))
    blocks.append(B.isb(endian, 0, base_us + 99))
    path = tmp_path / "many.pcapng"
    path.write_bytes(b"".join(blocks))
    assert agree(path)
    for extra in (B.spb(endian, B.ethernet(ip[0])), B.obsolete_pb(endian, 0, base_us, B.ethernet(ip[0]))):
        path.write_bytes(b"".join(blocks) + extra)
        assert not agree(path)  # the Python reader's blocks


def test_fragments_and_unknown_link_types_take_the_reader(tmp_path):
    big = _ipv4(_tcp(b"F" * 64))
    frags = B.ipv4_fragments(big, 24)
    for name, frames, linktype in (("v4frag", [B.ethernet(f) for f in frags], 1),
                                   ("v6frag", [B.ethernet(f) for f in B.ipv6_fragments(_ipv6(_tcp(b"G" * 64)), 24)], 1),
                                   ("dlt147", [B.ethernet(big)], 147)):
        path = tmp_path / f"{name}.pcap"
        path.write_bytes(B.pcap_bytes([(1_700_000_000, i, f) for i, f in enumerate(frames)], linktype=linktype))
        assert not agree(path), name


def test_damaged_fixtures_agree_or_take_the_reader(tmp_path):
    """Random bytes overwritten anywhere in fixture captures (seeded): each mutant is read whole by the scan with the
    reader's packets, or left to the reader; both outcomes occur."""
    rnd = random.Random(33)
    outcomes = {True: 0, False: 0}
    for path in CAPTURES[::3]:
        data = open(path, "rb").read()
        for k in range(12):
            out = bytearray(data)
            for _ in range(rnd.choice((1, 2, 4))):
                at = rnd.randrange(len(out))
                out[at] = rnd.randrange(256)
            mutant = tmp_path / f"m{k}{path[-7:]}"
            mutant.write_bytes(bytes(out))
            outcomes[agree(mutant)] += 1
    assert outcomes[True] > 0 and outcomes[False] > 0, outcomes


def test_bins_balance_by_bytes_largest_first():
    items = [(w, f"f{w}") for w in (10, 1, 7, 3, 3, 2)]
    got = headscan.bins(items, 2)
    assert sorted(sum(int(x[1:]) for x in b) for b in got) == [13, 13]
    assert sorted(map(len, headscan.bins(items, 4))) == [1, 1, 2, 2]
    assert headscan.bins([], 3) == [[], [], []]


@pytest.mark.parametrize("name", ["demo/demo.pcap", "capture/multi_if.pcapng", "public/amqpanalyze_amqp10_boolean_types.pcapng"])
def test_small_windows_and_flow_groups_change_nothing(monkeypatch, name):
    """The scan resumed every 1000 bytes, and a task's flows read in groups of at most 5 packets (one scan each)."""
    monkeypatch.setattr(headscan, "WINDOW", 1000)
    monkeypatch.setattr(headscan, "GROUP_PACKETS", 5)
    assert agree(DATA / name)


def test_reading_flows_keeps_few_pages_of_the_file_resident(tmp_path, monkeypatch):
    """A task reads its flows' packets straight from the mapped file, a flow's packets spread over all of it (a page
    each where connections interleave): the pages of each batch leave the worker's resident set after it, so the
    file's resident share stays about a batch of packets wide (the kernel maps pages around each faulting read).
    At 2 GB a worker's file-backed pages peaked at 743 MiB when they left every 16 batches, 298 (its libraries'
    included) after each. The control never drops them; the rows are the same."""
    from tests.capture.test_splits import _resident_kib_of
    from tools.gen_capture import generate

    path = tmp_path / "long.pcap"
    generate(path, 24, seed=3)
    scan = headscan.plan(str(path))
    assert scan is not None and scan.clean and len(scan.dflows) > 2

    def read():
        peak, rows = 0, []
        for k, batch in enumerate(headscan.read_flows(str(path), "c", dict(enumerate(scan.dflows)), batch_rows=64)):
            if k:  # at the first batch the walk that found the flows' packets has just read the whole (small) file
                peak = max(peak, _resident_kib_of(path))
            rows.append(batch)
        return peak, pa.Table.from_batches(rows, schema=PACKET_SCHEMA)

    peak, rows = read()
    monkeypatch.setattr(headscan, "_drop_pages", lambda buf: None)
    kept_peak, kept_rows = read()
    assert kept_peak > 12 * 1024, kept_peak  # control: the pages every batch touched stayed
    # 64 packets a batch, each fault mapping pages of the file around it (Linux's fault-around, 64 KiB by default)
    assert peak <= 8 * 1024 and peak < kept_peak / 3, (peak, kept_peak)
    assert rows.equals(kept_rows) and rows.num_rows > 10_000


def test_a_batch_gathers_its_payloads_a_few_pages_at_a_time(tmp_path, monkeypatch):
    """Within one batch the payloads are gathered ``GATHER_PACKETS`` at a time, the pages dropped after each: a long
    connection's packets lie all over the file, and 8,192 of them gathered at once mapped 680 MiB of the 2 GB load
    capture in a worker (1,865 MiB in a test of evenly spread reads). Measured just before each drop (the peak of
    what a gather maps); the control gathers a whole batch of 4,096 at once; the rows are the same."""
    from tests.capture.test_splits import _resident_kib_of
    from tools.gen_capture import generate

    path = tmp_path / "long.pcap"
    generate(path, 24, seed=3)
    scan = headscan.plan(str(path))
    assert scan is not None and scan.clean
    drop = headscan._drop_pages

    def read(gather: int):
        peaks: list[int] = []

        def sampled(buf):
            peaks.append(_resident_kib_of(path))
            drop(buf)

        monkeypatch.setattr(headscan, "GATHER_PACKETS", gather)
        monkeypatch.setattr(headscan, "_drop_pages", sampled)
        rows = list(headscan.read_flows(str(path), "c", dict(enumerate(scan.dflows)), batch_rows=4096))
        return max(peaks[1:]), pa.Table.from_batches(rows, schema=PACKET_SCHEMA)  # [0]: after the walk over the file

    peak, rows = read(64)
    whole_peak, whole_rows = read(1 << 30)
    assert whole_peak > 12 * 1024, whole_peak  # control: a batch's gather maps most of the file
    assert peak <= 8 * 1024 and peak < whole_peak / 3, (peak, whole_peak)
    assert rows.equals(whole_rows) and rows.num_rows > 10_000


def test_the_groups_order_is_lexsorts():
    """``headscan._order`` (a counting pass by flow key, then a sort of only the flows whose times go back) against
    ``np.lexsort((offset, time, flow key))``, the order it replaces: 300 random groups of up to 3,000 packets from up
    to 40 directional flows (both directions of a flow share its key; keys small and past 2**40), offsets rising as
    the scan gives them, times rising, flat (ties) or going back by up to 3 us in half of them; an empty group."""
    import numpy as np

    kernel = headscan.load_kernel()
    rnd = np.random.default_rng(32)
    back = 0
    for trial in range(300):
        n, flows = int(rnd.integers(0, 3000)), int(rnd.integers(1, 40))
        fkey = rnd.integers(0, 10, flows).astype(np.int64) * int(rnd.choice([1, 1 << 40]))
        flow = rnd.integers(0, flows, n).astype(np.int32)
        off = np.cumsum(rnd.integers(1, 100, n)).astype(np.int64)
        ts = np.cumsum(rnd.integers(-3 if trial % 2 else 0, 3, n)).astype(np.int64)
        back += bool(n > 1 and (np.diff(ts) < 0).any())
        got = headscan._order(kernel, off, ts, flow, fkey)
        assert got.dtype == np.int32 and np.array_equal(got, np.lexsort((off, ts, fkey[flow]))), trial
    assert back > 100
