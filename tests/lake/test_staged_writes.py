"""Tables whose Parquet files the executors write themselves (StagedWriter) and the driver commits (commit_staged).

The reference is Spark's own Parquet writer: the same rows written through
``TableStore.write`` into another lake must read back the same, through Spark
and through delta-rs, with the same partition values. Bad input tried: rows
missing a contract column, a column whose values cannot take the contract's
type, a file of a task attempt nobody reported, a task that ran twice, and
units the table already holds.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from amqplens.lake.store import SchemaMismatch, TableStore
from amqplens.contracts import DECODE_ERRORS
from tests.lake.test_tablestore import frame, rows

pytestmark = pytest.mark.spark

DAY = {"capture_date": "2024-05-01"}


def arrow_rows(data) -> pa.RecordBatch:
    """The rows as Arrow with the contract's data columns (no partition column), as a batch function holds them."""
    names = DECODE_ERRORS.column_names
    cols = list(zip(*data))
    keep = DECODE_ERRORS.data_columns()
    return pa.RecordBatch.from_arrays([pa.array(cols[names.index(c.name)], c.arrow_type) for c in keep],
                                      names=[c.name for c in keep])


def staged_write(store: TableStore, batches_by_task: dict[int, list[tuple[str, list]]], report=None, **commit):
    """Each task writes its (unit, rows) batches; the files of the tasks in ``report`` (default all) are committed."""
    staged = store.stage("decode_errors", "run1")
    files = {}
    for task, batches in batches_by_task.items():
        w = staged.writer(task, group_rows=2)
        for unit, data in batches:
            w.write(unit, arrow_rows(data))
        files[task] = w.close()
    reported = [f for t in (report if report is not None else files) for f in files[t]]
    return store.commit_staged(staged, reported, **commit), staged


def table_rows(store: TableStore) -> list[tuple]:
    return sorted(tuple(r) for r in store.read("decode_errors").collect())


def test_staged_files_read_back_as_the_spark_writers_do(spark, tmp_path):
    data_a, data_b = rows("A", 5), rows("B", 2)
    units = {"A": "i:A:v1", "B": "i:B:v1"}
    by_spark = TableStore(spark, str(tmp_path / "spark"))
    assert by_spark.write("decode_errors", frame(spark, data_a + data_b), units=units, run_id="run1")
    by_tasks = TableStore(spark, str(tmp_path / "tasks"))
    ok, _ = staged_write(by_tasks, {0: [("A", data_a[:3]), ("B", data_b)], 1: [("A", data_a[3:])]},
                         units=units, partitions={"A": DAY, "B": DAY}, run_id="run1")
    assert ok
    assert table_rows(by_tasks) == table_rows(by_spark) and len(table_rows(by_tasks)) == 7
    for name in ("spark", "tasks"):
        t = DeltaTable(str(tmp_path / name / "decode_errors"))
        assert t.version() == 0 and t.metadata().partition_columns == ["capture_date"]
        arrow = t.to_pyarrow_table().sort_by("error_id")
        assert set(arrow.column("capture_date").to_pylist()) == {dt.date(2024, 5, 1)}
        assert arrow.column("ts").to_pylist()[0] == dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    adds = pa.table(DeltaTable(str(tmp_path / "tasks" / "decode_errors")).get_add_actions(flatten=True)).to_pydict()
    assert sorted(adds["num_records"]) == [2, 2, 3]  # one file per (task, unit); row groups do not change that
    assert not (tmp_path / "tasks" / "decode_errors" / "_staging" / "run1").exists()


def test_a_retried_task_replaces_its_files_and_unreported_files_stay_out(spark, lake):
    store = TableStore(spark, str(lake))
    staged = store.stage("decode_errors", "run1")
    first = staged.writer(0)
    first.write("A", arrow_rows(rows("A", 4, "first attempt")))
    first.close()  # the attempt failed afterwards: its report never reached the driver
    second = staged.writer(0)
    second.write("A", arrow_rows(rows("A", 2, "second attempt")))
    files = second.close()
    stray = staged.writer(7)  # a task whose output no successful attempt reported
    stray.write("A", arrow_rows(rows("A", 9, "stray")))
    stray.close()
    assert store.commit_staged(staged, files, units={"A": "i:A:v1"}, partitions={"A": DAY}, run_id="run1")
    assert [r[8] for r in table_rows(store)] == ["second attempt"] * 2
    assert not list((lake / "decode_errors" / "_staging").iterdir())


def test_units_the_table_holds_are_skipped(spark, lake):
    store = TableStore(spark, str(lake))
    commit = {"units": {"A": "i:A:v1"}, "partitions": {"A": DAY}, "run_id": "run1"}
    assert staged_write(store, {0: [("A", rows("A", 3))]}, **commit)[0]
    version = store.version("decode_errors")
    assert not staged_write(store, {0: [("A", rows("A", 5, "again"))]}, **commit)[0]
    assert store.version("decode_errors") == version and len(table_rows(store)) == 3


