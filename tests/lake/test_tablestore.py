"""Contract tests of the TableStore (delta-rs backend) on real Delta tables on disk."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from amqplens.lake.store import LakeConflict, SchemaMismatch, TableStore
from amqplens.contracts import DECODE_ERRORS

pytestmark = pytest.mark.spark


def rows(capture_id: str, n: int, reason: str = "bad"):
    day = dt.date(2024, 5, 1)
    ts = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    return [
        (f"{capture_id}-{i}", capture_id, day, None, None, "capture", i * 10, 10, reason, "detail", ts, b"\x00" * 3, 10, "ab")
        for i in range(n)
    ]


def frame(spark, data):
    return spark.createDataFrame(data, DECODE_ERRORS.spark_schema())


def ids(store):
    return sorted(r.error_id for r in store.read("decode_errors").collect())


def test_append_then_open_with_deltalake_and_pyarrow(spark, lake):
    store = TableStore(spark, str(lake))
    assert store.write("decode_errors", frame(spark, rows("A", 3)), units={"A": "ingest:A:v1"})
    assert store.write("decode_errors", frame(spark, rows("B", 2)), units={"B": "ingest:B:v1"})
    assert ids(store) == sorted([f"A-{i}" for i in range(3)] + [f"B-{i}" for i in range(2)])
    table = DeltaTable(str(lake / "decode_errors"))
    assert table.version() == 1
    arrow = table.to_pyarrow_table()
    assert arrow.num_rows == 5
    assert set(arrow.column("capture_date").to_pylist()) == {dt.date(2024, 5, 1)}
    # The files are plain Parquet too.
    for uri in table.file_uris():
        assert pq.read_metadata(uri.removeprefix("file://")).num_rows > 0


def test_repeated_commit_is_a_no_op(spark, lake):
    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 3)), units={"A": "ingest:A:v1"})
    before = (store.version("decode_errors"), ids(store))
    assert not store.write("decode_errors", frame(spark, rows("A", 3)), units={"A": "ingest:A:v1"})
    assert (store.version("decode_errors"), ids(store)) == before


def test_replacing_one_capture_leaves_the_others(spark, lake):
    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 3) + rows("B", 2)), units={"A": "i:A:v1", "B": "i:B:v1"})
    v = store.version("decode_errors")
    store.write("decode_errors", frame(spark, rows("A", 1, reason="new")), units={"A": "i:A:v2"})
    assert store.version("decode_errors") == v + 1  # one atomic remove+add
    got = {(r.error_id, r.reason) for r in store.read("decode_errors").collect()}
    assert got == {("A-0", "new"), ("B-0", "bad"), ("B-1", "bad")}
    # The Delta log's last commit holds the removes and the adds together.
    log = lake / "decode_errors" / "_delta_log" / f"{v + 1:020d}.json"
    kinds = [next(iter(__import__("json").loads(line))) for line in log.read_text().splitlines()]
    assert "remove" in kinds and "add" in kinds and "txn" in kinds


def test_schema_mismatch_names_column_and_types(spark, lake):
    store = TableStore(spark, str(lake))
    bad = frame(spark, rows("A", 1)).withColumn("length", __import__("pyspark.sql.functions", fromlist=["lit"]).lit("x"))
    with pytest.raises(SchemaMismatch, match=r"column length has type string.*bigint"):
        store.write("decode_errors", bad, units={"A": "i:A:v1"})


class CrashBeforeCommit(TableStore):
    def _commit(self, *args, **kwargs):
        raise KeyboardInterrupt("simulated crash after the Parquet files were written")


def test_crash_before_commit_leaves_table_unchanged_and_rerun_succeeds(spark, lake):
    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 2)), units={"A": "i:A:v1"})
    before = (store.version("decode_errors"), ids(store))
    with pytest.raises(KeyboardInterrupt):
        CrashBeforeCommit(spark, str(lake)).write("decode_errors", frame(spark, rows("A", 3) + rows("B", 1)), units={"A": "i:A:v2", "B": "i:B:v1"})
    on_disk = [f for _, _, fs in os.walk(lake / "decode_errors") for f in fs if f.endswith(".parquet")]
    assert len(on_disk) > len(DeltaTable(str(lake / "decode_errors")).file_uris())  # orphans exist...
    assert (store.version("decode_errors"), ids(store)) == before  # ...and nobody sees them
    store.write("decode_errors", frame(spark, rows("A", 3) + rows("B", 1)), units={"A": "i:A:v2", "B": "i:B:v1"})
    assert ids(store) == ["A-0", "A-1", "A-2", "B-0"]
    removed = store.vacuum("decode_errors", retention_hours=0)
    assert removed  # the orphans and the replaced files
    assert ids(store) == ["A-0", "A-1", "A-2", "B-0"]


def test_concurrent_writer_conflict_is_clear(spark, lake):
    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 2)), units={"A": "i:A:v1"})
    stale = DeltaTable(str(lake / "decode_errors"))  # snapshot taken before the other writer commits
    store.write("decode_errors", frame(spark, rows("A", 1)), units={"A": "i:A:v2"})
    adds = []
    removes, rewritten = store._removals(DECODE_ERRORS, stale, {"A"})
    assert not rewritten  # files of one unit: removed whole
    with pytest.raises(LakeConflict, match="another writer"):
        store._commit(DECODE_ERRORS, stale, adds, removes, {"A": "i:A:v3"}, "run-x")
    assert ids(store) == ["A-0"]


def test_two_writes_with_one_run_id_keep_both_files(spark, lake):
    """The jobs of one run (ingest-captures, then ingest-logs) share the run id and the partition:
    the second write must not land on the first one's file name (it silently replaced its rows)."""
    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 3)), units={"A": "ingest:A:v1"}, run_id="day-1")
    store.write("decode_errors", frame(spark, rows("B", 2)), units={"B": "logs:B:v1"}, run_id="day-1")
    assert ids(store) == sorted([f"A-{i}" for i in range(3)] + [f"B-{i}" for i in range(2)])
    assert DeltaTable(str(lake / "decode_errors")).to_pyarrow_table().num_rows == 5


