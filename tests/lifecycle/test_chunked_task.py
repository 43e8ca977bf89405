"""A direct lifecycle task's connection a chunk at a time (``jobs.lifecycle.chunked_connection``) writes the files
the task's whole path writes (``sorted_table_lifecycle``), row for row, or writes nothing and says so (None).

Each connection of the capture fixtures and of mutated frame tables (test_fold's mutations), read as a direct
task of one connection reads it (its repeated text as dictionaries, no frame ids, the connection id made), in the
decoder's order, in read batches of 7 to 50 rows, in chunks of 5 to 500 frames. Both paths' files are written
under a staging folder and read back; every column of every row compared.
"""

from __future__ import annotations

import glob
import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from amqplens.jobs import lifecycle
from amqplens.lake.staging import read_file
from amqplens.lake.store import TableStore
from amqplens.lifecycle.chunks import sort_keys
from amqplens.lifecycle.fold import Handed
from amqplens.lifecycle.fused import _SORT, sorted_table_lifecycle
from tests.lifecycle.captures import DATA, frames_of
from tests.lifecycle.test_fold import CAPTURES, _dictionaries, _table, mutated_samples


def _written(root) -> dict[str, list]:
    out = {}
    for _, table in lifecycle.OUTPUTS:
        rows = [r for f in sorted(glob.glob(f"{root}/{table.name}/**/*.parquet", recursive=True))
                for r in read_file(f, table.name).to_pylist()]
        out[table.name] = sorted(rows, key=repr)
    return out


def _whole(table: pa.Table, root) -> dict[str, list]:
    staged = lifecycle.stage_tables(TableStore(None, str(root)), "whole")
    sorted_ = table.take(pc.sort_indices(sort_keys(table), options=_SORT))
    fn = lambda _: sorted_table_lifecycle(Handed(sorted_), [], **lifecycle.structs(), batch_rows=300)  # noqa: E731
    list(lifecycle.stage_lifecycle(None, fn, staged, 0))
    return _written(root)


def _chunked(source: pa.Table, cid: str, root, chunk: int, batch: int):
    """The chunked path's files (None: it gave the connection back)."""
    staged = lifecycle.stage_tables(TableStore(None, str(root)), "chunked")
    data = ds.dataset(pa.Table.from_batches(source.to_batches(max_chunksize=batch)))
    columns = [c for c in source.column_names if c != "connection_id"]
    files = lifecycle.chunked_connection(data, columns, pc.field("connection_id") == cid, cid, [], staged, chunk)
    written = _written(root)
    if files is None:
        assert not any(written.values()), "a connection given back leaves no file"
        return None
    assert sum(f.rows for _, f in files) == sum(len(v) for v in written.values())
    return written


def _connections(rows: list[dict]):
    """(connection id, its frames in the decoder's order as a direct task reads them)."""
    table = _dictionaries(_table(rows)).drop_columns(["frame_id"])
    conns = table.column("connection_id")
    for cid in pc.unique(conns).to_pylist():
        if cid is not None:
            yield cid, table.filter(pc.fill_null(pc.equal(conns, cid), False))


def _compare(rows: list[dict], tmp_path, rng: random.Random, tag: str) -> list[bool]:
    taken = []
    for k, (cid, mine) in enumerate(_connections(rows)):
        whole = _whole(mine.drop_columns(["connection_id"]).append_column(
            "connection_id", pa.DictionaryArray.from_arrays(pa.array([0] * mine.num_rows, pa.int32()), pa.array([cid]))),
            tmp_path / f"{tag}-{k}-whole")
        chunk, batch = rng.choice((5, 20, 60, 500)), rng.choice((7, 16, 50))
        got = _chunked(mine, cid, tmp_path / f"{tag}-{k}-chunked", chunk, batch)
        if got is not None:
            assert got == whole, (cid, chunk, batch)
        taken.append(got is not None)
    return taken


@pytest.mark.parametrize("path", [p for p in CAPTURES if "fuzz" not in p.parts], ids=lambda p: str(p.relative_to(DATA)))
def test_a_connection_in_chunks_writes_the_whole_paths_rows(path, tmp_path):
    _compare(frames_of(path), tmp_path, random.Random(str(path)), "f")


def test_most_broker_connections_are_done_in_chunks(tmp_path):
    """Not vacuous: the real broker's connections that the array pass models are done in chunks, not given back."""
    taken = []
    for path in sorted((DATA / "broker").glob("*.pcap")):
        taken += _compare(frames_of(path), tmp_path, random.Random(1), path.stem)
    assert len(taken) >= 40 and sum(taken) >= 0.6 * len(taken), (sum(taken), len(taken))


@pytest.mark.parametrize("seed", range(6))
def test_mutated_connections_in_chunks_write_the_whole_paths_rows(seed, tmp_path):
    rng = random.Random(seed)
    for k, (_, mutated) in enumerate(mutated_samples(rng)):
        _compare(mutated, tmp_path, rng, f"m{k}")


def test_times_going_back_across_chunks_give_the_connection_back(tmp_path):
    """Read in an order whose times go back (rows shuffled): no chunk may be cut safely, so nothing is written."""
    path = DATA / "broker" / "publish_confirms.pcap"
    for cid, mine in _connections(frames_of(path)):
        if mine.num_rows > 100:
            shuffled = mine.take(pa.array(random.Random(0).sample(range(mine.num_rows), mine.num_rows)))
            assert _chunked(shuffled, cid, tmp_path / "back", 20, 10) is None
            return
    raise AssertionError("no connection of more than 100 frames")
