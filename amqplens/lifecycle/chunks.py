"""One 0-9-1 connection's rows cut into sorted chunks, so that what a task holds is a chunk, not the connection.

Two paths read a long connection's frames in the decoder's order (times never go back): the lifecycle job's direct
task of one connection (``jobs.lifecycle.chunked_connection``, from the frames files) and the ingest's decode task
(``fused.ConnectionLifecycle``, as the decoder gives them). ``ChunkCutter`` takes those rows as they come and gives
a chunk each time it holds ``chunk_frames`` rows and finds a place to cut (``cut_place``); each chunk goes to
``array091.ConnectionPass``, which carries the pass's state to the next. Where a connection cannot be done so
(``Unchunked``: its times go back, its offsets do not rise, its dialect changes or is not of the 0-9-1 family, a row
lacks a time, offset or direction, no place to cut comes within four chunks) the caller does it whole; the rows are
the same either way (``tests/lifecycle/test_chunked_task.py``, ``tests/lifecycle/test_fused_chunks.py``).

Python per chunk and per read batch, never per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.detect import FAMILY_0_9_1
from amqplens.lifecycle.fold import FOLD_COLUMNS, column_in, column_valid, fold, plain, plain_table

# the lifecycle job's sortWithinPartitions after its shuffle by connection_id (amqplens/jobs/lifecycle.py), after connection_id;
# the last key only orders the two directions' frames of equal time and offset, so the order never depends on the input's
SORT_KEYS = ("ts", "stream_offset", "direction")
SLICED_RUNS = 64  # in_order: at most this many runs in order already are put together as slices, not copied
NO_CUT_CHUNKS = 4  # a connection held this many chunks' rows without a place to cut is given back (done whole)
FOLD_TYPES = {"fold_frame_ids": pa.list_(pa.string()), "fold_properties_json": pa.string(),
              "fold_body_size": pa.int64(), "fold_body_sha256": pa.string()}


class Unchunked(Exception):
    """The connection cannot be done a chunk at a time (it is then done whole)."""


class ChunkCutter:
    """A connection's rows in the decoder's order in (``add``), sorted chunks out; ``last`` the rows after the last
    cut. A chunk ends where the time rises and no message is open in either direction (so a folded message never
    spans two, and the lifecycle's order of the connection is the chunks' orders one after the other), at a time no
    row not read yet can come before (the last row read's: the decoder's times never go back). Raises ``Unchunked``."""

    def __init__(self, chunk_frames: int) -> None:
        self.chunk_frames = max(1, chunk_frames)
        self.held: list[pa.Table] = []  # rows read, not yet in a chunk
        self.held_rows = 0
        self.floor: int | None = None  # the time every row read from now on must reach: the last chunk's cut
        self.last_offset = [-1, -1]  # per direction (to_server, to_client): the last chunk's highest stream offset
        self.dialect: str | None = None
        self.chunks = 0  # chunks given

    def add(self, table: pa.Table) -> pa.Table | None:
        """The connection's next rows (every column the lifecycle reads, ``connection_id`` among them); the next
        chunk, sorted, or None while no chunk is due or no place to cut has come yet."""
        if not table.num_rows:
            return None
        self.held.append(table)  # kept where it raises too: ``give_back`` gives every row added
        self.held_rows += table.num_rows
        if any(table.column(c).null_count for c in ("ts", "stream_offset", "direction")) or not column_in(
                table, "direction", ["to_server", "to_client"]).all():
            raise Unchunked("a row without a time, offset or direction")
        ts = table.column("ts").cast(pa.int64()).to_numpy()
        if self.floor is not None and ts.min() < self.floor:
            raise Unchunked("times go back")
        if self.held_rows < self.chunk_frames:
            return None
        rows = sorted_rows(pa.concat_tables(self.held, promote_options="default"))
        self.held = []
        cut = cut_place(rows, int(ts[-1]))  # no row still to read is earlier than the last one read
        if cut is None:
            if self.held_rows >= NO_CUT_CHUNKS * self.chunk_frames:
                raise Unchunked("no place to cut")
            self.held = [rows]
            return None
        self.held = [rows]  # until the chunk passes its checks: where it fails, every row is still given back
        chunk = self._checked(rows.slice(0, cut))
        self.floor = int(rows.column("ts").cast(pa.int64())[cut].as_py())
        # the rows after the cut copied (a few), so that the chunk's buffers go with the chunk
        rest = pa.Table.from_batches(rows.slice(cut).to_batches(), rows.schema).combine_chunks()
        self.held = [rest]
        self.held_rows = rest.num_rows
        return chunk

    def last(self) -> pa.Table:
        """The rows after the last cut (never none after one: a cut leaves a row at least), sorted: the last chunk."""
        if not self.held_rows:
            raise Unchunked("no rows")
        rows = sorted_rows(pa.concat_tables(self.held, promote_options="default"))
        self.held = [rows]
        chunk = self._checked(rows)
        self.held, self.held_rows = [], 0
        return chunk

    def give_back(self) -> list[pa.Table]:
        """The rows held (not yet in a chunk; after ``Unchunked``, every row added since the last chunk given), let
        go by the cutter."""
        held, self.held, self.held_rows = self.held, [], 0
        return held

    def _checked(self, part: pa.Table) -> pa.Table:
        names = pc.unique(plain(part.column("dialect"))).to_pylist()
        if len(names) != 1 or names[0] not in FAMILY_0_9_1 or self.dialect not in (None, names[0]):
            raise Unchunked(f"dialects {names}")
        self.dialect = names[0]
        to_client = column_in(part, "direction", ["to_client"])
        offsets = pc.fill_null(part.column("stream_offset"), 0).to_numpy()
        for d in (0, 1):
            mine = offsets[to_client == bool(d)]
            if len(mine):
                if mine.min() <= self.last_offset[d]:
                    raise Unchunked("offsets do not rise")
                self.last_offset[d] = int(mine.max())
        self.chunks += 1
        return part


def folded_chunk(chunk: pa.Table, window: int) -> pa.Table:
    """A sorted chunk folded (``fold``), with the fold's columns (null) where nothing in it folded: what
    ``ConnectionPass.feed`` takes."""
    folded = plain_table(fold(chunk, window))
    for name in FOLD_COLUMNS:
        if name not in folded.column_names:
            folded = folded.append_column(pa.field(name, FOLD_TYPES[name]), pa.nulls(folded.num_rows, FOLD_TYPES[name]))
    return folded


def cut_place(rows: pa.Table, latest: int) -> int | None:
    """The last place in sorted ``rows`` where a chunk may end: the time rises there, to no later than ``latest``,
    and in neither direction is a message open (a basic.publish, deliver or get-ok whose content has not come to
    the frame with the body's hash; heartbeats change nothing). None where there is none."""
    n = rows.num_rows
    ts = rows.column("ts").cast(pa.int64()).to_numpy()
    to_client = column_in(rows, "direction", ["to_client"])
    method = column_in(rows, "frame_type", ["method"])
    content = column_in(rows, "frame_type", ["header", "body"])
    opens = method & column_in(rows, "class_name", ["basic"]) & column_in(rows, "method_name", ["publish", "deliver", "get-ok"])
    opens |= content & ~column_valid(rows, "body_sha256")
    changes = ~column_in(rows, "frame_type", ["heartbeat"])
    index = np.arange(n)
    open_before = np.ones(n + 1, bool)  # at place p: no message open in either direction before it
    for d in (False, True):
        last = np.maximum.accumulate(np.where(changes & (to_client == d), index, -1))
        open_d = np.zeros(n + 1, bool)
        open_d[1:] = np.where(last >= 0, opens[np.maximum(last, 0)], False)
        open_before &= ~open_d
    ok = np.zeros(n, bool)
    ok[1:] = (ts[1:] > ts[:-1]) & (ts[1:] <= latest) & open_before[1:n]
    places = np.flatnonzero(ok)
    return int(places[-1]) if len(places) else None


def sorted_rows(rows: pa.Table) -> pa.Table:
    """A connection's rows in the lifecycle's order (``jobs.lifecycle.read_sorted``'s)."""
    return in_order(rows, pc.sort_indices(sort_keys(rows), options=sort_options()))


def in_order(rows, order: pa.Array) -> pa.Table:
    """``rows`` (a table, or a ``fold.Handed`` one, let go as taken) in the ``order`` of its row numbers.

    In order already (a task of one connection, a chunk of one: every chunk of the 2 GB load capture's connections
    was), or a few runs of rows in order already (each connection is written in its sorted order): the sorted table
    as slices of the one given, no copy (the copies were 297 of 2,354 samples of the 2 GB capture's job; a chunked
    connection's take of each chunk 11.9% of the lifecycle job's samples). Not for many runs: a task of 10,000 short
    connections made so took 18.9 CPU s against 4.9 (a slice of a table of thousands of chunks, and what each group
    does per chunk)."""
    from amqplens.lifecycle.fold import Handed

    table = rows.table if isinstance(rows, Handed) else rows
    at = order.to_numpy()
    if not len(at):
        return table
    starts = np.flatnonzero(np.r_[True, np.diff(at) != 1])
    if len(starts) <= SLICED_RUNS:
        ends = np.append(starts[1:], len(at))
        return pa.concat_tables([table.slice(int(at[s]), int(e - s)) for s, e in zip(starts, ends)])
    del table
    return rows.take_rows(order) if isinstance(rows, Handed) else rows.take(order)


def sort_keys(table: pa.Table) -> pa.Table:
    """The sort's keys of ``table`` (``sort_options``), a dictionary-encoded one as the rank of its value (Arrow's
    sort takes no dictionaries): the same order (a null first, as a null ranks -1)."""
    keys = {}
    for name in ("connection_id", *SORT_KEYS):
        column = table.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.unify_dictionaries().combine_chunks()  # one array, one dictionary
            rank = np.append(pc.rank(column.dictionary, "ascending").to_numpy().astype(np.int32), np.int32(-1))
            codes = pc.fill_null(column.indices, -1).to_numpy().astype(np.int64)
            column = pa.array(rank[codes])
        keys[name] = column
    return pa.table(keys)


def sort_options() -> pc.SortOptions:
    """``connection_id`` then ``SORT_KEYS``, ascending, nulls first (Spark's ascending order): per key where pyarrow
    takes that (25 deprecates the global setting)."""
    keys = ("connection_id", *SORT_KEYS)
    try:
        return pc.SortOptions([(k, "ascending", "at_start") for k in keys])
    except (TypeError, ValueError):
        return pc.SortOptions([(k, "ascending") for k in keys], null_placement="at_start")
