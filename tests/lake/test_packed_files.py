"""Packed files (``lake.pack_small_units``): small captures sharing a file per table, on real Delta tables on disk.

What is tried: units packed by the driver's Arrow writes and by a task's staged writer (two dates, so two files),
read back a unit at a time, some units at a time and all at once; row counts from the footers; replacing one packed
unit, then all the units of a file, then a unit of a file whose footer does not read; a packed staging file of which
another writer committed one unit first; ``amqplens check`` on a packed file removed and on one cut short; and the
same writes with packing off, which must give the same rows in one file per unit.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from amqplens.contracts import DECODE_ERRORS
from amqplens.lake import check as lake_check
from amqplens.lake.staging import UNITS_KEY
from amqplens.lake.store import LakeConflict, TableStore

DAY1, DAY2 = dt.date(2024, 5, 1), dt.date(2024, 5, 2)


def errors(unit: str, n: int, day=DAY1, reason: str = "bad") -> pa.Table:
    """``n`` decode_errors rows of ``unit`` on ``day``, in the contract's Arrow schema."""
    ts = dt.datetime.combine(day, dt.time(12), tzinfo=dt.timezone.utc)
    rows = [{"error_id": f"{unit}-{i}", "capture_id": unit, "capture_date": day, "connection_id": None,
             "direction": None, "stage": "capture", "offset": i * 10, "length": 10, "reason": reason,
             "detail": "detail", "ts": ts, "raw": b"\x00" * 3, "raw_length": 10, "raw_sha256": "ab"} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=DECODE_ERRORS.arrow_schema())


def read(store: TableStore, units=None) -> list[tuple]:
    t = store.read_arrow("decode_errors", ["error_id", "reason"], units)
    return sorted(zip(t.column("error_id").to_pylist(), t.column("reason").to_pylist())) if t.num_columns else []


def files(lake) -> list[str]:
    return DeltaTable(str(lake / "decode_errors")).file_uris()


def app(unit: str, v: int = 1) -> str:
    return f"amqplens/test/{unit}/v{v}"


def test_small_units_share_a_file_per_date_and_read_back_exactly(tmp_path):
    store = TableStore(None, str(tmp_path))
    data = pa.concat_tables([errors("A", 3), errors("B", 2), errors("C", 1, DAY2), errors("D", 4)])
    assert store.write_arrow("decode_errors", data, units={u: app(u) for u in "ABCD"}, run_id="r1")
    uris = files(tmp_path)
    assert len(uris) == 2  # A, B and D on the first day, C alone on the second
    footers = [pq.read_metadata(u.removeprefix("file://")).metadata for u in uris]
    assert sorted((json.loads(m[UNITS_KEY]) for m in footers), key=len) == [{"C": 1}, {"A": 3, "B": 2, "D": 4}]
    assert read(store, ["B"]) == [("B-0", "bad"), ("B-1", "bad")]
    assert [i for i, _ in read(store, ["A", "C"])] == ["A-0", "A-1", "A-2", "C-0"]
    assert len(read(store)) == 10
    assert store.rows("decode_errors", ["A", "D"]) == 7 and store.rows("decode_errors", ["C"]) == 1
    assert store.rows("decode_errors", ["X"]) == 0
    # a unit's files are the packed file it is in, and that file is not exactly the unit's (a filter reads it)
    got, exact = store.unit_files("decode_errors", store.delta("decode_errors"), ["B"])
    assert len(got) == 1 and not exact
    got, exact = store.unit_files("decode_errors", store.delta("decode_errors"), ["A", "B", "D"])
    assert len(got) == 1 and exact
    assert lake_check.table_captures(str(tmp_path)) == set("ABCD")


def test_replacing_a_packed_unit_rewrites_its_file_without_it(tmp_path):
    store = TableStore(None, str(tmp_path))
    data = pa.concat_tables([errors("A", 3), errors("B", 2), errors("D", 4)])
    store.write_arrow("decode_errors", data, units={u: app(u) for u in "ABD"}, run_id="r1")
    v = store.version("decode_errors")
    assert store.write_arrow("decode_errors", errors("B", 1, reason="new"), units={"B": app("B", 2)}, run_id="r2")
    assert store.version("decode_errors") == v + 1  # one commit: the packed file removed, A and D rewritten, B added
    assert read(store) == sorted([(f"A-{i}", "bad") for i in range(3)] + [("B-0", "new")]
                                 + [(f"D-{i}", "bad") for i in range(4)])
    assert store.rows("decode_errors", ["A"]) == 3 and store.rows("decode_errors", ["B"]) == 1
    assert len(files(tmp_path)) == 2  # A and D's rewritten file, B's new one
    # every unit of a file replaced: the file goes, nothing is rewritten
    dt0 = store.delta("decode_errors")
    removes, rewritten = store._removals(DECODE_ERRORS, dt0, {"A", "D"})
    assert len(removes) == 1 and rewritten == []
    store.write_arrow("decode_errors", pa.concat_tables([errors("A", 1, reason="x"), errors("D", 1, reason="x")]),
                      units={"A": app("A", 2), "D": app("D", 2)}, run_id="r3")
    assert read(store) == [("A-0", "x"), ("B-0", "new"), ("D-0", "x")]
    assert lake_check.check(str(tmp_path), deep=True) == []


