"""Many captures in one run: the same tables as one capture holding them all, and no per-file Spark work.

Input tried: seven captures of a real RabbitMQ (distinct client ports, times that do not overlap, so their
concatenation holds the same connections) ingested as seven files, and their merge (mergecap, the packets in time
order) as one; 40 one-row Parquet files read as one table.
"""

from __future__ import annotations

import collections
import shutil
import subprocess

import pytest

from amqplens.jobs import ingest_captures, lifecycle, metrics
from amqplens.lake.store import TableStore
from tests.conftest import DATA

pytestmark = [pytest.mark.spark]

PARTS = [str(DATA / "broker" / f"{name}.pcap") for name in
         ("publish_confirms", "nack_reject", "basic_get", "mandatory_return", "channel_error", "heartbeat", "connection_forced")]
MERGECAP = shutil.which("mergecap")


def _lake(spark, conf, path, inputs):
    c = conf.with_overrides(lake__root=str(path))
    ingest_captures.run(spark, c, inputs, run_id="m")
    lifecycle.run(spark, c, run_id="m")
    metrics.run(spark, c, run_id="m")
    return TableStore(spark, str(path))


def _rows(store, name, columns, where=None):
    """The multiset of ``columns`` of a table's rows (ids left out: they name the capture)."""
    df = store.read(name)
    if where is not None:
        df = df.where(where)
    return collections.Counter(tuple(r) for r in df.select(*columns).collect())


def _port(store):
    """connection_id -> its client port (ids differ between the lakes, ports do not)."""
    return {r.connection_id: r.client_port for r in store.read("connections").select("connection_id", "client_port").collect()}


@pytest.mark.skipif(MERGECAP is None, reason="mergecap (tshark's package) is not installed")
def test_many_captures_give_the_tables_of_their_concatenation(spark, conf, tmp_path):
    from pyspark.sql import functions as F

    merged = tmp_path / "merged.pcap"
    subprocess.run([MERGECAP, "-F", "pcap", "-w", str(merged), *PARTS], check=True)
    many = _lake(spark, conf, tmp_path / "many", PARTS)
    one = _lake(spark, conf, tmp_path / "one", [str(merged)])

    caps = {name: store.read("captures").select("packets_total", "status").collect() for name, store in (("many", many), ("one", one))}
    assert len(caps["many"]) == len(PARTS) and len(caps["one"]) == 1
    assert sum(r.packets_total for r in caps["many"]) == caps["one"][0].packets_total > 0

    frame_cols = ("ts", "direction", "channel", "frame_type", "class_name", "method_name", "size", "decode_error")
    conn_cols = ("client_port", "server_port", "start_ts", "end_ts", "bytes_to_server", "bytes_to_client", "dialect",
                 "close_code")
    delivery_cols = ("sent_ts", "settled_ts", "method", "exchange", "routing_key", "queue", "settle_mode", "outcome",
                     "settle_latency_us", "redelivered")
    for name, cols in (("frames", frame_cols), ("connections", conn_cols), ("deliveries", delivery_cols)):
        a, b = _rows(many, name, cols), _rows(one, name, cols)
        assert a == b and sum(a.values()) > 0, name
    ports = {"many": _port(many), "one": _port(one)}
    for store, key in ((many, "many"), (one, "one")):
        by_port = collections.Counter((ports[key][r.connection_id], r.event, r.ts) for r in
                                      store.read("flow_events").select("connection_id", "event", "ts").collect())
        ports[key + "_flow"] = by_port
    assert ports["many_flow"] == ports["one_flow"] and ports["one_flow"]

    # metrics: counts add up over captures per time bucket of a connection-free entity (queue, exchange); a
    # capture-wide row (bucket_seconds 0) spans its own capture, so only the time buckets compare
    bucketed = (F.col("bucket_seconds") > 0) & F.col("entity_kind").isin("queue", "exchange", "address")

    def summed(store, name, keys):
        out: collections.Counter = collections.Counter()
        for r in store.read(name).where(bucketed).select(*keys, "count").collect():
            out[tuple(r)[:-1]] += r["count"]
        return out

    settle_keys = ("bucket_start", "bucket_seconds", "entity_kind", "entity", "direction", "measure", "value")
    latency_keys = ("bucket_start", "bucket_seconds", "entity_kind", "entity", "metric", "method", "direction")
    for name, keys in (("metrics_settlement", settle_keys), ("metrics_latency", latency_keys)):
        a, b = summed(many, name, keys), summed(one, name, keys)
        assert a == b and a, name


def test_a_table_of_many_files_is_read_without_a_listing_job(spark, tmp_path):
    """Above spark.sql.sources.parallelPartitionDiscovery.threshold paths (32 by default) Spark lists the files of a
    read with a Spark job of a task per file: with 300 captures, every table a stage read cost a 300-task job.
    TableStore.read gives the exact files, so the session reads their status on the driver: no job at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = []
    for i in range(40):
        files.append(str(tmp_path / f"f{i}.parquet"))
        pq.write_table(pa.table({"a": [i]}), files[-1])
    sc = spark.sparkContext
    sc.setJobGroup("many-files-read", "the read of 40 files")
    try:
        df = spark.read.schema("a long").parquet(*files)  # as TableStore.read: the contract's schema, no inference job
        assert sc.statusTracker().getJobIdsForGroup("many-files-read") == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert sorted(r.a for r in df.collect()) == list(range(40))


def test_packed_small_captures_give_the_same_rows_in_few_files(spark, conf, tmp_path):
    """``lake.pack_small_units``: the seven captures' rows in a file per table and task, every table's rows the same
    as with a file per capture and table (every column, ids included: the captures are the same files)."""
    from amqplens.contracts import ALL_TABLES, table as table_def

    off = _lake(spark, conf.with_overrides(lake__pack_small_units=False), tmp_path / "off", PARTS)
    on = _lake(spark, conf, tmp_path / "on", PARTS)
    for name in ALL_TABLES:
        columns = [c.name for c in table_def(name).columns if c.name not in ("run_id", "ingested_at")]
        got = {lake: store.read_arrow(name, columns) for lake, store in (("on", on), ("off", off))}
        if not got["off"].num_columns:
            assert not got["on"].num_columns, name
            continue
        assert got["on"].num_rows == got["off"].num_rows, name
        assert sorted(map(repr, got["on"].to_pylist())) == sorted(map(repr, got["off"].to_pylist())), name
        files_on, files_off = (len(store.delta(name).file_uris()) for store in (on, off))
        units = len(set(got["off"].column("capture_id").to_pylist())) if got["off"].num_rows else 0
        assert files_off == units, name  # a file per capture and table
        if units > 2:
            assert files_on <= spark.sparkContext.defaultParallelism, name  # a file per task (one date)
    assert sum(on.rows("frames", [cid]) for cid in set(on.read_arrow("captures", ["capture_id"]).column(0).to_pylist())) \
        == on.read_arrow("frames", ["frame_id"]).num_rows > 0
