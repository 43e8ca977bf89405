"""The compiled header scan of a whole capture file, with the Python reader (``splits.read_capture``) as its reference.

The direct path of the ingest (no packet shuffle, ``capture.direct``) reads a capture in
two steps, both through ``scan_kernel.walk`` (numba, cached on disk like the 0-9-1 walk):

* ``plan(path)`` on the driver: one pass over every record, IP and TCP header, giving
  the capture's ``SplitStats`` (what the Python reader's splits add up to) and its TCP
  flows with their packets and bytes; ``bins`` then spreads the flows over the tasks,
  largest first onto the least loaded, by bytes.
* ``read_flows(path, ...)`` in each task: the same pass, keeping the packets of the
  task's flows, as PACKET_SCHEMA batches sorted as the shuffle path sorts them
  (flow key, time, record offset), payloads copied straight from the mapped file.

The scan gives up (``FileScan.clean`` false, ``why`` says where) wherever the Python
reader would write an error row or do more than read a header: a record that does not
frame, an untimely clock, a time outside 1990..2100, an IP fragment, a link type it does
not decode, a pcapng SPB/PB or second section. Such a capture takes the shuffle path and
the Python reader, whole. ``tests/capture/test_headscan.py`` checks that the two give the
same packets and statistics on every fixture capture and on mutated ones.

numba is optional: without it ``plan`` returns None and every capture takes the shuffle path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import importlib
import ipaddress
import mmap
import os
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

from amqplens.decode.common.arrow import repeated
from amqplens.decode.clock import OUT_OF_LINE_US
from amqplens.decode.capture import pcap, pcapng
from amqplens.decode.capture.linklayer import LINK_DECODERS
from amqplens.decode.capture.records import PACKET_SCHEMA, SplitStats, flow_key
from amqplens.decode.capture.splits import _Releaser, sniff_head
from amqplens.decode.errors import DecodeError

T = TypeVar("T")
_kernel = None  # the scan_kernel module once imported; False when numba is missing
WHY = {0: None, 1: "a record header the reader resyncs on", 2: "a record time the reader checks",
       3: "an IP fragment", 4: "a link type the reader does not decode", 5: "a pcapng block the reader handles itself",
       6: "too many pcapng interfaces", 7: "not a capture the scan reads"}


def load_kernel():
    """``scan_kernel``, or None when numba does not import."""
    global _kernel
    if _kernel is None:
        from amqplens.decode.v0_9_1.hotpath import load_compiled

        _kernel = load_compiled(lambda: importlib.import_module("amqplens.decode.capture.scan_kernel"))
    return _kernel or None


@dataclasses.dataclass
class Flow:
    """One TCP flow (both directions) of a capture: its directional flow numbers, packets and bytes."""

    key: int  # records.flow_key
    dflows: list[int]
    packets: int
    bytes: int


@dataclasses.dataclass
class FileScan:
    path: str
    size: int
    clean: bool  # every record was read by the scan: the direct path may take the capture
    why: str | None  # what stopped the scan
    stats: SplitStats
    # per directional flow: [version, src_ip, src_port, dst_ip, dst_port, flow_key, packets, bytes]
    dflows: list[list] = dataclasses.field(default_factory=list)

    def flows(self) -> list[Flow]:
        by_key: dict[int, Flow] = {}
        for i, d in enumerate(self.dflows):
            f = by_key.get(d[5])
            if f is None:
                by_key[d[5]] = Flow(d[5], [i], d[6], d[7])
            else:
                f.dflows.append(i)
                f.packets += d[6]
                f.bytes += d[7]
        return list(by_key.values())


def bins(items: Sequence[tuple[int, T]], n: int) -> list[list[T]]:
    """``items`` (weight, item) onto ``n`` bins, heaviest first onto the lightest bin (ties: the lowest bin);
    each bin's items in the order given."""
    heap = [(0, i) for i in range(max(1, n))]
    out: list[list[T]] = [[] for _ in heap]
    order = sorted(range(len(items)), key=lambda k: -items[k][0])
    placed: list[list[int]] = [[] for _ in heap]
    for k in order:
        load, i = heapq.heappop(heap)
        placed[i].append(k)
        heapq.heappush(heap, (load + items[k][0], i))
    for i, ks in enumerate(placed):
        out[i] = [items[k][1] for k in sorted(ks)]
    return out


