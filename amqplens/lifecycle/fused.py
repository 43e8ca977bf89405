"""The lifecycle inside the decode task: each connection's machines run once its frames are all decoded.

The decode task (``pipeline.decode_flows``) holds every packet of a TCP flow,
so every frame of a connection; running the machines there saves the lifecycle
job its re-read of the frames table, its shuffle by connection and Spark's
row-to-Arrow conversion of the wide frame rows. ``ConnectionLifecycle`` takes
the task's frame batches (frames-table rows, several connections and captures
interleaved as the decoder gives them) and keeps each connection's frames until
the decoder says they are all out (a ``connection`` row's ``frames_through``,
see ``pipeline._FlowDecoder.drain``). Whole connections gather until they hold
``batch_rows`` frames (one large connection alone is enough), then go to the
machines together, sorted as the lifecycle job sorts its partitions
(``connection_id`` then ``SORT_KEYS``): a capture of 10,000 short connections
pays one sort and one row conversion per batch, not per connection. So the task
holds the frames of the connections not yet whole (one per capture while the
decoder streams through a flow) and fewer than ``batch_rows`` frames of whole
ones: bounded by the largest connection, not by the task; and only the columns
the machines read, those a batch leaves all null not at all.

A 0-9-1 connection that holds ``chunk_frames`` frames is not held to its end:
its frames go to a ``chunks.ChunkCutter`` as they come, and each sorted chunk it
cuts is folded and passed from arrays by an ``array091.ConnectionPass`` of its
own, which carries the pass's state to the next chunk. So a long connection costs
the task a chunk, not the connection (the 300 MB load capture's largest ingest
worker 812 -> 548-553 MiB). One the pass does not model from its first chunk is held
whole after all; one that cannot go on after a chunk was passed (its times go
back, no place to cut, a method the pass does not model) leaves its capture to
the job. The projection above counts a connection's frames whether held or
passed in chunks, so it still leaves a capture whose connections grow with it
to the job (the 2 GB load capture, at 1% of its packets): the job spreads their
lifecycle over its tasks, where the fused path does it in the decode task that
has them (at 2 GB, done fused in chunks: 47.3 s and 691 MiB against 45.1 s and
660 MiB through the job).

The rows are those of ``lifecycle_batches`` on the same frames, in another
order (``tests/lifecycle/test_fused.py``, ``tests/e2e/test_fused_lifecycle.py``).
A capture on which the machines raise, or whose frames break the contract above
(a frame of a connection already whole), is named in ``failed`` and dropped
from then on: its rows must not be committed, and the lifecycle job derives it
again from the frames table (failing it alone there, as without this module).
When the machines raise, every capture of the connections fed with the culprit
is failed so: which rows of that batch came out whole is not worth knowing for
a bug that should never happen, and the job gives the same rows for the others.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.lifecycle.batches import FRAME_COLUMNS, LifecycleBatcher
from amqplens.lifecycle import array091, array10
from amqplens.lifecycle.chunks import SORT_KEYS, ChunkCutter, Unchunked, folded_chunk, sort_options
from amqplens.lifecycle.fold import FOLD_COLUMNS, Handed, Kept, fold, lean, with_frame_ids
from amqplens.lifecycle.runner import LifecycleOptions
from amqplens.decode.common.arrow import release_memory, use_task_memory_pool
from amqplens.decode.common.reports import ConnectionsClosed

log = logging.getLogger(__name__)

COMPACT_PARTS = 16  # a held connection's slices of decoder batches copied into one batch of its own at this many
READ_COLUMNS = (*FRAME_COLUMNS, "ts")  # what the machines read, as the frames table holds it (ts, not ts_us)



# the held frames are projected to a capture's end (``TaskProgress``) once they are this fraction of the limit: fewer
# are too few to tell long connections (held to the end) from short ones
PROJECT_FROM = 16


class TaskProgress:
    """Per capture, the packets a task was given (the driver's plan) and those read so far: what share of its input
    the task has seen. On a capture of long-lived connections, the frames held grow with it: at 2 GB the ingest's
    task held its limit of 1M frames (~450 MiB) before it gave the capture to the lifecycle job. Python per batch."""

    def __init__(self) -> None:
        self.planned: dict[str, int] = {}
        self.read: dict[str, int] = {}

    def plan(self, capture_id: str, packets: int) -> None:
        self.planned[capture_id] = self.planned.get(capture_id, 0) + max(0, int(packets))

    def add(self, capture_id: str, packets: int) -> None:
        self.read[capture_id] = self.read.get(capture_id, 0) + packets

    def fraction(self, capture_id: str) -> float:
        """The share of the capture's planned packets read (0 where nothing was planned)."""
        planned = self.planned.get(capture_id, 0)
        return min(1.0, self.read.get(capture_id, 0) / planned) if planned > 0 else 0.0


class ConnectionLifecycle:
    """Frames-table batches of whole connections in, ``lifecycle_batches`` output batches out (see the module doc)."""

    def __init__(self, delivery_struct: pa.StructType, flow_event_struct: pa.StructType,
                 request_response_struct: pa.StructType, options: LifecycleOptions = LifecycleOptions(),
                 batch_rows: int = 8192, max_held_rows: int | None = None, fold_content: bool = True,
                 arrays: bool = True, max_connection_rows: int | None = None, strict: bool = False,
                 progress: "TaskProgress | None" = None, chunk_frames: int = 0) -> None:
        use_task_memory_pool()
        # the lifecycle job (``sorted_frames``): a connection of more frames goes to the machines as it comes, not held
        self.max_connection_rows = max_connection_rows
        self.current: str | None = None  # the connection sorted_frames took last
        self.streaming: str | None = None  # ... when it is not held but fed to the machines as it comes
        # raise what the machines raise (the lifecycle job) instead of naming the captures in ``failed`` (the ingest)
        self.strict = strict
        # 0-9-1 content frames and heartbeats folded onto their messages' method rows before the machines (fold.py);
        # False feeds every frame, as the lifecycle job does
        self.fold_content = fold_content
        # and the 0-9-1 connections array091.py models done from arrays (needs fold_content)
        self.arrays = arrays
        self.out = LifecycleBatcher(delivery_struct, flow_event_struct, request_response_struct, options, batch_rows)
        self.batch_rows = batch_rows
        # frames held of connections not yet whole, at most: a long-lived connection's frames would otherwise stay in
        # the task for the whole capture (1.3 GB at 1 GB of 8 long connections); beyond, the capture goes to the job
        self.max_held_rows = max_held_rows
        self.held_rows = 0
        # what the task has read of what it was given (the ingest's direct tasks): a capture whose held frames are on
        # course to pass max_held_rows by its end is left to the job early, before the task holds them (``_hold``)
        self.progress = progress
        self.types: dict[str, pa.DataType] = {}  # the READ_COLUMNS the frame batches have, with their types
        self.held: dict[str, list[pa.RecordBatch]] = {}  # connection -> its frames so far (the batches' non-null columns)
        self.loose: dict[str, int] = {}  # connection -> its last parts that are still slices of the decoder's batches
        self.capture_of: dict[str, str] = {}  # connection -> capture, while held or ready
        self.seen: collections.Counter = collections.Counter()  # capture -> frame rows received
        self.waiting: dict[str, collections.deque] = collections.defaultdict(collections.deque)  # capture -> (through, ids)
        # a 0-9-1 connection holding more frames than this is done a chunk at a time as its frames come (``chunks``;
        # the folding and the array pass only), so that the task holds a chunk of it, not the connection; 0: never
        self.chunk_frames = chunk_frames if fold_content and arrays and not strict else 0
        self.rows_of: collections.Counter = collections.Counter()  # connection -> its frames in ``held``
        # connection -> its frames so far while not whole (held, or in chunks cut or not), and their sum: what the
        # projection counts (``_hold``)
        self.open_of: collections.Counter = collections.Counter()
        self.open_rows = 0
        self.cutting: dict[str, _Cutting] = {}  # connections done a chunk at a time
        self.whole_only: set[str] = set()  # connections that cannot be (held whole)
        self.finals: list[str] = []  # connections done a chunk at a time that are whole, their last chunk not done
        self.chunked = 0  # connections done a chunk at a time to their end (the tests' and the logs' count)
        self.ready: dict[str, list[pa.RecordBatch]] = {}  # whole connections not fed yet
        self.ready_rows = 0
        self.done: set[str] = set()  # connections whole
        self.failed: dict[str, str] = {}  # capture -> why its rows must not be committed

    def frames(self, capture_id: str, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """One frame batch of ``capture_id`` (the frames table's columns, in the decoder's order)."""
        self.seen[capture_id] += batch.num_rows
        if capture_id not in self.failed and batch.num_rows:
            yield from self._hold(capture_id, batch)
        yield from self._whole(capture_id)

    def closed(self, capture_id: str, connection_ids: list[str], meta: list[str | None]) -> Iterator[pa.RecordBatch]:
        """A ``connection`` batch of ``capture_id``: its connections are whole once ``frames_through`` frames are out
        (``meta``: the batch's ``ConnectionsClosed`` reports)."""
        through = max((ConnectionsClosed.from_meta(m).frames_through for m in meta if m), default=0)
        self.waiting[capture_id].append((through, list(connection_ids)))
        yield from self._whole(capture_id)

    def sorted_frames(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """One batch of the lifecycle job's partitions (frames sorted by connection_id, then ``SORT_KEYS``; several
        captures): a connection is whole when the next one begins, the last at ``finish``. A connection of more than
        ``max_connection_rows`` frames is not held whole: its frames, in this order already, go to the machines as
        they come (the lifecycle job's path), so a task holds at most that many frames."""
        if not batch.num_rows:
            return
        for cid, part in self._runs(batch):
            if cid != self.current:
                yield from self._end_current()
                self.current = cid
                self.capture_of[cid] = part.column("capture_id")[0].as_py()
            if cid == self.streaming:
                yield from self.out.feed(part, self._columns())
                continue
            self._keep(cid, part)
            if self.max_connection_rows is not None and self.held_rows > self.max_connection_rows:
                yield from self._feed()  # the connections whole before it, so that the machines see each one whole
                log.info("lifecycle: connection %s has more than %d frames; the machines take it as it comes",
                         cid, self.max_connection_rows)
                self.streaming = cid
                yield from self.out.feed(self._held_batch(cid), self._columns())
        if self.ready_rows >= self.batch_rows:
            yield from self._feed()

    def _end_current(self) -> Iterator[pa.RecordBatch]:
        """The connection ``sorted_frames`` took last is whole."""
        cid, self.current = self.current, None
        if cid is None:
            return
        if cid == self.streaming:
            self.streaming = None
            self.done.add(cid)
            self.capture_of.pop(cid, None)
            yield from self.out.end_connection()
        else:
            self._ready(cid)

    def sorted_table(self, frames: pa.Table | Handed, fields: list[pa.Field]) -> Iterator[pa.RecordBatch]:
        """Whole connections at once, sorted by connection_id then ``SORT_KEYS`` (the lifecycle job's direct tasks):
        done in groups of about ``batch_rows`` frames, each a slice of ``frames`` (no copy, nothing held twice);
        ``fields``: the frame columns ``frames`` lacks because no row fills them. Then ``finish``. Handed
        frames are let go a group at a time (a group's columns as the folding copies them: see ``fold``)."""
        if isinstance(frames, Handed):
            frames = frames.take()
        frames = lean(frames)  # held whole: the text no path reads let go
        self.types = {f.name: f.type for f in frames.schema if f.name in READ_COLUMNS}
        self.types.update((f.name, f.type) for f in fields if f.name not in self.types)
        self.types.setdefault("frame_id", pa.string())  # not read: made for the rows written (fold.frame_ids_at)
        n = frames.num_rows
        groups = []
        start = 0
        for end in (_run_starts(frames.column("connection_id"))[1:] + [n]) if n else []:
            if end - start >= self.batch_rows or end == n:
                groups.append(frames.slice(start, end - start))
                start = end
        del frames  # the slices hold it (a slice of a table of many chunks only its own chunks)
        for k in range(len(groups)):
            group, groups[k] = Handed(groups[k]), None
            captures = pc.unique(group.table.column("capture_id")).to_pylist()
            yield from self._group(group, captures, self._columns())
        yield from self.out.finish()

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The end of the task's input: every connection still held is whole."""
        yield from self._end_current()
        for cid in list(self.held) + list(self.cutting):
            self._ready(cid)
        yield from self._finals()
        yield from self._feed()
        yield from self.out.finish()

    # ------------------------------------------------------------------------------------------------
    def _runs(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The batch cut where connection_id changes (the decoder streams one flow at a time, the job's partitions are
        sorted by it): (connection id, its run of the batch's non-null ``READ_COLUMNS``)."""
        if not self.types:
            self.types = {f.name: f.type for f in batch.schema if f.name in READ_COLUMNS}
        n = batch.num_rows
        live = batch.select([c for c in self.types if batch.column(c).null_count < n])  # all null here: in every slice
        conn = batch.column("connection_id")
        starts = _run_starts(conn)
        for start, end in zip(starts, starts[1:] + [n]):
            if self.strict and conn[start].as_py() in self.done:
                raise ValueError(f"frames of connection {conn[start].as_py()} after it was whole")
            yield conn[start].as_py(), live.slice(start, end - start)

    def _keep(self, cid: str, part: pa.RecordBatch) -> None:
        parts = self.held.setdefault(cid, [])
        parts.append(part)
        self.held_rows += part.num_rows
        self.rows_of[cid] += part.num_rows
        loose = self.loose[cid] = self.loose.get(cid, 0) + 1
        if loose >= COMPACT_PARTS:
            # a slice keeps its whole decoder batch alive (every connection's frames in it): a connection held
            # over many batches (a long one spans the capture) would keep all of them; its rows are copied out
            parts[-loose:] = _table(parts[-loose:], self.types).combine_chunks().to_batches()
            self.loose[cid] = 0

    def _held_batch(self, cid: str) -> pa.RecordBatch:
        """The frames held of ``cid``, released, as one batch."""
        self.loose.pop(cid, None)
        self.rows_of.pop(cid, None)
        parts = self.held.pop(cid)
        self.held_rows -= sum(p.num_rows for p in parts)
        return _table(parts, self.types).combine_chunks().to_batches()[0]

    def _columns(self) -> list[str]:
        return [c for c in FRAME_COLUMNS if c in self.types or (c == "ts_us" and "ts" in self.types)]

    def _hold(self, capture_id: str, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        for cid, part in self._runs(batch):
            if capture_id in self.failed:  # by a chunk of a connection before this one
                return
            if cid in self.done:
                self._fail([capture_id], f"frames of connection {cid} after it was whole")
                return
            self.capture_of.setdefault(cid, capture_id)
            self.open_of[cid] += part.num_rows
            self.open_rows += part.num_rows
            if cid in self.cutting:
                yield from self._cut(cid, self._full(pa.Table.from_batches([part])))
                continue
            self._keep(cid, part)
            if self.chunk_frames and self.rows_of[cid] >= self.chunk_frames and cid not in self.whole_only:
                yield from self._start_cutting(cid)
        if self.max_held_rows is None or capture_id in self.failed:
            return
        # the limit bounds the frames held (those in chunks not yet cut among them); the projection counts every frame
        # of the connections not yet whole, those passed in chunks too, so that it decides as it did before chunks: a
        # capture whose long connections grow with it goes to the job, which spreads their lifecycle over its tasks
        # (at 2 GB, done fused in chunks instead: 47.3 s and 691 MiB against 45.1 s and 660 MiB through the job)
        cut_rows = sum(c.cutter.held_rows for c in self.cutting.values())
        if self.held_rows + cut_rows > self.max_held_rows:
            self._fail([capture_id], f"more than {self.max_held_rows} frames held of connections not yet whole "
                                     "(lifecycle.fused_max_held_frames)")
        elif self.progress is not None and self.open_rows >= self.max_held_rows // PROJECT_FROM:
            read = self.progress.fraction(capture_id)
            if 0 < read < 1 and self.open_rows > self.max_held_rows * read:
                self._fail([capture_id], f"{self.open_rows} frames of connections not yet whole at {read:.1%} of "
                                         f"the capture's packets: on course for more than {self.max_held_rows} "
                                         "(lifecycle.fused_max_held_frames)")

    def _whole(self, capture_id: str) -> Iterator[pa.RecordBatch]:
        queue = self.waiting.get(capture_id)
        while queue and queue[0][0] <= self.seen[capture_id]:
            for cid in queue.popleft()[1]:
                self._ready(cid)
        yield from self._finals()
        if self.ready_rows >= self.batch_rows:
            yield from self._feed()

    def _ready(self, cid: str) -> None:
        self.done.add(cid)
        self.open_rows -= self.open_of.pop(cid, 0)
        if cid in self.cutting:
            self.finals.append(cid)  # its last chunk (``_finals``)
            return
        self.rows_of.pop(cid, None)
        self.loose.pop(cid, None)
        parts = self.held.pop(cid, None)
        self.held_rows -= sum(p.num_rows for p in parts or ())
        if parts and self.capture_of.get(cid) not in self.failed:
            self.ready[cid] = parts
            self.ready_rows += sum(p.num_rows for p in parts)
        elif cid in self.capture_of:
            del self.capture_of[cid]

    # ------------------------------------------------------------------------------------------------
    # a long connection a chunk at a time (``chunk_frames``)
    def _full(self, table: pa.Table) -> pa.Table:
        """``table`` with every column the task's frames have (nulls where it left one out): one schema for a
        connection's rows however its batches came."""
        for name, type_ in self.types.items():
            if name not in table.column_names:
                table = table.append_column(pa.field(name, type_), pa.nulls(table.num_rows, type_))
        return table.select(list(self.types))

    def _start_cutting(self, cid: str) -> Iterator[pa.RecordBatch]:
        """``cid`` holds ``chunk_frames`` frames: from now on its frames go to a ``chunks.ChunkCutter`` as they
        come and each chunk it cuts to an ``array091.ConnectionPass`` of its own."""
        self.loose.pop(cid, None)
        self.held_rows -= self.rows_of.pop(cid, 0)
        parts = self.held.pop(cid)
        options = self.out.options
        self.cutting[cid] = _Cutting(ChunkCutter(self.chunk_frames),
                                     array091.ConnectionPass(options.reorder_window, options.max_pending_returns))
        yield from self._cut(cid, self._full(_table(parts, self.types)))

    def _cut(self, cid: str, table: pa.Table | None, final: bool = False) -> Iterator[pa.RecordBatch]:
        """``cid``'s next frames to its cutter (``final``: none; its last chunk), the chunk they complete through its
        pass. Where the connection cannot be done so before any chunk of it was passed, its frames are given back
        (held, to be done whole); after, its capture is left to the lifecycle job (``_fail``): the rows passed are
        not worth taking back, and the job gives every row again."""
        cutting = self.cutting[cid]
        chunk = None
        try:
            chunk = cutting.cutter.last() if final else cutting.cutter.add(table)
            if chunk is None:
                return
            done = cutting.pass_.feed(folded_chunk(chunk, self.out.options.reorder_window), final)
            if done is None:
                raise Unchunked("not modelled")
        except Unchunked as why:
            if cutting.passed:
                self._fail([self.capture_of[cid]], f"connection {cid} done a chunk at a time, then not ({why})")
            else:
                self._give_back(cid, ([] if chunk is None else [chunk]) + cutting.cutter.give_back(), final)
            return
        except Exception as exc:  # noqa: BLE001 - the lifecycle job redoes the capture, and fails the culprit alone
            self._fail([self.capture_of[cid]], f"{type(exc).__name__}: {exc}")
            return
        del chunk
        cutting.passed += 1
        yield from self.out.arrays(done)
        del done
        # what the chunk's sort, folding and pass freed handed back (jemalloc's purge, the C heap's trim): kept, it
        # was the worker's high-water mark of every chunk's copies on top of the decoder's (763 -> 690 MiB at 2 GB)
        release_memory()

    def _give_back(self, cid: str, tables: list[pa.Table], final: bool) -> None:
        """``cid`` done whole after all: its frames held again (``final``: it is whole, so ready)."""
        log.info("fused lifecycle: connection %s done whole", cid)
        del self.cutting[cid]
        self.whole_only.add(cid)
        parts = [b for t in tables for b in t.to_batches()]
        rows = sum(p.num_rows for p in parts)
        if final:
            self.ready[cid] = parts
            self.ready_rows += rows
        else:
            self.held[cid] = parts
            self.held_rows += rows
            self.rows_of[cid] = rows

    def _finals(self) -> Iterator[pa.RecordBatch]:
        """The last chunk of each connection done a chunk at a time that is whole."""
        finals, self.finals = self.finals, []
        for cid in finals:
            if cid not in self.cutting:  # its capture failed
                continue
            yield from self._cut(cid, None, final=True)
            if cid in self.cutting:  # passed to its end
                del self.cutting[cid]
                self.chunked += 1
                self.capture_of.pop(cid, None)

    def _feed(self) -> Iterator[pa.RecordBatch]:
        """The whole connections gathered, in groups of about ``batch_rows`` frames (a larger connection alone), each
        sorted as the lifecycle job sorts its partitions (connection_id first, so groups in connection_id order are
        the job's order too) and done: folded and from arrays where that applies (``lifecycle.compiled``), the rest to
        the machines ``batch_rows`` at a time; each connection ends when the next begins (the runner's contract) or
        at the end of its group. A group at a time, so a task holds the copies the sort, the folding and the arrays
        make of one group, not of everything that became whole at once (the long connections at a capture's end)."""
        if not self.ready:
            return
        ready, self.ready, self.ready_rows = self.ready, {}, 0
        capture_of = {cid: self.capture_of.pop(cid) for cid in ready}
        columns = self._columns()
        group: list[str] = []
        rows = 0
        order = sorted(ready)
        for k, cid in enumerate(order):
            group.append(cid)
            rows += sum(p.num_rows for p in ready[cid])
            if rows >= self.batch_rows or k == len(order) - 1:
                parts = [p for c in group if capture_of[c] not in self.failed for p in ready.pop(c)]
                captures = sorted({capture_of[c] for c in group})
                group, rows = [], 0
                if parts:
                    handed, parts = Handed(parts), []  # the group's frames are _group's to let go
                    yield from self._group(handed, captures, columns)

    def _group(self, handed: Handed, captures: list[str], columns: list[str]) -> Iterator[pa.RecordBatch]:
        """``handed``: the group's frames as held (a list of batches), or a table already sorted (``sorted_table``),
        this function's alone: the folding lets them go as it copies the rows it keeps."""
        try:
            parts = handed.take()
            if isinstance(parts, pa.Table):
                frames, order = parts, None
            else:
                frames = _table(parts, self.types)
                order = pc.sort_indices(frames, options=_SORT)
            del parts
            if self.fold_content:  # sorted and folded in one copy of the rows kept
                source, frames = Handed(frames), None
                folded = fold(source, self.out.options.reorder_window, order, lazy=self.arrays)
                columns = columns + [c for c in FOLD_COLUMNS if c in folded.column_names]
                taken = None
                if self.arrays:
                    done = array091.lifecycle(folded, self.out.options.reorder_window,
                                              max_pending_returns=self.out.options.max_pending_returns)
                    yield from self.out.arrays(done)
                    taken = done.taken if done.taken.any() else None
                    del done
                # the rows the machines take: a Kept's made into a table of those rows only
                if isinstance(folded, Kept):
                    frames = folded.table(None if taken is None else ~taken)
                else:
                    frames = folded if taken is None else folded.filter(pa.array(~taken))
                del folded
            elif order is not None:
                frames = frames.take(order)
            if isinstance(frames, pa.Table):  # where the frames were read without them: the rows the rest takes
                frames = with_frame_ids(frames)
            if self.arrays and isinstance(frames, pa.Table):  # the 1.0 connections array10.py models
                done = array10.lifecycle(frames, self.out.options.reorder_window)
                if done.taken.any():
                    yield from self.out.arrays(done)
                    frames = frames.filter(pa.array(~done.taken))
                del done
            for start in range(0, frames.num_rows, self.batch_rows):
                for batch in frames.slice(start, self.batch_rows).to_batches():
                    yield from self.out.feed(batch, columns)
            yield from self.out.end_connection()
        except Exception as exc:  # noqa: BLE001 - the lifecycle job redoes these captures, and fails the culprit alone
            if self.strict:  # the lifecycle job itself: the stage fails the culprit alone (cli._isolated_stage)
                raise
            self._fail(captures, f"{type(exc).__name__}: {exc}")
            self.out.reset()

    def _fail(self, capture_ids: list[str], why: str) -> None:
        for capture_id in capture_ids:
            log.warning("fused lifecycle of capture %s left to the lifecycle job: %s", capture_id[:12], why)
            self.failed.setdefault(capture_id, why)
        dropped = {cid for cid, cap in self.capture_of.items() if cap in capture_ids}
        for cid in dropped:
            self.open_rows -= self.open_of.pop(cid, 0)
            self.cutting.pop(cid, None)
            self.rows_of.pop(cid, None)
            self.loose.pop(cid, None)
            self.held_rows -= sum(p.num_rows for p in self.held.pop(cid, None) or ())
            self.capture_of.pop(cid, None)
            self.ready_rows -= sum(p.num_rows for p in self.ready.pop(cid, []))


class _Cutting:
    """A connection done a chunk at a time: its cutter, its pass, and how many chunks it passed."""

    __slots__ = ("cutter", "pass_", "passed")

    def __init__(self, cutter, pass_) -> None:
        self.cutter, self.pass_, self.passed = cutter, pass_, 0


def sorted_lifecycle(batches: Iterator[pa.RecordBatch], delivery_struct: pa.StructType,
                     flow_event_struct: pa.StructType, request_response_struct: pa.StructType,
                     options: LifecycleOptions = LifecycleOptions(), batch_rows: int = 8192,
                     max_connection_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """``lifecycle_batches`` for the lifecycle job's partitions (frames sorted by connection_id, then ``SORT_KEYS``),
    each whole connection folded and from arrays where that applies, as in the ingest's decode tasks: the same rows.
    Raises what the machines raise."""
    life = ConnectionLifecycle(delivery_struct, flow_event_struct, request_response_struct, options, batch_rows,
                               max_connection_rows=max_connection_rows, strict=True)
    for batch in batches:
        yield from life.sorted_frames(batch)
    yield from life.finish()


def sorted_table_lifecycle(frames: pa.Table | Handed, fields: list[pa.Field], delivery_struct: pa.StructType,
                           flow_event_struct: pa.StructType, request_response_struct: pa.StructType,
                           options: LifecycleOptions = LifecycleOptions(), batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """``ConnectionLifecycle.sorted_table`` (the lifecycle job's direct tasks): the same rows as ``lifecycle_batches``.
    Raises what the machines raise."""
    life = ConnectionLifecycle(delivery_struct, flow_event_struct, request_response_struct, options, batch_rows,
                               strict=True)
    yield from life.sorted_table(frames, fields)


def _run_starts(conn: pa.Array | pa.ChunkedArray) -> list[int]:
    """Where each run of equal connection ids begins (0 first; a null differs from its neighbours)."""
    n = len(conn)
    if n < 2:
        return [0][:n]
    changed = pc.fill_null(pc.not_equal(conn.slice(1), conn.slice(0, n - 1)), True)
    return [0, *(np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1).tolist()]


_SORT = sort_options()


def _table(parts: list[pa.RecordBatch], types: dict[str, pa.DataType]) -> pa.Table:
    """The parts as one table of the columns some part holds (and the sort keys); a column a part left out (all null
    there) is nulls of that part's length."""
    runs: list[list[pa.RecordBatch]] = []
    for p in parts:  # neighbours mostly come from one frame batch, so they have one schema
        if runs and runs[-1][0].schema == p.schema:
            runs[-1].append(p)
        else:
            runs.append([p])
    table = pa.concat_tables([pa.Table.from_batches(run) for run in runs], promote_options="default")
    for key in ("connection_id", *SORT_KEYS):
        if key not in table.column_names:
            table = table.append_column(pa.field(key, types[key]), pa.nulls(table.num_rows, types[key]))
    return table
