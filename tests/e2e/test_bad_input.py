"""Bad capture files in one run with a good one: none stops the run, each is reported, the good one is intact.

Tried here: an empty file, a pcap whose last record is cut short, a pcap with a
corrupt record header in the middle, a pcap with an unknown link type, a text
file named .pcap, a pcapng with a bad block length.
"""

from __future__ import annotations

import shutil
import struct

import pytest

from amqplens.jobs import ingest_captures
from amqplens.lake.store import TableStore
from tests.conftest import DATA

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

GOOD = DATA / "broker" / "publish_confirms.pcap"


def record_offsets(data: bytes) -> list[int]:
    """Offsets of the records of a little-endian pcap (walked with the format's own lengths)."""
    out, pos = [], 24
    while pos + 16 <= len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return out


@pytest.fixture(scope="module")
def bad_run(spark, conf, tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = GOOD.read_bytes()
    assert good[:4] == b"\xd4\xc3\xb2\xa1"  # little-endian microsecond pcap
    offsets = record_offsets(good)
    files = {}
    files["empty.pcap"] = b""
    files["truncated.pcap"] = good[: offsets[-1] + 20]
    corrupt = bytearray(good)
    middle = offsets[len(offsets) // 2]
    struct.pack_into("<II", corrupt, middle + 8, 0x7FFFFFF0, 0x7FFFFFF0)  # caplen and origlen beyond any snaplen
    files["corrupt_middle.pcap"] = bytes(corrupt)
    unknown = bytearray(good)
    struct.pack_into("<I", unknown, 20, 147)  # LINKTYPE_USER0: nobody knows its framing
    files["unknown_linktype.pcap"] = bytes(unknown)
    files["not_a_capture.pcap"] = b"GET / HTTP/1.1\r\nHost: example\r\n\r\n" * 20
    ng = bytearray((DATA / "capture" / "lo_us.pcapng").read_bytes())
    shb_len = struct.unpack_from("<I", ng, 4)[0]
    idb_len = struct.unpack_from("<I", ng, shb_len + 4)[0]
    first_epb = shb_len + idb_len
    struct.pack_into("<I", ng, first_epb + 4, 0xFFFF0000)  # leading length no longer matches the trailing one
    files["bad_block.pcapng"] = bytes(ng)
    for name, data in files.items():
        (d / name).write_bytes(data)
    shutil.copy(GOOD, d / "good.pcap")
    c = conf.with_overrides(lake__root=str(d / "lake"))
    ingest_captures.run(spark, c, [str(d)], run_id="bad")
    store = TableStore(spark, str(d / "lake"))
    alone = conf.with_overrides(lake__root=str(d / "lake_good"))
    ingest_captures.run(spark, alone, [str(GOOD)], run_id="good")
    return store, TableStore(spark, str(d / "lake_good")), {n: len(b) for n, b in files.items()}, middle


def captures(store):
    return {r.path.rsplit("/", 1)[-1]: r for r in store.read("captures").collect()}


def errors(store, name):
    from pyspark.sql import functions as F

    cid = captures(store)[name].capture_id
    return store.read("decode_errors").where((F.col("capture_id") == cid) & (F.col("stage") == "capture")).collect()


def test_every_file_has_a_captures_row_with_a_status(bad_run):
    store, _, files, _ = bad_run
    caps = captures(store)
    assert set(caps) == set(files) | {"good.pcap"}
    assert caps["empty.pcap"].status == "failed" and caps["empty.pcap"].error == "the file is empty"
    assert caps["not_a_capture.pcap"].status == "failed" and caps["not_a_capture.pcap"].format == "unknown"
    assert "neither a pcap magic nor a pcapng" in caps["not_a_capture.pcap"].error
    assert caps["unknown_linktype.pcap"].status in ("partial", "failed") and "147" in caps["unknown_linktype.pcap"].error
    for name in ("truncated.pcap", "corrupt_middle.pcap", "bad_block.pcapng"):
        assert caps[name].status == "partial", name
        assert caps[name].packets_total > 0 and caps[name].error
    assert caps["good.pcap"].status == "ok" and caps["good.pcap"].error is None


def test_each_problem_is_an_error_row_with_a_reason(bad_run):
    store, _, _, middle = bad_run
    assert [e.reason for e in errors(store, "truncated.pcap")] == ["truncated_record"]
    corrupt = errors(store, "corrupt_middle.pcap")
    assert [e.reason for e in corrupt] == ["bad_record_header"] and corrupt[0].offset == middle
    assert corrupt[0].length > 0 and corrupt[0].raw and len(corrupt[0].raw) <= 4096
    assert {e.reason for e in errors(store, "unknown_linktype.pcap")} == {"unknown_link_type"}
    assert {e.reason for e in errors(store, "bad_block.pcapng")} == {"bad_block_length"}
    assert {e.reason for e in errors(store, "not_a_capture.pcap")} == {"not_a_capture"}


def test_everything_after_a_corrupt_record_is_still_read(bad_run):
    """Only the corrupt record is lost: the connections and all frames after it are still there."""
    from pyspark.sql import functions as F

    store, good_store, _, _ = bad_run
    cid = captures(store)["corrupt_middle.pcap"].capture_id
    caps, good = captures(store)["corrupt_middle.pcap"], captures(good_store)["publish_confirms.pcap"]
    assert caps.packets_total == good.packets_total - 1
    ours = store.read("connections").where(F.col("capture_id") == cid).count()
    assert ours == good.connections
    closes = store.read("frames").where((F.col("capture_id") == cid) & (F.col("method_name") == "close-ok")).count()
    good_closes = good_store.read("frames").where(F.col("method_name") == "close-ok").count()
    assert closes == good_closes > 0


def test_the_good_capture_is_untouched_by_its_neighbours(bad_run):
    store, good_store, _, _ = bad_run
    from pyspark.sql import functions as F

    cid = captures(store)["good.pcap"].capture_id
    for t in ("connections", "frames", "decode_errors"):
        mixed = sorted(map(tuple, store.read(t).where(F.col("capture_id") == cid).collect()))
        alone = sorted(map(tuple, good_store.read(t).collect()))
        assert mixed == alone, t