def _params(buf, size: int):
    """The kernel's container arguments (fmt, little, nanos, linktype, max_caplen, ts_lo, ts_hi), or None."""
    fmt = sniff_head(bytes(buf[:12]))
    try:
        if fmt == "pcap":
            pf = pcap.PcapFile(buf, size)
            lo, hi = (pf.ts_lo, pf.ts_hi) if pf.ts_lo is not None else (0, 1 << 32)
            return 0, pf.endian == "<", pf.nanos, pf.linktype, pf.max_caplen, lo, hi
        if fmt == "pcapng":
            ng = pcapng.PcapngFile(buf, size)
            section = ng.section_at(0)
            return 1, section is not None and section.endian == "<", False, 0, 0, 0, 0
    except DecodeError:
        return None
    return None


# The scan goes over the file a window at a time and drops the mapped pages behind it from the process
# (``splits._Releaser``), so a task's resident share of the file stays about a window wide whatever its size.
WINDOW = 64 << 20
# A task's packets are read in groups of flows of at most this many packets (a flow larger than that is a group
# alone), one scan of the file per group: the per-packet columns a task holds stay bounded by it (47 bytes a packet,
# about 190 MB, and the group's order). Each scan parses every record of the file (about 1.2 s for 2 GB here): at 1M
# packets a group, each task of the 2 GB load capture scanned the file 4 and 5 times, 11.5% of its time.
GROUP_PACKETS = 4 << 20
# The payloads are gathered this many packets at a time, the mapped pages dropped after each (``_drop_pages``, 9 us
# when little is mapped). A fault maps the pages around the one it needs (and a large folio whole), and a long
# connection's packets lie all over the file: 8,192 of them spread evenly over the 2 GB load capture mapped 1,865 MiB,
# random ones 245 MiB a batch, 1,024 at a time 34 MiB. Dropped once a batch of 8,192, a worker of that capture held
# 680 MiB of file-backed pages (its libraries' 170 included) while it gathered its long connections' packets.
GATHER_PACKETS = 1024
# record offset, time, dflow, seq, ack, flags, window, wire length, the payload's start from the record's offset and
# its length, truncated: each as narrow as the file's field (seq, ack, wire length 32 bits, flags 8, window 16; a
# record is at most 16 MiB), 36 bytes a packet (67 as int64, 47 with the payload's ends as file offsets: the group's
# columns of the 2 GB load capture's task of 3.9M packets 43 MB smaller)
_COLUMNS = (np.int64, np.int64, np.int32, np.uint32, np.uint32, np.uint8, np.uint16, np.uint32, np.uint32, np.uint32, np.bool_)


def _walk(kernel, buf, size: int, select: np.ndarray, n_out: int):
    """``(format, stats, reps, columns)`` of one scan of the file, or None when its header is not one the scan takes."""
    params = _params(buf, size)
    if params is None:
        return None
    fmt, little, nanos, linktype, max_caplen, lo, hi = params
    stats = np.zeros(12, np.int64)
    stats[0], stats[6], stats[7] = (24 if fmt == 0 else 0), np.iinfo(np.int64).max, -np.iinfo(np.int64).max
    if fmt == 0 and linktype not in LINK_DECODERS:
        stats[1] = kernel.BAIL_LINKTYPE  # the reader reports it, and counts the packets undecoded
    ifaces = np.zeros((kernel.MAX_IFACES, 6), np.int64)
    slots, hashes, reps = np.full(1 << 10, -1, np.int64), np.zeros(1 << 10, np.uint64), np.zeros((1 << 10, 8), np.int64)
    columns = [np.zeros(n_out, t) for t in _COLUMNS]
    arr = np.frombuffer(buf, np.uint8, size)
    release = _Releaser(buf)
    limit = 0
    while stats[0] < size and stats[1] == 0:
        limit += WINDOW
        slots, hashes, reps = kernel.walk(arr, size, limit, fmt, little, nanos, linktype, max_caplen, lo, hi, select,
                                          stats, ifaces, slots, hashes, reps, *columns)
        release(int(stats[0]))
    del arr
    filled = int(stats[10])
    return ("pcap", "pcapng")[fmt], stats, reps[:int(stats[8])], [c[:filled] for c in columns]


def _drop_pages(buf) -> None:
    """The mapped pages out of this process (the page cache keeps them; a later read faults them back in)."""
    if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        with contextlib.suppress(OSError, ValueError):
            buf.madvise(mmap.MADV_DONTNEED)


