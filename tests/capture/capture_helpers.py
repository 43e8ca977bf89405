"""Shared helpers for the capture reader tests: reading rows, and tshark as the oracle."""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from amqplens.decode.capture import PACKET_COLUMNS, plan_splits, read_capture, read_split

DATA = Path(__file__).resolve().parents[1] / "data"
PUBLIC = sorted((DATA / "public").glob("*.pcap*"))
OWN = sorted((DATA / "capture").glob("*.pcap*"))
ALL_CAPTURES = PUBLIC + OWN

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")


def rows_of(result) -> list[dict]:
    """All rows of a SplitResult as dicts (iterates it)."""
    rows = []
    for batch in result:
        assert tuple(batch) == PACKET_COLUMNS
        n = len(batch["record_offset"])
        assert all(len(col) == n for col in batch.values())
        rows.extend(dict(zip(PACKET_COLUMNS, values)) for values in zip(*batch.values()))
    return rows


def read_all(path, **kwargs):
    """``(rows, result)`` of a single pass over the file."""
    result = read_capture(path, "cap", **kwargs)
    return rows_of(result), result


def read_in_splits(path, split_size: int):
    """``(rows, stats list, errors)`` of reading the file split by split."""
    rows, stats, errors = [], [], []
    for start, end in plan_splits(path, split_size):
        result = read_split(path, "cap", start, end)
        rows.extend(rows_of(result))
        stats.append(result.stats)
        errors.extend(result.errors)
    return rows, stats, errors


TSHARK_FIELDS = (
    "frame.number", "frame.time_epoch", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst",
    "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.flags",
    "tcp.window_size_value", "frame.len",
)  # fmt: skip


def tshark_tcp(path) -> list[dict]:
    """tshark's view of every TCP segment: one dict per packet, in file order."""
    cmd = [TSHARK, "-n", "-r", str(path), "-Y", "tcp && !icmp && !icmpv6", "-T", "fields", "-E", "occurrence=l"]
    for field in TSHARK_FIELDS:
        cmd += ["-e", field]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    packets = []
    for line in out.splitlines():
        f = dict(zip(TSHARK_FIELDS, line.split("\t")))
        epoch = Decimal(f["frame.time_epoch"] or 0)  # a pcapng SPB has no timestamp
        packets.append(
            {
                "ts_us": int((epoch * 1_000_000).to_integral_value(rounding="ROUND_FLOOR")),
                "src_ip": f["ip.src"] or f["ipv6.src"],
                "dst_ip": f["ip.dst"] or f["ipv6.dst"],
                "src_port": int(f["tcp.srcport"]),
                "dst_port": int(f["tcp.dstport"]),
                "seq": int(f["tcp.seq_raw"]),
                "ack": int(f["tcp.ack_raw"]),
                "tcp_len": int(f["tcp.len"]),
                "tcp_flags": int(f["tcp.flags"], 16) & 0xFF,
                "window": int(f["tcp.window_size_value"]),
                "wire_len": int(f["frame.len"]),
            }
        )
    return packets


def assert_matches_tshark(path, rows=None) -> None:
    """Our TCP rows equal tshark's, field by field, in the same order."""
    if rows is None:
        rows, _ = read_all(path)
    expected = tshark_tcp(path)
    assert len(rows) == len(expected), f"{path}: {len(rows)} TCP packets, tshark {len(expected)}"
    for i, (row, exp) in enumerate(zip(rows, expected)):
        got = {k: row[k] for k in exp if k != "tcp_len"}
        want = {k: v for k, v in exp.items() if k != "tcp_len"}
        assert got == want, f"{path} packet {i}: {got} != {want}"
        if row["payload_truncated"]:
            assert len(row["payload"]) < exp["tcp_len"], f"{path} packet {i}"
        else:
            assert len(row["payload"]) == exp["tcp_len"], f"{path} packet {i}"


def write(tmp_path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path
