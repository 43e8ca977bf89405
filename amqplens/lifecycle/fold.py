"""A 0-9-1 message's content frames folded onto its method frame before the machines see them (fused lifecycle).

Half the frames of a 0-9-1 capture under load are content (a basic.publish or basic.deliver is a method, a header
and one or more bodies) and heartbeats. The machine (``amqp091.Connection091``) does little with them: a content
frame appends its frame id to the open message's row, the header gives the properties and body size, the frame
with the body's SHA-256 completes it; a heartbeat does nothing. Yet each costs a row dict, a reorder-heap push and
pop and a machine call (issue 32: no Python per hot frame). ``fold`` does that work for a batch of whole
connections with array operations: the header and bodies of a message go onto its method row as four columns
(``FOLD_COLUMNS``: the frame ids, the header's properties and body size, the completing frame's hash) and leave
the batch, and so do heartbeats; ``Connection091._open_content`` takes a folded message whole.

The machines' rows must stay those of every frame fed one by one (the lifecycle job's path, which never folds;
``tests/lifecycle/test_fold.py`` compares both on every fixture and on mutated frame tables). So a message is
folded only where folding cannot change what the machine does, which the runner's order decides
(``runner.py``: each direction in stream order, the two merged by time):

- its connection is of the 0-9-1 family throughout, and in each direction, in the batch's order (connection,
  time, offset, direction), stream offsets strictly rise (the runner then handles each direction in the batch's
  order: no late frames);
- the runner handles the rows left in the same order with or without the removed ones
  (``kernels.same_order`` runs its merge both ways: a removed row never refers back, so it can only change the
  order where more rows share one time than the runner's reorder window, as on loopback captures whose 64 KB
  segments carry hundreds of frames; such a connection is left whole);
- it is a basic.publish, deliver or get-ok on a channel other than 0 with a message number, followed in its
  direction's stream, with nothing between, by a header and then bodies of the same channel and number, up to
  the first that carries the body's hash (the machine completes the message there; what follows is not folded);
- no frame of the other direction that is not a basic method (channel.open / close, connection.close-ok: what
  ends the message's channel) has a time between the method's and the completing frame's, inclusive.

Anything else is left as it is and goes to the machine frame by frame, as before. Heartbeats are removed (the
0-9-1 machine ignores them; they never refer back) except a connection's first row, which starts its machine.
The folded table then goes to ``array091.lifecycle``, which takes the connections it models whole; the rest go
to the machines. Without numba (``kernels``) nothing is folded.
"""

from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.common.arrow import frame_ids, trim_heap
from amqplens.decode.detect import FAMILY_0_9_1
from amqplens.lifecycle.runner import REFERS_BACK

TRIM_ROWS = 1 << 20  # a table of this many rows or more: the plan's freed pages handed back before the copy (below)
FOLD_COLUMNS = ("fold_frame_ids", "fold_properties_json", "fold_body_size", "fold_body_sha256")
_NEEDED = ("connection_id", "direction", "stream_offset", "ts", "dialect", "frame_type", "channel", "class_name",
           "method_name", "message_seq", "body_sha256")
_MESSAGE_METHODS = ("publish", "deliver", "get-ok")
# the source columns a Kept makes (and lets go) at once: the content frames' (the header's properties and body size,
# the completing body's hash: on the rows folded away) and the frame ids (one a row, most of them folded away). On the
# 2 GB load capture's 3.4M-frame connection they held 372 MiB of the source, their kept rows take 88 MiB
_MADE_AT_ONCE = ("properties_json", "body_size", "body_sha256", "frame_id")




class Handed:
    """A table handed on to a function that is to hold the only reference to it: ``fold`` lets its columns go one
    at a time as it copies the rows it keeps, so the frames are not held twice (the source and the folded copy: the
    lifecycle task of the 2 GB load capture's 3.4M-frame connection)."""

    __slots__ = ("table",)

    def __init__(self, table) -> None:
        self.table = table

    def take(self):
        table, self.table = self.table, None
        assert table is not None, "a handed table is taken once"
        return table

    def take_rows(self, indices) -> pa.Table:
        """The table's rows ``indices`` (the table taken, as ``take``), copied a column at a time, each source column
        let go as its copy replaces it: the rows and one column more are held, not the table twice."""
        table = self.take()
        schema, columns = table.schema, table.columns
        del table
        for i in range(len(columns)):
            columns[i] = columns[i].take(indices)
        return pa.Table.from_arrays(columns, schema=schema)