def test_rows_that_do_not_fit_the_contract_are_refused(spark, lake):
    store = TableStore(spark, str(lake))
    w = store.stage("decode_errors", "run1").writer(0)
    batch = arrow_rows(rows("A", 2))
    with pytest.raises(SchemaMismatch, match="lack reason"):
        w.write("A", batch.drop_columns(["reason"]))
    text_offsets = batch.set_column(batch.schema.get_field_index("offset"), "offset", pa.array(["ten", "x"]))
    with pytest.raises(SchemaMismatch, match="do not fit the contract"):
        w.write("A", text_offsets)
    assert w.close() == []  # nothing was half written


def test_contract_batch_fills_columns_by_name_and_refuses_a_missing_required_one():
    from amqplens.lake.staging import contract_batch
    from amqplens.contracts import FRAMES

    struct = pa.StructArray.from_arrays(
        [pa.array(["c1"]), pa.array([1_714_564_800_000_001]), pa.array(["to_server"])],
        names=["connection_id", "ts_us", "direction"],
    )
    with pytest.raises(SchemaMismatch, match="no values for column frame_id"):
        contract_batch(FRAMES, struct, {})
    required = {c.name: pa.array([None], c.arrow_type) for c in FRAMES.data_columns() if not c.nullable}
    required.pop("connection_id"), required.pop("ts"), required.pop("direction")
    got = contract_batch(FRAMES, struct, {**required, "frame_id": pa.array(["f"])})
    assert got.schema.names == [c.name for c in FRAMES.data_columns()] and "capture_date" not in got.schema.names
    assert got.column("ts")[0].as_py() == dt.datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=dt.timezone.utc)
    assert got.column("connection_id")[0].as_py() == "c1" and got.column("channel")[0].as_py() is None


def test_a_tables_plain_columns_are_written_without_a_dictionary_and_read_back_the_same(tmp_path):
    """``Table.plain`` (ids, offsets, times: nearly all distinct) is storage only: those column chunks carry no
    dictionary page, the others keep theirs, and the file reads back as written."""
    import pyarrow.parquet as pq

    from amqplens.contracts import FRAMES
    from amqplens.lake.staging import StagedTable

    n = 64
    data = {c.name: pa.nulls(n, c.arrow_type) for c in FRAMES.data_columns()}
    data.update(frame_id=pa.array([f"c1-s-{i * 9}" for i in range(n)]), connection_id=pa.array(["c1"] * n),
                stream_offset=pa.array([i * 9 for i in range(n)], pa.int64()), direction=pa.array(["to_server"] * n),
                ts=pa.array([dt.datetime(2024, 5, 1, 12, 0, 0, i, tzinfo=dt.timezone.utc) for i in range(n)], FRAMES.column("ts").arrow_type),
                delivery_tag=pa.array(range(n), pa.int64()), message_seq=pa.array(range(n), pa.int64()),
                arguments_json=pa.array([f'{{"n": {i}}}' for i in range(n)]))
    filled = {"frame_id", "connection_id", "stream_offset", "direction", "ts", "delivery_tag", "message_seq", "arguments_json"}
    batch = pa.RecordBatch.from_arrays(list(data.values()), names=list(data))
    writer = StagedTable("frames", str(tmp_path), "run1").writer(0)
    writer.write("cap", batch)
    (done,) = writer.close()
    path = next(tmp_path.rglob("*.parquet"))
    meta = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {meta.column(i).path_in_schema: meta.column(i).has_dictionary_page for i in range(meta.num_columns)}
    assert FRAMES.plain and all(not dictionary[name] for name in FRAMES.plain), dictionary
    assert dictionary["connection_id"] and dictionary["direction"]
    # the columns no row fills are left out of the file (``_Slot``): read with the contract's schema, the same rows
    store = TableStore(None, str(tmp_path))
    got = store.dataset("frames", [("", path.relative_to(tmp_path / "frames").as_posix(), 0)]).to_table()
    assert got.select(batch.schema.names).equals(pa.Table.from_batches([batch])) and done.rows == n
    assert pq.read_schema(path).names == [c.name for c in FRAMES.data_columns() if c.name in filled or not c.nullable]


