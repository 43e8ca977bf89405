"""Two writers committing to the same Delta table at the same moment (threads, each with its own TableStore).

Both writers read the table, write and place their files, then meet at a barrier
and commit together, so each commits against a snapshot the other one is about to
make stale. Tried: both creating the table, disjoint captures on an existing table,
the same capture with two different transaction ids, the same capture twice with
the same id. Afterwards delta-rs reads the table, no key is duplicated and the rows
are exactly what the winning commits wrote.
"""

from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

from amqplens.lake.store import TableStore
from tests.lake.test_tablestore import frame, rows

pytestmark = pytest.mark.spark


class RacingStore(TableStore):
    """A TableStore that waits for its rival after placing its files: both commits start from the same snapshot."""

    def __init__(self, spark, root: str, barrier: threading.Barrier) -> None:
        super().__init__(spark, root)
        self.barrier = barrier

    def _place_files(self, *args, **kwargs):
        adds = super()._place_files(*args, **kwargs)
        self.barrier.wait(timeout=300)
        return adds


def race(spark, lake, writes: list[tuple]) -> list:
    """Run each ``(data, units)`` write in its own thread; returns what each returned or raised."""
    barrier = threading.Barrier(len(writes))
    results: list = [None] * len(writes)

    def one(i: int, data, units) -> None:
        try:
            results[i] = RacingStore(spark, str(lake), barrier).write("decode_errors", frame(spark, data), units=units)
        except Exception as exc:  # the outcome under test
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i, *w)) for i, w in enumerate(writes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return results


def table_rows(lake) -> list[tuple]:
    t = DeltaTable(str(lake / "decode_errors")).to_pyarrow_table(columns=["error_id", "capture_id", "reason"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names)))


def assert_unique(got: list[tuple]) -> None:
    ids = [r[0] for r in got]
    assert len(ids) == len(set(ids)), "duplicate keys"


def test_two_writers_creating_the_table_both_land(spark, lake):
    results = race(spark, lake, [(rows("A", 3), {"A": "i:A:v1"}), (rows("B", 2), {"B": "i:B:v1"})])
    assert results == [True, True]
    got = table_rows(lake)
    assert_unique(got)
    assert got == sorted([(f"A-{i}", "A", "bad") for i in range(3)] + [(f"B-{i}", "B", "bad") for i in range(2)])
    assert DeltaTable(str(lake / "decode_errors")).version() == 1  # one create, one append after the retry


def test_disjoint_captures_on_an_existing_table_both_land(spark, lake):
    TableStore(spark, str(lake)).write("decode_errors", frame(spark, rows("A", 2) + rows("B", 2)), units={"A": "i:A:v1", "B": "i:B:v1"})
    results = race(spark, lake, [(rows("A", 1, "new"), {"A": "i:A:v2"}), (rows("C", 2), {"C": "i:C:v1"})])
    assert results == [True, True]
    got = table_rows(lake)
    assert_unique(got)
    assert got == [("A-0", "A", "new"), ("B-0", "B", "bad"), ("B-1", "B", "bad"), ("C-0", "C", "bad"), ("C-1", "C", "bad")]


def test_the_same_capture_replaced_by_two_runs_holds_one_runs_rows(spark, lake):
    TableStore(spark, str(lake)).write("decode_errors", frame(spark, rows("A", 2)), units={"A": "i:A:v1"})
    results = race(spark, lake, [(rows("A", 3, "one"), {"A": "i:A:v2"}), (rows("A", 1, "two"), {"A": "i:A:v3"})])
    got = table_rows(lake)
    assert_unique(got)
    # last commit wins, or the loser says why: never a mix of the two runs' rows
    assert got in ([(f"A-{i}", "A", "one") for i in range(3)], [("A-0", "A", "two")])
    for r in results:
        assert r is True or "another writer" in str(r), r


def test_the_same_capture_with_the_same_id_twice_commits_once(spark, lake):
    results = race(spark, lake, [(rows("A", 2), {"A": "i:A:v1"}), (rows("A", 2), {"A": "i:A:v1"})])
    assert sorted(results) == [False, True]  # one commit; the other finds its transaction id there and adds nothing
    got = table_rows(lake)
    assert got == [("A-0", "A", "bad"), ("A-1", "A", "bad")]
    dt = DeltaTable(str(lake / "decode_errors"))
    referenced = {u.removeprefix("file://") for u in dt.file_uris()}
    placed = {str(p) for p in (lake / "decode_errors").rglob("*.parquet") if "_staging" not in p.parts}
    assert placed == referenced  # the redundant writer removed the files it had placed