class _Mapped:
    def __init__(self, path) -> None:
        self.f = open(path, "rb")
        self.size = os.fstat(self.f.fileno()).st_size
        self.buf = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:  # an array still points into it: the mapping goes with the last reference
                pass
        self.f.close()


def plan(path: str) -> FileScan | None:
    """The driver's pass over ``path``: its statistics and flows; None without numba."""
    kernel = load_kernel()
    if kernel is None:
        return None
    with _Mapped(path) as m:
        walked = _walk(kernel, m.buf, m.size, np.zeros(0, np.uint8), 0) if m.size else None
        if walked is None:
            return FileScan(path, m.size, False, WHY[7], SplitStats())
        fmt, st, reps, _ = walked
        why = int(st[1])
        clean = int(st[0]) == m.size and why == 0
        stats = SplitStats(format=fmt)
        if clean:
            stats = SplitStats(
                format=fmt, records=int(st[2]), tcp_packets=int(st[3]), non_tcp_packets=int(st[4]),
                malformed_packets=int(st[5]), bytes_read=m.size,
                link_types={lt for i, lt in enumerate(kernel.LINK_TYPE_BITS) if int(st[9]) >> i & 1},
                first_ts_us=int(st[6]) if st[2] else None, last_ts_us=int(st[7]) if st[2] else None,
            )
        if clean and stats.first_ts_us is not None and stats.last_ts_us is not None and \
                stats.last_ts_us - stats.first_ts_us > OUT_OF_LINE_US:
            # a time a day or more from the others may be one the reader writes off as out of line (clock.out_of_line,
            # which looks at each record's neighbours): a capture spanning more than a day is left to the reader
            clean, why, stats = False, 2, SplitStats(format=fmt)
        dflows = _dflows(m.buf, reps) if clean else []
        _drop_pages(m.buf)
    return FileScan(path, m.size, clean, WHY.get(why, WHY[7]) if not clean else None, stats, dflows)


def _dflows(buf, reps: np.ndarray) -> list[list]:
    text: dict[bytes, str] = {}
    rows = []
    for src, dst, alen, sport, dport, version, packets, nbytes in reps.tolist():
        ips = []
        for at in (src, dst):
            raw = bytes(buf[at:at + alen])
            if raw not in text:
                text[raw] = ipaddress.ip_address(raw).compressed
            ips.append(text[raw])
        rows.append([version, ips[0], sport, ips[1], dport, flow_key(ips[0], sport, ips[1], dport), packets, nbytes])
    return rows