def test_a_file_leaves_out_the_columns_no_row_fills_and_the_next_file_takes_one_filled_later(spark, lake):
    """Columns nobody fills are not written (Parquet encodes a column of nulls value by value: a third of the
    frames' write); a row group that fills one the file left out begins the task's next file for the unit, which
    leaves out only what that group does not fill. Read back through Spark, delta-rs and pyarrow, the rows are the
    ones written, nulls where nothing was written, in files of one unit (the packed one too: its units per file)."""
    import pyarrow.parquet as pq

    store = TableStore(spark, str(lake))
    staged = store.stage("decode_errors", "run1", pack={"P": "capture_date=2024-05-01"})
    w = staged.writer(0, group_rows=2)
    plain = rows("A", 4)  # connection_id, direction null on every row
    filled = [r[:3] + ("conn-1", "to_server") + r[5:] for r in rows("A", 2, "later")]
    filled = [(f"A-late-{i}",) + r[1:] for i, r in enumerate(filled)]
    w.write("A", arrow_rows(plain[:2]))
    w.write("A", arrow_rows(plain[2:]))
    w.write("A", arrow_rows(filled))
    w.write("A", arrow_rows(plain[:1]).slice(0, 0))  # an empty batch changes nothing
    w.write("P", arrow_rows([(f"P-{i}",) + r[1:] for i, r in enumerate(rows("P", 3))]))
    files = w.close()
    got = sorted((f.unit, f.path.rsplit("/", 1)[-1], f.rows, f.units) for f in files)
    assert got == [("A", "part-t00000-1.parquet", 2, None), ("A", "part-t00000.parquet", 4, None),
                   ("P", "part-t00000.parquet", 3, {"P": 3})], got
    root = lake / "decode_errors" / "_staging" / staged.folder
    schemas = {p.relative_to(root).as_posix(): pq.read_schema(p).names for p in root.rglob("*.parquet")}
    first, second = schemas["_rk=A/part-t00000.parquet"], schemas["_rk=A/part-t00000-1.parquet"]
    assert "connection_id" not in first and "direction" not in first and "detail" in first
    assert "connection_id" in second and "direction" in second and "error_id" in second
    assert store.commit_staged(staged, files, units={"A": "i:A:v1", "P": "i:P:v1"},
                               partitions={"A": DAY, "P": DAY}, run_id="run1")
    want = sorted((r[0], r[3], r[4], r[8]) for r in plain + filled + [(f"P-{i}",) + r[1:] for i, r in enumerate(rows("P", 3))])
    spark_rows = sorted((r.error_id, r.connection_id, r.direction, r.reason) for r in store.read("decode_errors").collect())
    assert spark_rows == want
    arrow = DeltaTable(str(lake / "decode_errors")).to_pyarrow_table()
    assert sorted(zip(*(arrow.column(c).to_pylist() for c in ("error_id", "connection_id", "direction", "reason")))) == want
    local = store.read_arrow("decode_errors", ["error_id", "connection_id", "direction", "reason"], ["A"])
    assert sorted(zip(*local.to_pydict().values())) == [w for w in want if w[0].startswith("A-")]
    assert store.null_columns("decode_errors", ["P"], ["connection_id", "detail"]) == {"connection_id"}


def test_the_columns_of_a_units_files_only_grow_whatever_order_its_groups_fill_them(spark, lake):
    """Groups that fill a left-out column in turn (connection_id, then direction alone, then connection_id alone
    again, then neither): one file more per column first filled, never one per group; every row read back."""
    import pyarrow.parquet as pq

    store = TableStore(spark, str(lake))
    staged = store.stage("decode_errors", "run1")
    w = staged.writer(0, group_rows=2)
    base = rows("A", 8)
    fills = [(None, None), ("conn-1", None), (None, "to_client"), ("conn-2", None), (None, None)]
    written = []
    for k, (conn, direction) in enumerate(fills):
        group = [(f"A-{k}-{i}",) + r[1:3] + (conn, direction) + r[5:] for i, r in enumerate(base[:2])]
        written += group
        w.write("A", arrow_rows(group))
    files = w.close()
    names = sorted(f.path.rsplit("/", 1)[-1] for f in files)
    assert names == ["part-t00000-1.parquet", "part-t00000-2.parquet", "part-t00000.parquet"], names
    root = lake / "decode_errors" / "_staging" / staged.folder / "_rk=A"
    held = {p.name: set(pq.read_schema(p).names) & {"connection_id", "direction"} for p in root.glob("*.parquet")}
    assert held == {"part-t00000.parquet": set(), "part-t00000-1.parquet": {"connection_id"},
                    "part-t00000-2.parquet": {"connection_id", "direction"}}, held
    assert sorted(f.rows for f in files) == [2, 2, 6]
    assert store.commit_staged(staged, files, units={"A": "i:A:v1"}, partitions={"A": DAY}, run_id="run1")
    got = sorted((r.error_id, r.connection_id, r.direction) for r in store.read("decode_errors").collect())
    assert got == sorted((r[0], r[3], r[4]) for r in written)