class Kept:
    """The rows ``fold`` keeps as a table whose columns are taken from the source on first use (``column``): the
    array pass reads about twenty of a frame's thirty-odd columns, and takes most output values a slice at a time
    (``take``), so the rows kept are not copied whole (on the 2 GB load capture's 3.4M-frame connection that copy of
    1.5M rows was 1.8 of 9.9 CPU s of its lifecycle). A source column is let go once its kept rows are made (the
    made column has every value a take or ``table`` needs), so the source and its copy are not both held.
    ``table()`` gives the rows as a ``pa.Table`` (the rows the machines take), letting each column go as it is copied."""

    def __init__(self, source: pa.Table, rows: np.ndarray, added: dict[str, pa.Array]) -> None:
        self._fields = {f.name: f for f in source.schema}
        self._columns: dict[str, pa.ChunkedArray] = dict(zip(source.column_names, source.columns))
        self._rows = rows
        self._added = dict(added)
        self._cache: dict[str, pa.ChunkedArray] = {}
        self.num_rows = len(rows)
        self.column_names = [*source.column_names, *(c for c in added if c not in source.column_names)]

    @property
    def schema(self) -> pa.Schema:
        fields = {k: pa.field(k, f.type.value_type, f.nullable) if pa.types.is_dictionary(f.type) else f
                  for k, f in self._fields.items()}
        fields.update({k: pa.field(k, v.type) for k, v in self._added.items()})
        return pa.schema([fields[c] for c in self.column_names])

    def column(self, name: str, join: bool = True):
        """``join``: False takes a column of long chunks chunk by chunk (``take_span``), not from one copy of them."""
        col = self._added.get(name)
        if col is None:
            col = self._cache.get(name)
        if col is None:
            col = self._cache[name] = pa.chunked_array([plain(take_span(self._columns.pop(name), self._rows, join))])
        return col

    def take(self, name: str, rows: np.ndarray) -> pa.Array:
        """Column ``name`` at the kept rows ``rows``: a column already made is taken from, another straight from
        the source, from the chunks the rows span only."""
        col = self._added.get(name)
        if col is None:
            col = self._cache.get(name)
        if col is None:
            source = self._columns[name]
            if _small_chunks(source):  # the kept rows made one array once, rather than joined for each take
                col = self.column(name)
            else:
                col, rows = source, self._rows[rows]
        return plain(take_span(col, rows))

    def set_column(self, i: int, name: str, column) -> "Kept":
        out = Kept.__new__(Kept)
        out._fields, out._columns, out._rows, out._cache = self._fields, self._columns, self._rows, self._cache
        out._added = {**self._added, name: column}
        out.num_rows, out.column_names = self.num_rows, self.column_names
        return out

    def table(self, mask: np.ndarray | None = None) -> pa.Table:
        """The rows kept (those ``mask`` selects, all without one) as a table; this object is spent."""
        schema = self.schema
        pick = self._rows if mask is None else self._rows[mask]
        keep = None if mask is None else pa.array(mask)
        out = []
        for name in self.column_names:
            made = self._added.get(name)
            if made is None:
                made = self._cache.pop(name, None)
            if made is not None:
                out.append(made if keep is None else made.filter(keep))
            else:
                out.append(plain(take_span(self._columns.pop(name), pick)))  # each source column let go once copied
        self._columns, self._cache = {}, {}
        return pa.Table.from_arrays(out, schema=schema)


SMALL_CHUNK = 4096  # rows: chunks shorter than this on average are joined, not taken from one at a time


def _small_chunks(column: pa.ChunkedArray) -> bool:
    """Whether a column's chunks are short (the fused lifecycle's held batches; not the Parquet reads' row groups)."""
    return column.num_chunks > 1 and len(column) < column.num_chunks * SMALL_CHUNK