def read_flows(path: str, capture_id: str, dflows: dict[int, list], batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """The packets of the directional flows ``dflows`` (number -> the plan's row for it) as PACKET_SCHEMA batches,
    sorted by (flow_key, ts_us, record_offset). The file must be the one planned (same size, same records):
    a file that changed since gives what the plan did not promise, so it raises."""
    kernel = load_kernel()
    if kernel is None or not dflows:
        return
    top = max(dflows) + 1
    info = [dflows.get(i) for i in range(top)]
    fkey = np.array([d[5] if d else 0 for d in info], np.int64)
    per_dflow = {
        "ip_version": np.array([d[0] if d else 0 for d in info], np.int8),
        "src_ip": pa.array([d[1] if d else "" for d in info], pa.string()),
        "src_port": np.array([d[2] if d else 0 for d in info], np.int32),
        "dst_ip": pa.array([d[3] if d else "" for d in info], pa.string()),
        "dst_port": np.array([d[4] if d else 0 for d in info], np.int32),
    }
    with _Mapped(path) as m:
        for group in _groups(dflows):
            select = np.zeros(top, np.uint8)
            select[group] = 1
            n_out = sum(dflows[d][6] for d in group)
            walked = _walk(kernel, m.buf, m.size, select, n_out)
            if walked is None or int(walked[1][0]) != m.size or int(walked[1][10]) != n_out:
                raise RuntimeError(f"{path} changed since the ingest planned it")
            yield from _batches(kernel, m.buf, m.size, capture_id, walked[3], fkey, per_dflow, batch_rows)
            _drop_pages(m.buf)


def _groups(dflows: dict[int, list]) -> list[list[int]]:
    """The directional flows in flow-key order, cut between flows into groups of at most GROUP_PACKETS packets."""
    by_key: dict[int, list[int]] = {}
    for d, row in dflows.items():
        by_key.setdefault(row[5], []).append(d)
    groups: list[list[int]] = [[]]
    held = 0
    for key in sorted(by_key):
        packets = sum(dflows[d][6] for d in by_key[key])
        if groups[-1] and held + packets > GROUP_PACKETS:
            groups.append([])
            held = 0
        groups[-1] += by_key[key]
        held += packets
    return groups


def _order(kernel, off: np.ndarray, ts: np.ndarray, flow: np.ndarray, fkey: np.ndarray) -> np.ndarray:
    """The group's packets sorted by (flow key, time, record offset), as positions (int32 below 2**31 packets: the
    order is held through the group's batches). The scan gives them in record order, so a counting pass by flow key
    keeps the offsets rising within each key and only a key whose times go back somewhere is sorted again. The same
    order as ``np.lexsort((off, ts, fkey[flow]))``, whose two int64 arrays of every packet (the keys gathered, the
    order) were the 2 GB load capture's tasks' largest transient: 4M packets, 61 MiB."""
    if len(off) >= 2**31:
        return np.lexsort((off, ts, fkey[flow]))
    keys, rank = np.unique(fkey, return_inverse=True)  # per directional flow: its key's place
    order, starts, rising = kernel.flow_order(rank.astype(np.int32)[flow], len(keys), ts)
    for r in np.flatnonzero(~rising).tolist():  # times that go back within a flow: that flow sorted by (time, offset)
        part = order[starts[r]:starts[r + 1]]
        order[starts[r]:starts[r + 1]] = part[np.lexsort((off[part], ts[part]))]
    return order


def _batches(kernel, buf, size: int, capture_id: str, columns, fkey, per_dflow, batch_rows: int) -> Iterator[pa.RecordBatch]:
    off, ts, flow, seq, ack, flags, win, wire, ps, pe, trunc = columns
    order = _order(kernel, off, ts, flow, fkey)
    arr = np.frombuffer(buf, np.uint8, size)
    try:
        for lo in range(0, len(order), batch_rows):
            idx = order[lo:lo + batch_rows]
            f = flow[idx]
            starts = off[idx] + ps[idx]
            lengths = pe[idx].astype(np.int64)
            ends = starts + lengths
            offsets = np.zeros(len(idx) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            data = np.empty(int(offsets[-1]), np.uint8)
            for at in range(0, len(idx), GATHER_PACKETS):
                cut = slice(at, at + GATHER_PACKETS)
                kernel.gather(arr, starts[cut], ends[cut], offsets[cut], data)
                _drop_pages(buf)
            payload = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(idx), [None, pa.py_buffer(offsets),
                                                                                    pa.py_buffer(data)]).cast(pa.binary())
            findex = pa.array(f)
            given = {
                "capture_id": repeated(capture_id, len(idx)),
                "record_offset": off[idx], "ts_us": ts[idx], "flow_key": fkey[f], "seq": seq[idx], "ack": ack[idx],
                "tcp_flags": flags[idx], "window": win[idx], "wire_len": wire[idx], "payload": payload,
                "payload_truncated": trunc[idx],
            }
            for name, values in per_dflow.items():
                given[name] = values.take(findex) if isinstance(values, pa.Array) else values[f]
            yield pa.RecordBatch.from_arrays([pa.array(given[c.name], c.type) for c in PACKET_SCHEMA], schema=PACKET_SCHEMA)
    finally:
        del arr


def sample_pcap(packets: int = 4) -> bytes:
    """A little-endian microsecond pcap of Ethernet/IPv4/TCP packets with a payload (the warm-up's input)."""
    import struct

    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(packets):
        payload = b"AMQP\x00\x00\x09\x01"
        tcp = struct.pack(">HHIIHHHH", 40000, 5672, 1 + 8 * i, 0, 0x5018, 512, 0, 0) + payload
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, b"\x7f\0\0\1", b"\x7f\0\0\2") + tcp
        frame = b"\0" * 12 + b"\x08\x00" + ip
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    return b"".join(out)


def warm() -> float:
    """Seconds spent loading (or compiling) the scan and running it once (plan and read): -1 without numba."""
    import tempfile
    import time

    t0 = time.perf_counter()
    if load_kernel() is None:
        return -1.0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "warm.pcap")
        with open(path, "wb") as f:
            f.write(sample_pcap())
        scan = plan(path)
        if scan is not None and scan.clean:
            for _ in read_flows(path, "warm", dict(enumerate(scan.dflows))):
                pass
    return time.perf_counter() - t0
