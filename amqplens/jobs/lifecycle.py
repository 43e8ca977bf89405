"""Job: frames -> deliveries, flow_events, request_responses.

spark-submit jobs/lifecycle.py --lake DIR [--capture-id ID ...] [--config F] [--set k=v]

Reads only the frames table (whatever its source), repartitions it by
connection and sorts each connection's frames by time, and runs the
per-dialect state machines of amqplens.lifecycle in mapInArrow; the tasks
write the three tables' Parquet files themselves (``StagedWriter``) and the
driver commits them, request_responses last. A capture is redone when its
frames were re-ingested (the transaction id carries the captures row's
decoder version) or the lifecycle code changed.

Captures ingested with ``lifecycle.fused`` (the default) are done already: the
ingest's decode tasks ran the same machines on each connection and the ingest
committed the three tables under this job's transaction ids (``app_id``,
``commit``; amqplens/jobs/ingest_captures.py). What is left for this job: frames from
logs (Proton traces), captures ingested with ``lifecycle.fused`` off or by an
older version, and re-deriving a lake.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping

import pyarrow as pa

from amqplens.decode import __version__
from amqplens.decode.common.arrow import repeated
from amqplens.lifecycle.batches import FRAME_COLUMNS, lifecycle_batches
from amqplens.lifecycle.chunks import SORT_KEYS
from amqplens.lifecycle.fused import sorted_lifecycle, sorted_table_lifecycle
from amqplens.config import Config
from amqplens.lake.store import TableStore
from amqplens.logs import FRAMELESS_FORMATS
from amqplens.session import shuffle_partitions
from amqplens.lake.staging import StagedFile, StagedTable, contract_batch, current_task
from amqplens.contracts import DELIVERIES, FLOW_EVENTS, FRAMES, REQUEST_RESPONSES, Table

log = logging.getLogger(__name__)
JOB = "lifecycle"
OUTPUTS = (("delivery", DELIVERIES), ("flow_event", FLOW_EVENTS), ("request_response", REQUEST_RESPONSES))
TABLES = tuple(t.name for _, t in OUTPUTS)
# columns the job fills, not the machines: the capture's, and the deliveries' source (trace rows come from ingest_logs)
JOB_COLUMNS = ("capture_id", "capture_date", "source", "trace_json")


def row_struct(table: Table) -> pa.StructType:
    """The struct the state machines fill: the table's columns, timestamps as *_us microseconds, no capture columns."""
    fields = []
    for c in table.columns:
        if c.name in JOB_COLUMNS:
            continue
        if c.type == "timestamp":
            fields.append(pa.field(f"{c.name}_us", pa.int64()))
        else:
            fields.append(pa.field(c.name, c.arrow_type))
    return pa.struct(fields)


def app_id(capture_id: str, decoder_version: str) -> str:
    return f"amqplens/{JOB}/{capture_id}/{decoder_version}/{__version__}"


STAGED_SCHEMA = pa.schema([("kind", pa.string()), ("capture_id", pa.string()), ("meta", pa.string())])


def table_rows(out: pa.RecordBatch, kind: str, table: Table) -> pa.RecordBatch:
    """A ``lifecycle_batches`` batch of one kind as rows of its table (data columns; capture_date is the partition's).

    Timestamps come from the machines' ``*_us`` fields; rows built from frames
    have ``source`` capture and no ``trace_json`` (trace rows come from ingest_logs).
    """
    given = {"capture_id": out.column("capture_id")}
    if "source" in table.column_names:
        given["source"] = repeated("capture", out.num_rows)
    return contract_batch(table, out.column(kind), given)