def take_span(column: pa.ChunkedArray | pa.Array, rows: np.ndarray, join: bool = True) -> pa.Array:
    """``column``'s values at ``rows`` as one array. A ChunkedArray's take joins every chunk first, however few the
    rows (pyarrow 26: 29 ms against 0.1 ms for 8,192 rows of a 3.4M-row string column of 26 chunks, a cost per slice
    of a long connection's deliveries and flow events, and per connection of its rare frames): only the chunks the
    rows span are joined, and where the rows are few against that span, they are taken chunk by chunk instead.
    ``join`` False: chunk by chunk wherever the chunks are long (no copy of the span: a Parquet read's column of a
    connection of millions of frames)."""
    rows = np.asarray(rows, np.int64)
    if not isinstance(column, pa.ChunkedArray):
        return column.take(pa.array(rows))
    if not len(rows):
        return pa.array([], column.type)
    lo = int(rows.min())
    span = column.slice(lo, int(rows.max()) - lo + 1)
    rows = rows - lo
    if span.num_chunks == 1:
        return span.chunk(0).take(pa.array(rows))
    if (join and len(rows) * 4 >= len(span)) or _small_chunks(span):  # most of the span, or chunks too small to go one by one
        return span.combine_chunks().take(pa.array(rows))
    lengths = np.array([len(c) for c in span.chunks])
    ends = np.cumsum(lengths)
    firsts = ends - lengths  # each chunk's first row in the span
    which = np.searchsorted(ends, rows, side="right")
    grouped = bool((which[1:] >= which[:-1]).all())  # the rows' chunks in order: the parts are in the rows' order
    by_chunk = np.arange(len(rows)) if grouped else np.argsort(which, kind="stable")
    cut = np.flatnonzero(np.diff(which[by_chunk])) + 1
    parts = []
    for sel in np.split(by_chunk, cut):
        c = int(which[sel[0]])
        parts.append(span.chunk(c).take(pa.array(rows[sel] - firsts[c])))
    if grouped:
        return pa.concat_arrays(parts)
    back = np.empty(len(rows), np.int64)
    back[by_chunk] = np.arange(len(rows))
    return pa.concat_arrays(parts).take(pa.array(back))


def kernels():
    """``amqplens.lifecycle.kernels`` (numba, the decoder's disk cache), or None without numba: nothing is folded or
    taken from arrays, the machines do every frame."""
    from amqplens.decode.v0_9_1.hotpath import compiled_module

    return compiled_module("amqplens.lifecycle.kernels")


def column_values(table: pa.Table, name: str, fill, dtype=np.int64) -> np.ndarray:
    """A column as numpy, nulls (and an absent or all-null column) as ``fill``."""
    if name not in table.column_names or pa.types.is_null(table.column(name).type):
        return np.full(table.num_rows, fill, dtype)
    return pc.fill_null(table.column(name), fill).to_numpy().astype(dtype)


def column_valid(table: pa.Table, name: str) -> np.ndarray:
    """Which rows of a column are not null (none of an absent one)."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, bool)
    return pc.is_valid(table.column(name)).to_numpy(zero_copy_only=False)


def column_in(table: pa.Table, name: str, values) -> np.ndarray:
    """Which rows of a column hold one of ``values`` (a null never does). A dictionary-encoded column (as the direct
    tasks read the repeated text) is tested on its dictionary and the answer taken by each row's index: Arrow's
    ``is_in`` decodes every row's value first (77 against 13 ms on 3.4M rows of 201 chunks)."""
    if name not in table.column_names or pa.types.is_null(table.column(name).type):
        return np.zeros(table.num_rows, bool)
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        chosen = set(values)
        parts = [_dictionary_in(chunk, chosen) for chunk in chunks]
        return np.concatenate(parts) if parts else np.zeros(0, bool)
    return pc.fill_null(pc.is_in(column, pa.array(values, column.type)), False).to_numpy(zero_copy_only=False)


def _dictionary_in(chunk: pa.DictionaryArray, wanted: set) -> np.ndarray:
    """Which rows of a dictionary array hold one of ``wanted``: the dictionary's few values tested in Python, each row's
    answer taken by its index straight from the indices' buffer (a null row's index is undefined: clipped, then the
    row masked by the validity bitmap). A chunk of a read is a row group of 16k rows: Arrow's is_in, fill_null and
    is_valid took 100 us a chunk of method names, this 20 (about 3,000 chunks in the direct task of the 2 GB
    capture's longest connection)."""
    n = len(chunk)
    if n == 0 or len(chunk.dictionary) == 0:
        return np.zeros(n, bool)
    answer = np.array([v in wanted for v in chunk.dictionary.to_pylist()], bool)
    indices = chunk.indices
    validity, values = indices.buffers()
    at = np.frombuffer(values, indices.type.to_pandas_dtype(), count=indices.offset + n)[indices.offset:]
    rows = answer.take(at, mode="clip")
    if chunk.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        rows &= bits[indices.offset:indices.offset + n].astype(bool)
    return rows


