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

import pyarrow as pa

from amqplens.decode import __version__
from amqplens.lifecycle.batches import FRAME_COLUMNS, lifecycle_batches
from amqplens.lifecycle.fused import SORT_KEYS
from amqplens.config import Config
from amqplens.lake.store import TableStore
from amqplens.logs import FRAMELESS_FORMATS
from amqplens.session import shuffle_partitions
from amqplens.lake.staging import StagedFile, StagedTable, contract_batch, current_task
from amqplens.contracts import DELIVERIES, FLOW_EVENTS, REQUEST_RESPONSES, Table

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
        given["source"] = pa.array(["capture"] * out.num_rows, pa.string())
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


def stage_lifecycle(batches, fn, staged: dict[str, StagedTable], task: int | None = None):
    """``fn`` (``lifecycle_batches``), its rows written by this task into each table's staging folder.

    The rows never cross into the JVM: ``LifecycleWriters`` writes them; the
    task yields one ``STAGED_SCHEMA`` row per file written (kind, capture, meta).
    """
    writers = LifecycleWriters(staged, current_task() if task is None else task)
    for out in fn(batches):
        writers.write(out)
    for kind, f in writers.close():
        yield pa.RecordBatch.from_pydict({"kind": [kind], "capture_id": [f.unit], "meta": [f.to_meta()]},
                                         schema=STAGED_SCHEMA)


def structs() -> dict[str, pa.StructType]:
    """The struct each kind of the machines' rows fills (``lifecycle_batches``' ``*_struct`` arguments)."""
    return {f"{kind}_struct": row_struct(t) for kind, t in OUTPUTS}


def stage_tables(store: TableStore, run_id: str) -> dict[str, StagedTable]:
    """A staging folder per lifecycle table, by kind, for the tasks' ``LifecycleWriters``."""
    return {kind: store.stage(table.name, run_id) for kind, table in OUTPUTS}


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


def run(spark, conf: Config, capture_ids: list[str] | None = None, run_id: str | None = None) -> list[str]:
    """Build the lifecycle tables for the given captures (default: every capture in the lake). Returns those done now."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"])
    # logs without frames (RabbitMQ server logs and traces) have nothing to build, and their trace deliveries must stay
    caps = (store.read("captures").where(~F.col("format").isin(sorted(FRAMELESS_FORMATS)))
            .select("capture_id", "capture_date", "decoder_version").collect())
    if capture_ids is not None:
        caps = [c for c in caps if c.capture_id in set(capture_ids)]
    units = {c.capture_id: app_id(c.capture_id, c.decoder_version) for c in caps}
    pending = {cid: a for cid, a in units.items() if not store.committed("request_responses", a)}
    if not pending:
        return []
    partitions = {c.capture_id: {"capture_date": c.capture_date.isoformat()} for c in caps if c.capture_id in pending}
    fn = functools.partial(lifecycle_batches, **structs(), batch_rows=conf["capture.batch_rows"])
    staged = stage_tables(store, run_id)
    frames = store.read("frames", list(pending))
    # only the columns the machines read cross the shuffle and the Arrow hand-off (frames has ~90)
    read = [c for c in (*FRAME_COLUMNS, "ts") if c in frames.columns]
    out = (
        frames.select(*read)
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
