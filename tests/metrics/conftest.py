"""One lake for the metric tests: the real-broker fixtures and the demo, through every stage, once per session."""

from __future__ import annotations

import glob
import struct

import pytest

from jobs import ingest_captures, lifecycle, metrics
from jobs.lake import TableStore
from tests.conftest import DATA

CAPTURES = (sorted(glob.glob(str(DATA / "broker" / "*.pcap"))) + [str(DATA / "demo" / "demo.pcap")]
            + sorted(glob.glob(str(DATA / "v0_10" / "*.pcap"))))


def shifted_copy(src, dst, delta_us: int):
    """A classic little-endian pcap with every record's timestamp moved by ``delta_us``: another capture
    (another capture_id) of the same messages, a moment later."""
    data = bytearray(src.read_bytes())
    assert data[:4] == b"\xd4\xc3\xb2\xa1", "a classic microsecond pcap"
    at = 24
    while at < len(data):
        sec, usec, incl = struct.unpack_from("<IIi", data, at)
        total = sec * 1_000_000 + usec + delta_us
        struct.pack_into("<II", data, at, total // 1_000_000, total % 1_000_000)
        at += 16 + incl
    dst.write_bytes(bytes(data))
    return dst


@pytest.fixture(scope="session")
def metrics_lake(spark, conf, tmp_path_factory):
    lake = tmp_path_factory.mktemp("metrics_lake")
    c = conf.with_overrides(lake__root=str(lake))
    # nack_reject again, 1 us later, in the same run: its publishes must not stand in for the original's
    # (the same message ids, each 1 us after the original's publish and before its delivery)
    twin = shifted_copy(DATA / "broker" / "nack_reject.pcap", lake.parent / "nack_reject_1us_later.pcap", 1)
    ingest_captures.run(spark, c, [*CAPTURES, str(twin)], run_id="m")
    lifecycle.run(spark, c, run_id="m")
    done = metrics.run(spark, c, run_id="m")
    return c, TableStore(spark, str(lake)), done


def capture_id(name: str) -> str:
    path = DATA / "demo" / "demo.pcap" if name == "demo" else DATA / "broker" / f"{name}.pcap"
    if name.startswith("v0_10/"):
        path = DATA / f"{name}.pcap"
    return ingest_captures.capture_files([str(path)])[0].capture_id