_LEAN_METHODS = ("publish", "deliver", "ack", "nack", "reject")


def lean(table: pa.Table) -> pa.Table:
    """``table`` with the arguments_json of the 0-9-1 family's hot methods (basic.publish, deliver, ack, nack, reject)
    null: each of their arguments is a column of its own, and no lifecycle path reads them there (the machines read a
    frame's arguments for basic.consume's no-wait, the request matcher's synchronous methods, and 1.0's and 0-10's
    performatives). Where a connection is held whole (the lifecycle job's direct tasks) that text was 177 of the
    1,926 MiB the 2 GB load capture's longest connection read."""
    names = table.column_names
    if "arguments_json" not in names or any(c not in names for c in ("class_name", "method_name", "dialect")):
        return table
    hot = (column_in(table, "class_name", ["basic"]) & column_in(table, "method_name", list(_LEAN_METHODS))
           & column_in(table, "dialect", sorted(FAMILY_0_9_1)))
    if not (hot & column_valid(table, "arguments_json")).any():  # none, or made lean already (as read)
        return table
    i = names.index("arguments_json")
    chunks, at = [], 0
    for chunk in table.column(i).chunks:  # a take a chunk at a time: new, compact buffers (if_else keeps the old text)
        m = len(chunk)
        chunks.append(chunk.take(pa.array(np.arange(m), mask=hot[at:at + m])))
        at += m
    return table.set_column(i, table.schema.field(i), pa.chunked_array(chunks, table.schema.field(i).type))


def plain(column):
    """A column (Array or ChunkedArray) read dictionary-encoded (``jobs.lifecycle.DICTIONARY_COLUMNS``) as its values;
    any other as it is."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def plain_table(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns as their values (what the machines and array passes read)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, pa.field(field.name, field.type.value_type, field.nullable),
                                     plain(table.column(i)))
    return table


def index_type(n: int):
    """The integer type of row numbers and places of ``n`` rows: int32 below 2**31 (half the memory), else int64."""
    return np.int32 if n < 2**31 - 1 else np.int64


def stream_order(conn: np.ndarray, direction: np.ndarray, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows in the table's order are (connection, time, offset, direction): each (connection, direction) in that
    order (``stream``, places), whether a place continues the previous one's group (``same_group``), and the rows
    whose offset does not rise over the previous row of their direction: where the runner would take another order."""
    ix = index_type(len(conn))
    stream = np.lexsort((np.arange(len(conn), dtype=ix), direction, conn)).astype(ix)
    same_group = (conn[stream][1:] == conn[stream][:-1]) & (direction[stream][1:] == direction[stream][:-1])
    falls = np.zeros(len(conn), bool)
    falls[stream[1:][same_group & (offset[stream][1:] <= offset[stream][:-1])]] = True
    return stream, same_group, falls


def frame_ids_at(table: "pa.Table | Kept", rows: np.ndarray) -> pa.Array:
    """The frame ids of ``rows`` of ``table``: its frame_id column's where it has one, else made from the rows'
    connection, direction and offset by the rule the ingest jobs write the column by (``arrow.frame_ids``). The
    lifecycle job's direct tasks do not read the column (153 MiB of text of the 2 GB load capture's longest
    connection, most of it on frames folded away) and make the ids of the rows they write only."""
    rows = np.asarray(rows, np.int64)

    def at(name: str) -> pa.Array:
        return table.take(name, rows) if isinstance(table, Kept) else plain(take_span(table.column(name), rows))

    if "frame_id" in table.column_names:
        return at("frame_id")
    return frame_ids(at("connection_id"), at("direction"), at("stream_offset"))


def with_frame_ids(table: pa.Table) -> pa.Table:
    """``table`` with its frame_id column, made (``frame_ids_at``) where it was not read: the rows the machines take."""
    if "frame_id" in table.column_names:
        return table
    return table.append_column("frame_id", pa.chunked_array([frame_ids_at(table, np.arange(table.num_rows))], pa.string()))