def test_write_many_commits_nothing_when_one_tables_query_fails(spark, lake):
    """Several tables' queries run at once (metrics.concurrent_tables); one failing leaves every table as it was:
    nothing committed, no staged file left behind. Bad input tried: a column whose computation raises in the task."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    from amqplens.lake.staging import STAGING
    from amqplens.contracts import table

    @udf("string")
    def boom(v):
        raise ValueError(f"no reason for {v}")

    store = TableStore(spark, str(lake))
    empty = spark.createDataFrame([], table("request_responses").spark_schema())
    failing = frame(spark, rows("A", 3)).withColumn("reason", boom(F.col("reason")))
    with pytest.raises(Exception, match="no reason for"):
        store.write_many([("request_responses", empty), ("decode_errors", failing)], units={"A": "w:A:v1"}, parallel=2)
    for name in ("request_responses", "decode_errors"):
        assert store.version(name) is None
        staging = lake / name / STAGING
        assert not staging.exists() or not any(staging.iterdir())


def test_write_many_commits_in_the_order_given_whatever_finishes_first(spark, lake):
    from amqplens.contracts import table

    store = TableStore(spark, str(lake))
    empty = spark.createDataFrame([], table("request_responses").spark_schema())
    done = store.write_many([("decode_errors", frame(spark, rows("A", 300))), ("request_responses", empty)],
                            units={"A": "w:A:v1"}, parallel=2)
    assert done == {"decode_errors": True, "request_responses": True}
    assert ids(store) == sorted(f"A-{i}" for i in range(300))
    first = DeltaTable(str(lake / "decode_errors")).history()[0]["timestamp"]
    second = DeltaTable(str(lake / "request_responses")).history()[0]["timestamp"]
    assert first <= second
    # a second call with the same units commits nothing
    again = store.write_many([("decode_errors", frame(spark, rows("A", 300))), ("request_responses", empty)],
                             units={"A": "w:A:v1"}, parallel=2)
    assert again == {"decode_errors": False, "request_responses": False}


def test_read_arrow_gives_the_units_rows_and_columns_spark_reads(spark, lake):
    """The driver's lookups (delta-rs, no Spark job) against Spark's read of the same snapshot."""
    store = TableStore(spark, str(lake))
    assert store.read_arrow("decode_errors", ["error_id"]).num_rows == 0  # no table yet: empty, no error
    store.write("decode_errors", frame(spark, rows("A", 3) + rows("B", 2)), units={"A": "i:A:v1", "B": "i:B:v1"})
    store.write("decode_errors", frame(spark, rows("A", 1, reason="again")), units={"A": "i:A:v2"})  # replaces A
    for units in (None, ["A"], ["B", "C"], []):
        got = store.read_arrow("decode_errors", ["error_id", "reason"], units)
        assert got.column_names == ["error_id", "reason"]
        df = store.read("decode_errors")
        if units is not None:
            df = df.where(df.capture_id.isin(units))
        assert sorted(zip(*got.to_pydict().values())) == sorted((r.error_id, r.reason) for r in df.collect())


def test_null_columns_are_those_no_row_of_the_units_fills(spark, lake):
    """By the files' statistics: A's rows have no connection_id or direction, one of B's has a connection_id."""
    store = TableStore(spark, str(lake))
    cols = ["connection_id", "direction", "reason"]
    assert store.null_columns("decode_errors", None, cols) == set()  # no table: nothing known to be null
    b = rows("B", 3)
    b[1] = (*b[1][:3], "conn-1", *b[1][4:])
    store.write("decode_errors", frame(spark, rows("A", 3) + b), units={"A": "i:A:v1", "B": "i:B:v1"})
    assert store.null_columns("decode_errors", ["A"], cols) == {"connection_id", "direction"}
    assert store.null_columns("decode_errors", ["B"], cols) == {"direction"}
    assert store.null_columns("decode_errors", None, cols) == {"direction"}
    assert store.null_columns("decode_errors", ["C"], cols) == set(cols)  # no file: no row fills any