class LifecycleWriters:
    """A task's ``StagedWriter`` per lifecycle table, fed ``lifecycle_batches`` output batches.

    Each batch is split by capture (the unit a table replaces); ``close``
    returns ``(kind, file report)`` per file written. The lifecycle job's tasks
    and the fused decode tasks (amqplens/jobs/ingest_captures.py) write through it.
    """

    def __init__(self, staged: dict[str, StagedTable], task: int):
        self.writers = {kind: s.writer(task) for kind, s in staged.items()}

    def write(self, out: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        if not out.num_rows:
            return
        tables = dict(OUTPUTS)
        kind = out.column(0)[0].as_py()
        cids = out.column("capture_id")
        units = pc.unique(cids).to_pylist()
        for cid in units:
            part = out if len(units) == 1 else out.filter(pc.equal(cids, cid))
            self.writers[kind].write(cid, table_rows(part, kind, tables[kind]))

    def close(self) -> list[tuple[str, StagedFile]]:
        return [(kind, f) for kind, w in self.writers.items() for f in w.close()]

    def discard(self) -> None:
        """Close, and remove the files written: rows this task will not report."""
        for w in self.writers.values():
            for f in w.close():
                w.fs.delete_file(f"{w.dir}/{f.path}")


def stage_lifecycle(batches, fn, staged: dict[str, StagedTable], task: int | None = None):
    """``fn`` (``lifecycle_batches``), its rows written by this task into each table's staging folder.

    The rows never cross into the JVM: ``LifecycleWriters`` writes them; the
    task yields one ``STAGED_SCHEMA`` row per file written (kind, capture, meta).
    """
    writers = LifecycleWriters(staged, current_task() if task is None else task)
    for out in fn(batches):
        writers.write(out)
    yield from _staged_rows(writers.close())


def _staged_rows(files: list[tuple[str, StagedFile]]):
    for kind, f in files:
        yield pa.RecordBatch.from_pydict({"kind": [kind], "capture_id": [f.unit], "meta": [f.to_meta()]},
                                         schema=STAGED_SCHEMA)


def structs() -> dict[str, pa.StructType]:
    """The struct each kind of the machines' rows fills (``lifecycle_batches``' ``*_struct`` arguments)."""
    return {f"{kind}_struct": row_struct(t) for kind, t in OUTPUTS}


def stage_tables(store: TableStore, run_id: str, *, pack: Mapping[str, str] | None = None) -> dict[str, StagedTable]:
    """A staging folder per lifecycle table, by kind, for the tasks' ``LifecycleWriters`` (``pack``: the captures
    whose rows share a file, ``TableStore.stage``)."""
    return {kind: store.stage(table.name, run_id, pack=pack) for kind, table in OUTPUTS}


def commit(store: TableStore, staged: dict[str, StagedTable], files: dict[str, list[StagedFile]], *, units: dict[str, str],
           partitions: dict[str, dict[str, str]], run_id: str) -> None:
    """Commit the tasks' files (``files``: by kind) of the captures ``units`` names (capture id -> ``app_id``).

    request_responses last: its transaction marks a capture done (``run`` looks for it), so a run that dies
    between the commits leaves the capture pending and the next run commits what is missing.
    """
    for kind, _ in OUTPUTS:
        store.commit_staged(staged[kind], files.get(kind, []), units=units, partitions=partitions, run_id=run_id)


def discard(store: TableStore, staged: dict[str, StagedTable]) -> None:
    for s in staged.values():
        store.discard_staged(s)


def _refilled(batches, fn, fields: list[pa.Field], **kwargs):
    """``fn`` of the batches with the columns ``fields`` names, which the job did not read, as nulls."""
    def filled():
        for batch in batches:
            n = batch.num_rows
            yield pa.RecordBatch.from_arrays([*batch.columns, *(pa.nulls(n, f.type) for f in fields)],
                                             names=[*batch.schema.names, *(f.name for f in fields)])
    return fn(filled() if fields else batches, **kwargs)


def direct_plan(store: TableStore, units: list[str], tasks: int, task_frames: int, max_connection_frames: int) -> list[str] | None:
    """The direct path's tasks (``lifecycle.direct``): every connection of ``units``' frames onto bins by its frames,
    largest first onto the lightest (at least ``tasks`` bins, more to keep a bin near ``task_frames`` frames), each
    task a JSON ``{"files": {file: [row group, ...]}, "connections": [...]}`` of its connections and the row groups
    of the frames files that hold them (a task decodes those, not every file whole: the frames are written a flow at
    a time, so a connection's frames sit in a few runs of row groups).
    None where the direct path does not apply and Spark's shuffle and sort take the captures: a file of rows of other
    captures too (not written by amqplens), a frame without a connection, or a connection of more than
    ``max_connection_frames`` frames (held whole by a task; Spark's sort spills, and the machines take it as it comes).

    The driver reads the frames' connection ids only, dictionary-encoded, a row group at a time: Python per row group
    and per connection in it, not per frame."""
    import json

    import numpy as np
    import pyarrow.parquet as pq
    from amqplens.decode.capture.headscan import bins

    dt = store.delta("frames")
    if dt is None:
        return []
    files, exact = store.unit_files("frames", dt, units)
    if not exact:
        return None
    counts: dict[str, int] = {}
    where: dict[str, set[tuple[int, int]]] = {}  # connection -> (file, row group)
    for k, f in enumerate(files):
        (fragment,) = store.dataset("frames", [f]).get_fragments()
        with fragment.filesystem.open_input_file(fragment.path) as source:
            pf = pq.ParquetFile(source, read_dictionary=["connection_id"])
            columns = [pf.read_row_group(g, columns=["connection_id"]).column(0) for g in range(pf.num_row_groups)]
        for g, ids in enumerate(columns):
            if ids.null_count:
                return None
            group = (k, g)
            for chunk in ids.chunks:
                per = np.bincount(chunk.indices.to_numpy(), minlength=len(chunk.dictionary))
                for cid, m in zip(chunk.dictionary.to_pylist(), per.tolist()):
                    if m:
                        counts[cid] = counts.get(cid, 0) + m
                        where.setdefault(cid, set()).add(group)
    if not counts:
        return []
    if max(counts.values()) > max_connection_frames:
        return None
    total = sum(counts.values())
    n = max(tasks, -(-total // task_frames))
    plan = []
    for placed in bins([(m, cid) for cid, m in counts.items()], n):
        if placed:
            groups: dict[str, list[int]] = {}
            for k, g in sorted({kg for cid in placed for kg in where[cid]}):
                groups.setdefault(files[k][1], []).append(g)
            plan.append(json.dumps({"files": groups, "connections": sorted(placed),
                                    "frames": sum(counts[cid] for cid in placed)}))
    return plan


PLAN_SCHEMA = pa.schema([("plan", pa.string())])


def direct_task(plans, root: str, read: list[str], fields: list[pa.Field], fn, staged: dict[str, StagedTable],
                lean_read: bool = False, chunk_frames: int = 0):
    """A direct task: its connections' frames read from the lake's files by pyarrow (no scan through the JVM, no
    shuffle), sorted as the Spark path sorts a partition, and written (``stage_lifecycle``). ``fn``: the whole
    sorted table and ``fields`` (the frame columns not read, all null) -> ``lifecycle_batches``' output.
    Holds the task's frames once sorted (the source table is let go), and the copies one group of connections makes.
    ``lean_read``: the hot methods' arguments let go a batch at a time as they are read (``fold.lean``; the compiled
    lifecycle, which makes its frames lean anyway), not after the whole read. ``chunk_frames``: a task of one 0-9-1
    connection of more frames than this tries it a chunk at a time first (``chunked_connection``)."""
    import json

    import pyarrow.compute as pc

    from amqplens.decode.common.arrow import release_memory, use_task_memory_pool
    from amqplens.lifecycle.fold import Handed, lean

    use_task_memory_pool()  # before the reads, whose dropped rows the pool hands back
    store = TableStore(None, root)
    for batch in plans:
        for text in batch.column("plan").to_pylist():
            plan = json.loads(text)
            data = _row_groups(store, plan["files"])
            wanted = pc.field("connection_id").isin(pa.array(plan["connections"], pa.string()))
            # not read: the frame ids (made for the rows written: fold.frame_ids_at) and a task's one connection id
            single = plan["connections"][0] if len(plan["connections"]) == 1 else None
            columns = [c for c in read if c != "frame_id" and (single is None or c != "connection_id")]
            if chunk_frames and lean_read and single is not None and plan.get("frames", 0) > chunk_frames:
                files = chunked_connection(data, columns, wanted, single, fields, staged, chunk_frames)
                if files is not None:
                    release_memory()
                    yield from _staged_rows(files)
                    continue
            # handed on: the lifecycle lets the frames go as it copies the rows it keeps (fold.Handed)
            frames = Handed(read_sorted(data, columns, wanted, single, lean if lean_read else None))
            yield from stage_lifecycle(None, lambda _, frames=frames: fn(frames, fields), staged)
            del frames
            release_memory()


CHUNKED_TASK = 1 << 20  # a chunked connection's files are named by its task number plus this (dropped if it falls back)


def chunked_connection(data, columns: list[str], where, single: str, fields: list[pa.Field],
                       staged: dict[str, StagedTable], chunk_frames: int) -> list[tuple[str, StagedFile]] | None:
    """A direct task's one 0-9-1 connection a chunk of about ``chunk_frames`` frames at a time: read in the files'
    order (the decoder's: times never go back), cut into sorted chunks (``chunks.ChunkCutter``), each folded and
    passed from arrays (``array091.ConnectionPass``, which carries the pass's state to the next chunk), its rows
    written. The files written, or None (and nothing written) where the connection cannot be done so (the array pass
    does not model it, or ``chunks.Unchunked``): the whole path then does it, with the same rows either way
    (``tests/lifecycle/test_chunked_task.py``)."""
    from amqplens.lifecycle.array091 import ConnectionPass
    from amqplens.lifecycle.batches import LifecycleBatcher
    from amqplens.lifecycle.chunks import Unchunked, folded_chunk
    from amqplens.lifecycle.runner import LifecycleOptions

    options = LifecycleOptions()
    writers = LifecycleWriters(staged, current_task() + CHUNKED_TASK)
    out = LifecycleBatcher(**structs(), options=options)
    pass_ = ConnectionPass(options.reorder_window, options.max_pending_returns)
    try:
        for chunk, final in _connection_chunks(data, columns, where, single, fields, chunk_frames):
            done = pass_.feed(folded_chunk(chunk, options.reorder_window), final)
            del chunk
            if done is None:
                raise Unchunked("not modelled")
            for batch in out.arrays(done):
                writers.write(batch)
            del done
    except Unchunked as why:
        log.info("lifecycle: connection %s done whole (%s)", single, why)
        writers.discard()
        return None
    except BaseException:
        writers.discard()
        raise
    return writers.close()


def _connection_chunks(data, columns: list[str], where, single: str, fields: list[pa.Field], chunk_frames: int):
    """``(chunk, final)``: the connection's rows a sorted chunk at a time (``chunked_connection``); raises
    ``chunks.Unchunked``."""
    import numpy as np

    from amqplens.lifecycle.chunks import ChunkCutter
    from amqplens.lifecycle.fold import lean

    cutter = ChunkCutter(chunk_frames)
    for table in _row_group_tables(data, columns, where):
        table = lean(table)
        if not table.num_rows:
            continue
        n = table.num_rows
        table = table.append_column("connection_id", pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([single], pa.string())))
        for f in fields:
            table = table.append_column(f, pa.nulls(n, f.type))
        chunk = cutter.add(table)
        if chunk is not None:
            yield chunk, False
            del chunk
    yield cutter.last(), True


def _row_group_tables(data, columns: list[str], where):
    """The rows ``where`` keeps of each row group of ``data``'s fragments in turn, in the files' order: one row group
    held at a time (a scanner's read-ahead held 125-430 MiB of a 3.4M-frame connection's rows, 9 MiB so)."""
    for fragment in data.get_fragments():
        groups = getattr(fragment, "row_groups", None)
        if groups is None:  # not Parquet (tests' tables in memory): its batches
            for batch in fragment.to_batches(columns=columns, filter=where):
                yield pa.Table.from_batches([batch])
            continue
        for group in groups:  # the dataset's schema: a column the file left out (``staging._Slot``) reads as nulls
            yield fragment.subset(row_group_ids=[group.id]).to_table(schema=data.schema, columns=columns, filter=where)


# the frames' text columns whose values repeat down a connection, read dictionary-encoded by the direct tasks (as
# Parquet holds them): the 2 GB load capture's 3.4M-frame connection held 1,926 MiB of Arrow after its read, 219 MiB of
# it capture_id alone; ``fold.plain`` gives the values back for the rows kept, the sort ranks the dictionaries. Not
# connection_id: the read's filter on it took twice the read's CPU when it was a dictionary (7.3 against 3.0 s there)
DICTIONARY_COLUMNS = (
    "capture_id", "direction", "dialect", "frame_type", "class_name", "method_name", "exchange",
    "routing_key", "queue", "consumer_tag", "reason", "performative", "role", "link_name", "state", "error_condition",
    "source_address", "target_address", "destination", "flow_mode", "credit_unit", "accept_mode", "acquire_mode",
)


def _row_groups(store: TableStore, groups: dict[str, list[int]]):
    """A dataset of the frames files ``groups`` names (as the Delta log does), of the row groups it gives each; the
    ``DICTIONARY_COLUMNS`` dictionary-encoded."""
    import pyarrow.dataset as ds

    text = [f.name for f in FRAMES.arrow_schema() if f.name in DICTIONARY_COLUMNS and pa.types.is_string(f.type)]
    parts = []
    for rel, ids in groups.items():
        data = store.dataset("frames", [("", rel, 0)], dictionary=text)
        (fragment,) = data.get_fragments()
        parts.append(fragment.subset(row_group_ids=ids))
    return ds.FileSystemDataset(parts, data.schema, data.format, data.filesystem)


def read_sorted(data, columns: list[str], where, single: str | None = None, each=None) -> pa.Table:
    """The rows of ``data`` (a pyarrow dataset) ``where`` keeps, sorted as the lifecycle sorts a partition, taken a
    column at a time, each source column let go once taken: the frames and one column more are held, not the frames
    twice (3.6 -> 2.8 GB after the sort for a task of a connection of 3.4M frames). ``single``: the connection id of
    every row ``where`` keeps, made as a dictionary of that one value instead of read (``columns`` lacks it): 116 MiB
    of text of the 2 GB load capture's longest connection. ``each``: a function of each table of rows read (one
    batch), applied as it is read (``fold.lean``)."""
    import numpy as np
    import pyarrow.compute as pc
    from amqplens.lifecycle.chunks import in_order, sort_keys, sort_options
    from amqplens.lifecycle.fold import Handed

    # two batches of read-ahead: Arrow's default (16 batches, 4 files) read the 2 GB capture's largest task in 3.8 s
    # against 1.4 s, holding more of the rows the filter drops
    scan = data.scanner(columns=columns, filter=where, batch_readahead=2, fragment_readahead=1)
    if each is None:
        table = scan.to_table()
    else:  # a batch at a time as it is read: what ``each`` lets go is never held for the whole read
        table = pa.concat_tables([each(pa.Table.from_batches([b], scan.projected_schema)) for b in scan.to_batches()]
                                 or [scan.projected_schema.empty_table()])
    if single is not None:
        table = table.append_column("connection_id", pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(table.num_rows, np.int32)), pa.array([single], pa.string())))
    order = pc.sort_indices(sort_keys(table), options=sort_options())
    handed = Handed(table)
    del table
    return in_order(handed, order)