def fold(source: pa.Table | Handed, window: int, order: pa.Array | None = None, lazy: bool = False) -> "pa.Table | Kept":
    """``source``: frames-table columns of whole connections, sorted by (connection_id, ts, stream_offset,
    direction) or put in that order by ``order`` (indices); ``window``: the runner's reorder window. The rows in
    that order less the folded content frames and heartbeats, with ``FOLD_COLUMNS`` (null on every row but a folded
    message's method). With ``order`` only the columns folding reads are put in order first, and the rows kept are
    taken from ``source`` once: no sorted copy of every column of every row. A ``Handed`` source's columns are let
    go one at a time as the rows kept are copied (the caller holds no other reference). ``lazy``: where something was
    folded, the rows kept as a ``Kept`` (no copy of the columns nobody reads)."""
    if isinstance(source, Handed):
        source = source.take()
    k = kernels()
    if source.num_rows == 0 or k is None or any(c not in source.column_names for c in _NEEDED):
        return plain_table(source if order is None else source.take(order))
    read = [c for c in (*_NEEDED, "frame_id") if c in source.column_names]
    if order is None:  # in order already (the lifecycle job's direct tasks): no copy of the columns read
        table, order = source.select(read), pa.array(np.arange(source.num_rows))
    else:
        table = source.select(read).take(order)
    # the plan's dozens of per-row arrays are gone before the rows kept are copied (a frame's worth of them each)
    plan = _plan(table, window, k)
    if plan is None:  # nothing to fold
        return plain_table(source.take(order))
    if table.num_rows >= TRIM_ROWS:  # ... and their pages handed back (numpy's, from the C library's heap)
        trim_heap()
    ids = table.select(["frame_id"] if "frame_id" in table.column_names else ["connection_id", "direction", "stream_offset"])
    n = table.num_rows
    del table
    # from here on only ``source`` holds the frames: _with_fold_columns lets its columns go as it copies them
    handed = Handed(source)
    del source
    kept = _with_fold_columns(handed, order.to_numpy(zero_copy_only=False), ids, n, *plan)
    del plan, ids, order
    if n >= TRIM_ROWS:  # the folding's own per-row arrays too
        trim_heap()
    if not lazy:
        return kept.table()
    if n >= TRIM_ROWS:  # a connection of millions of frames: nearly all of these columns' bytes are on the rows dropped
        for name in _MADE_AT_ONCE:
            if name in kept.column_names:
                kept.column(name, join=False)
    return kept