def test_packing_off_gives_the_same_rows_in_a_file_per_unit(tmp_path):
    data = pa.concat_tables([errors("A", 3), errors("B", 2), errors("C", 1, DAY2)])
    on, off = TableStore(None, str(tmp_path / "on")), TableStore(None, str(tmp_path / "off"), pack=False)
    for store in (on, off):
        store.write_arrow("decode_errors", data, units={u: app(u) for u in "ABC"}, run_id="r1")
    assert read(on) == read(off) and len(read(on)) == 6
    assert len(files(tmp_path / "on")) == 2 and len(files(tmp_path / "off")) == 3


def test_a_staged_packed_file_leaves_out_the_units_another_writer_committed(tmp_path):
    store = TableStore(None, str(tmp_path))
    store.write_arrow("decode_errors", errors("B", 1, reason="other run"), units={"B": app("B")}, run_id="r0")
    staged = store.stage("decode_errors", "r1", pack={u: "capture_date=2024-05-01" for u in "AB"})
    writer = staged.writer(3)
    for unit, n in (("A", 2), ("B", 2)):
        writer.write(unit, errors(unit, n).drop_columns(["capture_date"]).to_batches()[0])
    reported = writer.close()
    assert len(reported) == 1 and reported[0].units == {"A": 2, "B": 2}
    parts = {u: {"capture_date": "2024-05-01"} for u in "AB"}
    assert store.commit_staged(staged, reported, units={u: app(u) for u in "AB"}, partitions=parts, run_id="r1")
    assert read(store) == [("A-0", "bad"), ("A-1", "bad"), ("B-0", "other run")]
    assert store.rows("decode_errors", ["A"]) == 2 and store.rows("decode_errors", ["B"]) == 1


def test_a_file_of_several_units_that_does_not_say_which_is_not_replaced_blindly(tmp_path):
    """A file another writer added (delta-rs's own writer: two captures, no list in its footer) is whole and of its
    logged size, so it is not taken for damage: replacing one of its captures is refused, not guessed."""
    from deltalake import write_deltalake

    store = TableStore(None, str(tmp_path))
    store.write_arrow("decode_errors", errors("Z", 1), units={"Z": app("Z")}, run_id="r1")
    write_deltalake(str(tmp_path / "decode_errors"), pa.concat_tables([errors("A", 2), errors("B", 2)]),
                    mode="append", partition_by=["capture_date"])
    with pytest.raises(LakeConflict, match="without saying which"):
        store._removals(DECODE_ERRORS, store.delta("decode_errors"), {"A"})
    assert read(store, ["A"]) == [("A-0", "bad"), ("A-1", "bad")]  # read and filtered row by row


def test_check_names_every_capture_of_a_damaged_packed_file(tmp_path):
    store = TableStore(None, str(tmp_path))
    store.write_arrow("decode_errors", pa.concat_tables([errors("A", 2), errors("B", 2), errors("C", 1)]),
                      units={u: app(u) for u in "ABC"}, run_id="r1")
    (uri,) = files(tmp_path)
    path = uri.removeprefix("file://")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])  # cut short: the footer does not read either
    problems = lake_check.check(str(tmp_path), names=["decode_errors"])
    assert len(problems) == 1 and "bytes" in problems[0].what
    # the footer is gone: its captures are those of the commit that added it, between its least and greatest
    assert set(problems[0].captures) == {"A", "B", "C"}
    # a reader of the table leaves the damaged file out and does not fail
    assert read(TableStore(None, str(tmp_path)), ["B"]) == []


@pytest.mark.parametrize("damage", ["cut", "gone"])
def test_a_rerun_of_the_captures_check_names_replaces_a_damaged_packed_file(tmp_path, monkeypatch, damage):
    """As a run of the same input after ``check`` (``TableStore.redo``): the damaged file is removed, the captures'
    rows written again, and the lake is whole; a capture of another file is left as it was."""
    store = TableStore(None, str(tmp_path))
    units = {u: app(u) for u in "ABCE"}
    store.write_arrow("decode_errors", pa.concat_tables([errors("A", 2), errors("B", 2), errors("C", 1)]),
                      units={u: units[u] for u in "ABC"}, run_id="r1")
    store.write_arrow("decode_errors", errors("E", 1, DAY2), units={"E": units["E"]}, run_id="r2")
    (path,) = [u.removeprefix("file://") for u in files(tmp_path) if "2024-05-01" in u]
    if damage == "cut":
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[:100])
    else:
        import os

        os.remove(path)
    damaged = lake_check.damaged_captures(lake_check.check(str(tmp_path)))
    assert damaged == {"A", "B", "C"}
    monkeypatch.setattr(TableStore, "redo", frozenset(damaged))
    again = TableStore(None, str(tmp_path))
    assert again.write_arrow("decode_errors", pa.concat_tables([errors("A", 2), errors("B", 2), errors("C", 1)]),
                             units={u: units[u] for u in "ABC"}, run_id="r3")
    assert lake_check.check(str(tmp_path), deep=True) == []
    assert [i for i, _ in read(again)] == ["A-0", "A-1", "B-0", "B-1", "C-0", "E-0"]
