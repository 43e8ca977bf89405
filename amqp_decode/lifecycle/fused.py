"""The lifecycle inside the decode task: each connection's machines run once its frames are all decoded.

The decode task (``pipeline.decode_flows``) holds every packet of a TCP flow,
so every frame of a connection; running the machines there saves the lifecycle
job its re-read of the frames table, its shuffle by connection and Spark's
row-to-Arrow conversion of the wide frame rows. ``ConnectionLifecycle`` takes
the task's frame batches (frames-table rows, several connections and captures
interleaved as the decoder gives them), keeps each connection's frames until
the decoder says they are all out (a ``connection`` row's ``frames_through``,
see ``pipeline._FlowDecoder.drain``), then sorts them as the lifecycle job does
(``SORT_KEYS``) and feeds them to the machines, one connection at a time. So it
holds the frames of the connections not yet whole: one per capture and task
while the decoder streams through a flow, i.e. bounded by the largest
connection, not by the task; and only the columns the machines read, the
columns a batch leaves all null not at all.

The rows are those of ``lifecycle_batches`` on the same frames, in another
order (``tests/e2e/test_fused_lifecycle.py`` compares both on every fixture).
A capture on which the machines raise, or whose frames break the contract
above (a frame of a connection already run), is dropped here and named in
``failed``: its rows must not be committed, so the lifecycle job derives it
again from the frames table and fails it alone there, as without this module.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqp_decode.lifecycle.batches import FRAME_COLUMNS, LifecycleBatcher
from amqp_decode.lifecycle.runner import LifecycleOptions
from amqp_decode.pipeline import use_system_memory_pool

log = logging.getLogger(__name__)

# the lifecycle job's sortWithinPartitions after its shuffle by connection_id (jobs/lifecycle.py); the last key only
# orders the two directions' frames of equal time and offset, so the order (and the rows) never depend on the input's
READ_COLUMNS = (*FRAME_COLUMNS, "ts")  # what the machines read, as the frames table holds it (ts, not ts_us)
SORT_KEYS = ("ts", "stream_offset", "direction")


class ConnectionLifecycle:
    """Frames-table batches of whole connections in, ``lifecycle_batches`` output batches out (see the module doc)."""

    def __init__(self, delivery_struct: pa.StructType, flow_event_struct: pa.StructType,
                 request_response_struct: pa.StructType, options: LifecycleOptions = LifecycleOptions(),
                 batch_rows: int = 8192) -> None:
        use_system_memory_pool()
        self.out = LifecycleBatcher(delivery_struct, flow_event_struct, request_response_struct, options, batch_rows)
        self.batch_rows = batch_rows
        self.held: dict[str, list[tuple[int, dict[str, pa.Array]]]] = {}  # connection -> [(rows, non-null columns)]
        self.types: dict[str, pa.DataType] = {}  # the READ_COLUMNS the frame batches have, with their types
        self.capture_of: dict[str, str] = {}
        self.seen: collections.Counter = collections.Counter()  # capture -> frame rows received
        self.waiting: dict[str, collections.deque] = collections.defaultdict(collections.deque)  # capture -> (through, ids)
        self.done: set[str] = set()  # connections run
        self.failed: dict[str, str] = {}  # capture -> why its rows must not be committed

    def frames(self, capture_id: str, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """One frame batch of ``capture_id`` (the frames table's columns, in the decoder's order)."""
        self.seen[capture_id] += batch.num_rows
        if capture_id not in self.failed and batch.num_rows:
            self._hold(capture_id, batch)
        yield from self._run_whole(capture_id)

    def closed(self, capture_id: str, connection_ids: list[str], meta: list[str | None]) -> Iterator[pa.RecordBatch]:
        """A ``connection`` batch of ``capture_id``: its connections are whole once ``frames_through`` frames are out."""
        through = max((json.loads(m)["frames_through"] for m in meta if m), default=0)
        self.waiting[capture_id].append((through, list(connection_ids)))
        yield from self._run_whole(capture_id)

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The end of the task's input: every connection still held is whole."""
        for cid in list(self.held):
            yield from self._run(cid)
        yield from self.out.finish()

    # ------------------------------------------------------------------------------------------------
    def _hold(self, capture_id: str, batch: pa.RecordBatch) -> None:
        if not self.types:
            self.types = {f.name: f.type for f in batch.schema if f.name in READ_COLUMNS}
        cols = list(self.types)
        conn = batch.column("connection_id")
        # a connection's frames come in runs (the decoder streams one flow at a time): cut the batch where the id changes
        n = batch.num_rows
        changed = pc.fill_null(pc.not_equal(conn.slice(1), conn.slice(0, n - 1)), True) if n > 1 else pa.array([], pa.bool_())
        starts = [0, *(np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1).tolist()]
        for start, end in zip(starts, starts[1:] + [n]):
            cid = conn[start].as_py()
            if cid in self.done:
                self._fail(capture_id, f"frames of connection {cid} after it was run")
                return
            self.capture_of.setdefault(cid, capture_id)
            part = {c: batch.column(c).slice(start, end - start) for c in cols}
            self.held.setdefault(cid, []).append((end - start, {c: a for c, a in part.items() if a.null_count < len(a)}))

    def _run_whole(self, capture_id: str) -> Iterator[pa.RecordBatch]:
        queue = self.waiting.get(capture_id)
        while queue and queue[0][0] <= self.seen[capture_id]:
            for cid in queue.popleft()[1]:
                yield from self._run(cid)

    def _run(self, cid: str) -> Iterator[pa.RecordBatch]:
        """Sort the connection's frames as the lifecycle job does and feed them to the machines, ``batch_rows`` at a time."""
        self.done.add(cid)
        parts = self.held.pop(cid, None)
        capture_id = self.capture_of.pop(cid, None)
        if not parts or capture_id in self.failed:
            return
        try:
            frames = _table(parts, self.types)
            # Spark's ascending order: nulls first; pyarrow's sort is stable, and the keys leave no ties anyway
            order = pc.sort_indices(frames, options=_SORT)
            for start in range(0, len(order), self.batch_rows):
                taken = frames.take(order.slice(start, self.batch_rows))
                # the columns every part left all null come back as nulls here, a chunk at a time (the machines read
                # every column the frames table has, as in the lifecycle job)
                n = taken.num_rows
                chunk = pa.table([taken.column(c) if c in taken.column_names else pa.nulls(n, t)
                                  for c, t in self.types.items()], names=list(self.types))
                for batch in chunk.to_batches():
                    yield from self.out.feed(batch)
            yield from self.out.end_connection()
        except Exception as exc:  # noqa: BLE001 - the lifecycle job redoes the capture and fails it alone there
            self._fail(capture_id, f"{type(exc).__name__}: {exc}")
            self.out.reset()

    def _fail(self, capture_id: str, why: str) -> None:
        log.warning("fused lifecycle of capture %s left to the lifecycle job: %s", capture_id[:12], why)
        self.failed.setdefault(capture_id, why)
        for cid in [c for c, cap in self.capture_of.items() if cap == capture_id]:
            self.held.pop(cid, None)
            self.capture_of.pop(cid, None)


def _sort_options() -> pc.SortOptions:
    """``SORT_KEYS`` ascending, nulls first: per key where pyarrow takes that (25 deprecates the global setting)."""
    try:
        return pc.SortOptions([(k, "ascending", "at_start") for k in SORT_KEYS])
    except (TypeError, ValueError):
        return pc.SortOptions([(k, "ascending") for k in SORT_KEYS], null_placement="at_start")


_SORT = _sort_options()


def _table(parts: list[tuple[int, dict[str, pa.Array]]], types: dict[str, pa.DataType]) -> pa.Table:
    """The held parts as one table of the columns some part holds (and the sort keys); a column a part left out (all
    null there) is nulls of that part's length."""
    present = {name for _, cols in parts for name in cols} | set(SORT_KEYS)
    names = [c for c in types if c in present]
    columns = [pa.chunked_array([cols[c] if c in cols else pa.nulls(n, types[c]) for n, cols in parts], types[c])
               for c in names]
    return pa.table(columns, names=names)