def _plan(table: pa.Table, window: int, k) -> tuple | None:
    """What ``fold`` drops and folds (``table``: the columns it reads, in order), as ``_with_fold_columns``' arrays
    (drop, method rows, end rows, stream, pos, folded); None when nothing is dropped."""
    n = table.num_rows
    ts_col = table.column("ts")
    ts = (ts_col.cast(pa.int64()) if not pa.types.is_integer(ts_col.type) else ts_col)
    valid = (pc.is_valid(ts).to_numpy(zero_copy_only=False) & column_valid(table, "stream_offset")
             & column_in(table, "direction", ["to_server", "to_client"]))
    ts_v = pc.fill_null(ts, 0).to_numpy()
    # row numbers, places and connection numbers as int32 (a batch: < 2**31 rows): the plan's arrays are a frame's
    # worth each, two dozen of them at its peak (551 MiB of numpy for the 2 GB load capture's 3.4M-frame connection)
    ix = index_type(n)
    conn = pc.dictionary_encode(table.column("connection_id")).combine_chunks().indices.to_numpy().astype(ix)
    direction = column_in(table, "direction", ["to_client"]).astype(np.int8)
    offset = column_values(table, "stream_offset", 0)
    idx = np.arange(n, dtype=ix)

    # connections that may fold: 0-9-1 family, every row usable by the runner, offsets rising per direction in this
    # order (the runner's order of the rows left is checked below)
    stream, same_group, falls = stream_order(conn, direction, offset)
    bad = ~(valid & column_in(table, "dialect", sorted(FAMILY_0_9_1))) | falls
    conn_bad = np.zeros(int(conn.max()) + 1, bool)
    np.logical_or.at(conn_bad, conn, bad)
    ok = ~conn_bad[conn]

    # in stream order: messages whose header and bodies follow their method with nothing between
    is_method = column_in(table, "frame_type", ["method"])
    is_header = column_in(table, "frame_type", ["header"])
    is_body = column_in(table, "frame_type", ["body"])
    is_heartbeat = column_in(table, "frame_type", ["heartbeat"])
    basic = column_in(table, "class_name", ["basic"])
    seq_valid = column_valid(table, "message_seq")
    seq = column_values(table, "message_seq", 0)
    chan = column_values(table, "channel", 0, np.int32)
    has_sha = column_valid(table, "body_sha256")
    starts_message = (ok & is_method & basic & seq_valid & (chan != 0) & column_in(table, "method_name", list(_MESSAGE_METHODS)))

    pos = np.empty(n, ix)
    pos[stream] = idx  # a row's place in stream order
    group_start = np.zeros(n, ix)
    group_start[1:] = np.where(same_group, 0, idx[1:])
    group_start = np.maximum.accumulate(group_start)  # per stream place: where its group starts
    last_method = np.maximum.accumulate(np.where(is_method[stream], idx, -1))  # per stream place
    m_place = np.where(last_method >= group_start, last_method, -1)
    m_row = np.where(m_place >= 0, stream[np.maximum(m_place, 0)], 0)
    in_message = (m_place >= 0) & starts_message[m_row] & ~is_method[stream]
    rows = stream
    shape = np.where(idx == m_place + 1, is_header[rows], is_body[rows])
    good = in_message & shape & seq_valid[rows] & (seq[rows] == seq[m_row]) & (chan[rows] == chan[m_row])
    # a message's content is good up to a place when no place since its method is not good
    bad_so_far = np.cumsum(~good & (m_place >= 0) & ~is_method[stream], dtype=ix)
    bad_at_method = np.where(m_place >= 0, bad_so_far[np.maximum(m_place, 0)], 0)
    complete_here = good & has_sha[rows] & (bad_so_far == bad_at_method)
    # the first completing place of each message
    first = complete_here.copy()
    ends = np.flatnonzero(complete_here)
    if len(ends):
        dup = np.zeros(len(ends), bool)
        dup[1:] = m_place[ends[1:]] == m_place[ends[:-1]]
        first[ends[dup]] = False
    ends = np.flatnonzero(first)
    methods = m_place[ends]  # stream places of the methods whose messages fold, and of their last frames
    if len(ends):
        # the other direction: no frame other than a basic method or content between the two times, inclusive
        rare = is_method & ~basic
        other = conn[stream[ends]].astype(np.int64) * 2 + (1 - direction[stream[ends]])
        t_rank = _time_rank(conn, ts_v)
        span = int(t_rank.max()) + 2
        rare_keys = np.sort((conn[rare].astype(np.int64) * 2 + direction[rare]) * span + t_rank[rare])
        lo = np.searchsorted(rare_keys, other * span + t_rank[stream[methods]], "left")
        hi = np.searchsorted(rare_keys, other * span + t_rank[stream[ends]], "right")
        keep = hi == lo
        methods, ends = methods[keep], ends[keep]
        del rare, other, t_rank, rare_keys, lo, hi, keep
    folded_places = np.zeros(n + 1, ix)  # difference array over stream places: +1 after a method, -1 after its end
    np.add.at(folded_places, methods + 1, 1)
    np.add.at(folded_places, ends + 1, -1)
    folded = np.zeros(n, bool)
    folded[stream] = np.cumsum(folded_places[:n]) > 0
    conn_starts = np.flatnonzero(np.r_[True, conn[1:] != conn[:-1]])
    drop = folded.copy()
    drop |= is_heartbeat & ok
    drop[conn_starts] = False
    if not drop.any():
        return None
    # what the order's check needs, not a dozen more arrays of the rows (a connection of 3.4M frames: 27 MiB each)
    del (ts_col, ts, valid, conn, offset, idx, same_group, falls, bad, conn_bad, ok, is_method, is_header, is_body,
         is_heartbeat, basic, seq_valid, seq, chan, has_sha, starts_message, group_start, last_method, m_place, m_row,
         in_message, rows, shape, good, bad_so_far, bad_at_method, complete_here, first, folded_places)
    # the runner's order of the rows kept must not change (it can, where more rows share a time than its window)
    method = plain(table.column("method_name"))
    rank = (column_in(table, "method_name", sorted(REFERS_BACK)) | (
        pc.fill_null(pc.ends_with(method, "-ok"), False).to_numpy(zero_copy_only=False)
        if not pa.types.is_null(method.type) else np.zeros(n, bool))).astype(np.int64)
    same = np.ones(len(conn_starts), np.bool_)
    k.same_order(np.append(conn_starts, n).astype(np.int64), direction.astype(np.int64), np.asarray(ts_v, np.int64), rank, drop,
                 window, same)
    changed = ~np.repeat(same, np.diff(np.append(conn_starts, n)))
    if changed.any():
        folded &= ~changed
        drop &= ~changed
        keep = ~changed[stream[methods]]
        methods, ends = methods[keep], ends[keep]
        if not drop.any():
            return None
    return drop, stream[methods], stream[ends], stream, pos, folded


