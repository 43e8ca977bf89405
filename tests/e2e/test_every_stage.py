"""Issue 38, items 1-4: captures that stopped a stage after ingest, or failed a run on what a peer sent, in ONE
``amqplens run`` that must exit 0 and write its report.

Tried (each built here from a fixture or by hand, the expected values from the bytes written or from tshark):
- the 0-10 conversation with message credit (v0_10/publish_consume.pcap): 0-10 credit events have no 1.0 link
  handle, and the report's link series crashed on the null (exit 1);
- the same conversation with its message.subscribe's acquire-mode set to 255 (the test encoder writes the command
  twice, with 0 and with 255, and the one occurrence is swapped): a value off the wire, judged critical (exit 4);
- a pcapng record (the public qpidd capture's 4th EPB) naming interface 7, which no IDB defines, at time 2^64 - 1:
  two decode_errors rows at one offset with the same error_id (exit 4);
- a pcapng of a section header and one interface and a pcap of its global header, no packets (tshark: zero
  packets): ``failed`` and exit 3. Beside them, in an ingest of their own, what stays failed: a cut pcap header, a
  cut section header, a text file, random bytes.
"""

from __future__ import annotations

import json
import pathlib
import random
import shutil
import subprocess

import pytest

from amqplens import cli
from amqplens.lake.store import TableStore
from tests.conftest import DATA
from tests.e2e import hostile_captures as H
from tests.e2e import mutations as M
from tests.v0_10.encoder import cmd

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

V010 = "v0_10/publish_consume.pcap"
NG = "public/adverb_amqp10_hello_world_qpidd_ipv6.pcapng"
SUBSCRIBE = dict(queue="q1", destination="d1", accept_mode=0)  # as tests/v0_10/conversation.py writes it
EPB_INDEX, BAD_IFACE, BAD_TIME = 3, 7, 2**64 - 1


def acquire_255() -> bytes:
    data = (DATA / V010).read_bytes()
    return M.replaced_once(data, cmd(1, "message", "subscribe", **SUBSCRIBE, acquire_mode=0),
                           cmd(1, "message", "subscribe", **SUBSCRIBE, acquire_mode=255))


def inputs() -> dict[str, bytes]:
    ng = (DATA / NG).read_bytes()
    return {
        "v010.pcap": (DATA / V010).read_bytes(),
        "acquire_255.pcap": acquire_255(),
        "iface_and_time.pcapng": M.epb_interface_and_time(ng, EPB_INDEX, BAD_IFACE, BAD_TIME),
        "empty.pcapng": M.empty_pcapng(),
        "empty.pcap": M.empty_pcap(),
    }


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("every_stage")
    (d / "in").mkdir()
    ids = {}
    for name, data in inputs().items():
        (d / "in" / name).write_bytes(data)
        ids[name] = H.capture_id(data)
    code = cli.main(["run", "--input", str(d / "in"), "--lake", str(d / "lake"), "--run-id", "every-stage",
                     "--set", f"report.out={d / 'report'}", "--set", "spark.master=local[2]",
                     "--set", "spark.shuffle_partitions=2"])
    return code, ids, TableStore(spark, str(d / "lake")), d


def test_the_run_exits_0(run):
    code, *_ = run
    assert code == 0


def test_the_report_draws_0_10_credit_by_destination(run):
    _, _, _, d = run
    page = d / "report" / "index.html"
    assert page.exists()
    text = page.read_text()
    credit = text.split('<figure id="credit"', 1)[1].split("</figure>", 1)[0]
    # the one 0-10 credit destination the conversation subscribes (tests/v0_10/conversation.py: destination="d1")
    assert 'class="drawn"' in credit and "link destination d1" in credit


def test_an_unnamed_acquire_mode_is_kept_and_only_warned(run):
    _, ids, store, d = run
    from pyspark.sql import functions as F

    rows = (store.read("frames").where((F.col("capture_id") == ids["acquire_255.pcap"]) & (F.col("method_name") == "subscribe"))
            .select("acquire_mode").collect())
    assert [r.acquire_mode for r in rows] == ["255"]  # the byte written, kept as read
    summary = json.loads((d / "lake" / "_quality" / "runs" / "every-stage.json").read_text())
    assert summary["critical_failures"] == []
    (warned,) = [w for w in summary["warnings"] if w["name"] == "frames.enum.acquire_mode"]
    assert not warned["success"] and "255" in json.dumps(warned["samples"]) + warned["observed"]


def test_one_record_wrong_twice_gives_two_rows_with_two_keys(run):
    _, ids, store, _ = run
    from pyspark.sql import functions as F

    ng = (DATA / NG).read_bytes()
    offset = M.epb_offsets(ng)[EPB_INDEX]  # the record written: its block's file offset
    rows = (store.read("decode_errors").where((F.col("capture_id") == ids["iface_and_time.pcapng"]) & (F.col("offset") == offset))
            .select("error_id", "reason").collect())
    assert sorted(r.reason for r in rows) == ["ts_out_of_range", "unknown_interface"]
    assert len({r.error_id for r in rows}) == 2


def _tshark_packets(path: pathlib.Path) -> int | None:
    if not shutil.which("tshark"):
        return None
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return len(out.stdout.split())


@pytest.mark.parametrize("name", ["empty.pcapng", "empty.pcap"])
def test_a_well_formed_empty_capture_is_a_result(run, name):
    _, ids, store, d = run
    from pyspark.sql import functions as F

    assert _tshark_packets(d / "in" / name) in (0, None)  # the reference reads it as zero packets
    (row,) = store.read("captures").where(F.col("capture_id") == ids[name]).collect()
    assert (row.status, row.error, row.packets_total, row.connections) == ("empty", None, 0, 0)


def test_what_is_not_a_well_formed_capture_stays_failed(spark, conf, tmp_path):
    from amqplens.jobs import ingest_captures

    bad = {"cut_header.pcap": M.empty_pcap()[:20], "cut_shb.pcapng": M.empty_pcapng()[:20],
           "text.pcap": b"this is not a capture\n" * 4, "random.pcap": random.Random(38).randbytes(3000)}
    (tmp_path / "in").mkdir()
    for name, data in bad.items():
        (tmp_path / "in" / name).write_bytes(data)
    c = conf.with_overrides(lake__root=str(tmp_path / "lake"))
    ingest_captures.run(spark, c, [str(tmp_path / "in")], run_id="bad")
    rows = TableStore(spark, str(tmp_path / "lake")).read("captures").collect()
    assert sorted((pathlib.Path(r.path).name, r.status) for r in rows) == sorted((n, "failed") for n in bad)
    assert all(r.error for r in rows)
