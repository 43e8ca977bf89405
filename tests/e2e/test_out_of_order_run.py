"""Issue 38 case 6 through ``amqplens run``: a real capture whose large segment came ahead of a hole exits 0.

The 2 GB capture failed validation (exit 4: ``deliveries.key_unique``) because the frames of a segment captured
ahead of a hole were handled before those of the segment that filled it. Here the real-broker fixture
``pipelined_publish.pcap`` and its copy with two large client segments swapped (``tests/tcp/reorder_burst.py``)
go through one run, every stage; the copy's deliveries and frames must be the original's but for times.
"""

from __future__ import annotations

import pytest

from amqplens import cli
from amqplens.lake.store import TableStore
from tests.e2e import hostile_captures as H
from tests.tcp.reorder_burst import FIXTURE, variant

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

# what follows the packets' order (times) or names the capture (ids hold the connection id, which holds the capture id)
SKIPPED = {"sent_ts", "settle_latency_us", "ts", "capture_id", "capture_date", "connection_id", "run_id", "decoder_version"}


def _unnamed(value, connection_id: str):
    if isinstance(value, str):
        return value.replace(connection_id, "C")
    if isinstance(value, list):
        return [_unnamed(v, connection_id) for v in value]
    return value


@pytest.fixture(scope="module")
def ooo_run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("ooo_run")
    (d / "in").mkdir()
    original = FIXTURE.read_bytes()
    swapped, _ = variant("swapped")
    (d / "in" / "original.pcap").write_bytes(original)
    (d / "in" / "swapped.pcap").write_bytes(swapped)
    code = cli.main(["run", "--input", str(d / "in"), "--lake", str(d / "lake"), "--run-id", "ooo",
                     "--set", f"report.out={d / 'report'}", "--set", "spark.master=local[2]", "--set", "spark.shuffle_partitions=2"])
    return code, H.capture_id(original), H.capture_id(swapped), TableStore(spark, str(d / "lake"))


def _rows(store, table: str, capture_id: str, order: tuple) -> list[dict]:
    from pyspark.sql import functions as F

    rows = [r.asDict() for r in store.read(table).where(F.col("capture_id") == capture_id).collect()]
    return sorted(({k: _unnamed(v, r["connection_id"]) for k, v in r.items() if k not in SKIPPED}
                   | {"_order": tuple(r[k] for k in order)} for r in rows), key=lambda r: r["_order"])


def test_a_segment_ahead_of_a_hole_runs_clean_and_changes_only_times(ooo_run):
    code, original, swapped, store = ooo_run
    assert code == 0  # 4 before: deliveries.key_unique
    for table, order in (("deliveries", ("direction", "channel", "delivery_tag")), ("frames", ("direction", "stream_offset"))):
        mine, theirs = _rows(store, table, swapped, order), _rows(store, table, original, order)
        assert len(mine) == len(theirs) > 0, table
        assert mine == theirs, table
    assert len(_rows(store, "deliveries", swapped, ())) == 600