def _time_rank(conn: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per row a number that orders the times of one connection as they are ordered, equal for equal times (rows of
    other connections compare through their connection first). The rows come sorted by connection and time, so a
    running count of the changes does; where they do not (a time before an earlier one: nulls read as 0 ahead of
    times before 1970), the ranks of every distinct time, whose sort held about 100 MiB more at 3.4M rows."""
    n = len(ts)
    if n > 1:
        new = conn[1:] != conn[:-1]
        if bool(np.all((ts[1:] >= ts[:-1]) | new)):
            rank = np.zeros(n, np.int64)
            np.cumsum(new | (ts[1:] != ts[:-1]), out=rank[1:])
            return rank
    return np.unique(ts, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _with_fold_columns(handed: Handed, order: np.ndarray, ids: pa.Table, n: int, drop: np.ndarray,
                       method_rows: np.ndarray, end_rows: np.ndarray, stream: np.ndarray, pos: np.ndarray,
                       folded: np.ndarray) -> Kept:
    """``ids``: what gives the frame ids (``frame_ids_at``) of the ``n`` rows in order (``source`` rows ``order``);
    rows are places in that order. The rows kept as a ``Kept`` of the source (``handed``'s, which nothing else holds)."""
    source = handed.table
    kept = np.flatnonzero(~drop)
    ix = index_type(n)  # row numbers and places: int32 (a batch of < 2**31 rows), half the memory
    kept = kept.astype(ix)
    out_place = np.full(n, -1, ix)
    out_place[kept] = np.arange(len(kept), dtype=ix)
    # each folded frame belongs to the latest method before it in stream order: its message's
    is_folded_method = np.zeros(n, bool)
    is_folded_method[pos[method_rows]] = True
    owner_place = np.maximum.accumulate(np.where(is_folded_method, np.arange(n, dtype=ix), -1))
    frames = np.flatnonzero(folded)
    owner = stream[owner_place[pos[frames]]]
    by_owner = np.lexsort((pos[frames], out_place[owner]))
    frames, owner = frames[by_owner], owner[by_owner]
    counts = np.zeros(len(kept), np.int64)
    np.add.at(counts, out_place[owner], 1)
    offsets = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    has = np.zeros(len(kept), bool)
    has[out_place[method_rows]] = True
    mask = pa.array(~has)
    fids = frame_ids_at(ids, frames)
    del ids
    fold_ids = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), fids, mask=mask)  # a batch: < 2**31 rows
    header_of = np.zeros(len(kept), np.int64)
    header_of[out_place[method_rows]] = stream[pos[method_rows] + 1]
    end_of = np.zeros(len(kept), np.int64)
    end_of[out_place[method_rows]] = end_rows

    def taken(table: pa.Table, name: str, rows: np.ndarray, type_: pa.DataType) -> pa.Array:
        """``name`` of ``rows`` on the folded methods' rows, null on the others (a null index takes a null)."""
        if name not in table.column_names:
            return pa.nulls(len(kept), type_)
        values = take_span(table.column(name), order[rows[has]])
        return values.take(pa.array(np.cumsum(has) - 1, mask=~has))

    added = {"fold_frame_ids": fold_ids,
             "fold_properties_json": taken(source, "properties_json", header_of, pa.string()),
             "fold_body_size": taken(source, "body_size", header_of, pa.int64()),
             "fold_body_sha256": taken(source, "body_sha256", end_of, pa.string())}
    del source
    return Kept(handed.take(), order[kept], added)