def test_many_units_written_by_the_tasks_read_back_as_spark_writes_them(spark, lake, tmp_path):
    """More units than twice the shuffle partitions: the tasks write each unit's files with pyarrow (not Spark's
    writer). The rows read back, every column (nulls, bytes, timestamps, two partition dates), are those a write of
    one unit at a time (Spark's writer) gives, one file per unit, and a later write replaces only its units' files."""
    many = TableStore(spark, str(lake))
    one = TableStore(spark, str(tmp_path / "one_by_one"))
    data = []
    for i in range(9):
        unit_rows = rows(f"U{i}", 1 + i % 3)
        if i % 4 == 0:  # another capture date, and nulls where the contract allows them
            unit_rows = [(*r[:2], dt.date(2024, 6, 2), None, None, *r[5:9], None, None, None, r[12], None) for r in unit_rows]
        data += unit_rows
        one.write("decode_errors", frame(spark, unit_rows), units={f"U{i}": f"i:U{i}:v1"})
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) * 2 < 9
    assert many.write("decode_errors", frame(spark, data), units={f"U{i}": f"i:U{i}:v1" for i in range(9)})

    def table(store):
        return sorted(tuple(r) for r in store.read("decode_errors").collect())

    assert table(many) == table(one) and len(table(many)) == len(data)
    files = pa.table(DeltaTable(str(lake / "decode_errors")).get_add_actions(flatten=True)).to_pydict()
    # packed (lake.pack_small_units): a file per task and date, each listing its units in its footer
    assert len(files["path"]) <= 2 * int(spark.conf.get("spark.sql.shuffle.partitions"))
    held = [many.file_units("decode_errors", p) for p in files["path"]]
    assert sorted(u for h in held for u in h) == [f"U{i}" for i in range(9)]
    assert {p.split("/")[0] for p in files["path"]} == {"capture_date=2024-05-01", "capture_date=2024-06-02"}
    unpacked = TableStore(spark, str(tmp_path / "unpacked"), pack=False)
    assert unpacked.write("decode_errors", frame(spark, data), units={f"U{i}": f"i:U{i}:v1" for i in range(9)})
    assert table(unpacked) == table(one)
    files = pa.table(DeltaTable(str(tmp_path / "unpacked" / "decode_errors")).get_add_actions(flatten=True)).to_pydict()
    assert len(files["path"]) == 9 and files["min.capture_id"] == files["max.capture_id"]
    assert sorted(files["min.capture_id"]) == [f"U{i}" for i in range(9)]
    # U0..U5 again, one row each: their files replaced, the others' kept
    again = [r for i in range(6) for r in rows(f"U{i}", 1, reason="again")]
    assert many.write("decode_errors", frame(spark, again), units={f"U{i}": f"i:U{i}:v2" for i in range(6)})
    got = {(r.capture_id, r.reason) for r in many.read("decode_errors").collect()}
    assert got == {(f"U{i}", "again") for i in range(6)} | {(f"U{i}", "bad") for i in range(6, 9)}


def test_read_by_units_reads_their_files_and_filters_a_file_of_several(spark, lake):
    """``read(name, units)`` takes the units' files (from the log's statistics) instead of filtering rows; a file
    another writer added with several units in it is read and filtered row by row."""
    from deltalake import write_deltalake

    store = TableStore(spark, str(lake))
    store.write("decode_errors", frame(spark, rows("A", 3) + rows("B", 2)), units={"A": "i:A:v1", "B": "i:B:v1"})
    for units, want in ((["A"], 3), (["B", "C"], 2), ([], 0), (None, 5)):
        got = store.read("decode_errors", units)
        assert got.count() == want and got.columns == store.read("decode_errors").columns
    foreign = frame(spark, rows("C", 2) + rows("D", 1)).toArrow()
    write_deltalake(str(lake / "decode_errors"), foreign.cast(pa.schema([f.with_nullable(True) for f in foreign.schema])),
                    mode="append", schema_mode="merge")
    assert sorted(r.error_id for r in store.read("decode_errors", ["C"]).collect()) == ["C-0", "C-1"]
    assert sorted(r.error_id for r in store.read("decode_errors", ["A", "D"]).collect()) == ["A-0", "A-1", "A-2", "D-0"]
    # the driver's lookups the same way
    assert sorted(store.read_arrow("decode_errors", ["error_id"], ["C"]).column("error_id").to_pylist()) == ["C-0", "C-1"]
    assert sorted(store.read_arrow("decode_errors", ["error_id"], ["A", "D"]).column("error_id").to_pylist()) == [
        "A-0", "A-1", "A-2", "D-0"]
    assert store.read_arrow("decode_errors", ["error_id"]).num_rows == 8