def _direct_machines(frames, fields: list[pa.Field], **kwargs):
    """``lifecycle_batches`` over a direct task's sorted frames (``fold.Handed``; ``lifecycle.compiled`` off), their
    dictionary-encoded columns as values."""
    from amqplens.lifecycle.fold import plain_table, with_frame_ids

    frames = with_frame_ids(plain_table(frames.take()))
    return _refilled(iter(frames.to_batches(max_chunksize=kwargs["batch_rows"])), lifecycle_batches, fields, **kwargs)


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Build the lifecycle tables for the given captures (default: every capture in the lake). Returns those done now."""
    from pyspark.sql.pandas.types import from_arrow_schema

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"],
                       pack=conf["lake.pack_small_units"])
    # logs without frames (RabbitMQ server logs and traces) have nothing to build, and their trace deliveries must stay.
    # Read by delta-rs on the driver, not a Spark job (1.2 s of the 2 GB load capture's lifecycle stage, for one row)
    caps = [c for c in store.read_arrow("captures", ["capture_id", "capture_date", "decoder_version", "format"],
                                        capture_ids).to_pylist()
            if c["format"] is not None and c["format"] not in FRAMELESS_FORMATS]  # as Spark's NOT IN: a null is out
    units = {c["capture_id"]: app_id(c["capture_id"], c["decoder_version"]) for c in caps}
    pending = {cid: a for cid, a in units.items() if not store.committed("request_responses", a)}
    if not pending:
        return []
    partitions = {c["capture_id"]: {"capture_date": c["capture_date"].isoformat()} for c in caps
                  if c["capture_id"] in pending}
    if conf["lifecycle.compiled"] == "off":
        fn = functools.partial(lifecycle_batches, **structs(), batch_rows=conf["capture.batch_rows"])
    else:  # each connection held whole, folded and from arrays where that applies, as in the ingest's tasks
        fn = functools.partial(sorted_lifecycle, **structs(), batch_rows=conf["capture.batch_rows"],
                               max_connection_rows=conf["lifecycle.max_connection_frames"])
    staged = stage_tables(store, run_id)
    # only the columns the machines read cross the shuffle and the Arrow hand-off (frames has ~90), and of those only
    # the ones some frame of these captures fills (each dialect fills its own: 26 of 73 on a 0-9-1 capture, half of
    # Spark's scan and shuffle); the others come back as nulls in the tasks
    read = [c for c in (*FRAME_COLUMNS, "ts") if c in FRAMES.column_names]
    null = store.null_columns("frames", list(pending), read) - {"connection_id", "capture_id", *SORT_KEYS}
    fields = [FRAMES.arrow_schema().field(c) for c in read if c in null]
    fn = functools.partial(_refilled, fn=fn, fields=fields)
    read = [c for c in read if c not in null]
    plan = None
    if conf["lifecycle.direct"] != "off":
        plan = direct_plan(store, list(pending), spark.sparkContext.defaultParallelism,
                           conf["lifecycle.direct_task_frames"], conf["lifecycle.max_connection_frames"])
    if plan is not None:  # the tasks read the frames themselves: no scan through the JVM, no shuffle
        log.info("lifecycle: %d direct task(s)", len(plan))
        rows = spark.sparkContext.parallelize([(p,) for p in plan], max(1, len(plan))).toDF(
            from_arrow_schema(PLAN_SCHEMA))
        whole = functools.partial(sorted_table_lifecycle if conf["lifecycle.compiled"] != "off" else _direct_machines,
                                  **structs(), batch_rows=conf["capture.batch_rows"])
        out = rows.mapInArrow(functools.partial(direct_task, root=store.root, read=read, fields=fields, fn=whole,
                                                staged=staged, lean_read=conf["lifecycle.compiled"] != "off",
                                                chunk_frames=conf["lifecycle.chunk_frames"]),
                              from_arrow_schema(STAGED_SCHEMA))
    else:
        out = (
            store.read("frames", list(pending)).select(*read)
            .repartition(shuffle_partitions(spark, conf), "connection_id")
            # the fused lifecycle sorts each connection's frames by the same keys (amqplens/lifecycle/fused.py)
            .sortWithinPartitions("connection_id", *SORT_KEYS)
            .mapInArrow(functools.partial(stage_lifecycle, fn=fn, staged=staged), from_arrow_schema(STAGED_SCHEMA))
        )
    try:
        reports = out.collect()
        files = {kind: [StagedFile.from_meta(r["meta"]) for r in reports if r["kind"] == kind] for kind, _ in OUTPUTS}
        commit(store, staged, files, units=pending, partitions=partitions, run_id=run_id)
    finally:
        discard(store, staged)
    return list(pending)
