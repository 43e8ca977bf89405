"""Job: capture files -> captures, connections, frames, decode_errors.

spark-submit jobs/ingest_captures.py --input PATH [PATH ...] --lake DIR [--config F] [--set k=v]

Reads each file in byte-range splits (one task per split), shuffles the
packets by flow and reassembles TCP per flow; the decoding tasks write the
connections, frames and decode_errors files themselves, and the driver commits
them through the TableStore and then writes the captures rows: one Spark job.

The direct path (``capture.direct``) leaves out the splits and the shuffle: the
driver scans each capture's headers (``headscan.plan``, numba), spreads its flows
over the tasks by bytes (largest first onto the least loaded), and each task scans
the whole file and decodes the packets of its flows straight from the mapped file
(``direct_packets``). A capture the scan cannot read whole takes the shuffle path
in the same job. A capture whose rows were already committed with the same decoder
version and config is skipped; the captures table is written last, so its
row marks a capture as done.

With ``lifecycle.fused`` (the default) the decoding tasks also run the
lifecycle machines on each connection once its frames are decoded
(``amqplens/lifecycle/fused.py``) and write deliveries, flow_events and
request_responses; the driver commits them under the lifecycle job's own
transaction ids (``lifecycle.app_id``), after the ingest's three tables and
before captures (see ``_commit``), so the lifecycle job finds those captures
done.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import uuid
from typing import Final

from amqplens.decode import __version__
from amqplens.decode import clock
from amqplens.decode import pipeline
from amqplens.decode.capture import headscan, plan_splits, sniff_format, sniff_head
from amqplens.logs import SNIFF_BYTES as LOG_SNIFF_BYTES
from amqplens.logs import sniff as log_sniff
from amqplens.decode.codecs import DecodeOptions
from amqplens.decode.common.arrow import frame_ids, release_memory, repeated
from amqplens.decode.common.reports import MetaReport
from amqplens.decode.pipeline import RowKind
from amqplens.decode.tls import KeyLog
from amqplens.lake import isolation
from amqplens.jobs import lifecycle
from amqplens import progress
from amqplens.config import Config
from amqplens.inputs import CaptureFile, InputError, capture_files
from amqplens.lake.store import TableStore
from amqplens.session import shuffle_partitions
from amqplens.lake.staging import StagedFile, StagedTable, contract_batch, current_task
from amqplens.contracts import CONNECTIONS, DECODE_ERRORS, FRAMES
from amqplens.contracts.arrow import facts_struct, frame_struct
from amqplens.contracts.tables import PROTOCOL_COLUMNS, PROTOCOL_FACT_KEYS

log = logging.getLogger(__name__)
JOB = "ingest_captures"
EPOCH_DAY = clock.EPOCH_DAY


@dataclasses.dataclass
class IngestResult:
    run_id: str
    captures: list[dict]  # the captures rows written (or found done)
    skipped: list[str]  # capture ids already ingested with this decoder version/config
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # capture id -> error, of captures that raised
    lifecycle: list[str] = dataclasses.field(default_factory=list)  # capture ids whose lifecycle tables it committed (fused)
    # path -> why, of files left alone because they are broker logs, not captures: their rows are the log ingest's
    # (the same bytes are the same capture_id there), which a failed captures row here would replace
    not_captures: dict[str, str] = dataclasses.field(default_factory=dict)
    # capture ids of ``captures`` that another run committed while this one worked on them (two runs at once)
    by_other: list[str] = dataclasses.field(default_factory=list)
    # capture id -> (path, error) of failed captures some of whose tables were committed: no captures row is written
    # for them (one saying failed would contradict their stored rows), so the next run finishes them, as after a kill
    unmarked: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)



def options_from(conf: Config) -> pipeline.Options:
    return pipeline.Options(
        decode_options=DecodeOptions(
            field_table_letters=conf["decode.field_table_letters"],
            max_error_bytes=conf["decode.max_error_bytes"],
            body_prefix_bytes=conf["decode.body_prefix_bytes"],
            redact_headers=tuple(conf["decode.redact_headers"]),
            compiled=conf["decode.compiled"],
        ),
        frame_struct=frame_struct(),
        facts_struct=facts_struct(),
        batch_rows=conf["capture.batch_rows"],
        amqp_ports=tuple(conf["capture.amqp_ports"]),
        tls_ports=tuple(conf["capture.tls_ports"]),
        sniff=conf["capture.sniff"],
        max_ooo_bytes=conf["capture.max_ooo_buffer"],
        history_bytes=conf["capture.retransmit_history"],
        port_reuse_idle_s=conf["capture.port_reuse_idle_s"],
        max_error_bytes=conf["decode.max_error_bytes"],
    )


def read_keylog(conf: Config) -> KeyLog | None:
    """The key log files of ``capture.keylog``, or None; a file that cannot be read is an input error (exit 2)."""
    paths = conf["capture.keylog"]
    if not paths:
        return None
    try:
        keys = KeyLog.read(paths)
    except OSError as exc:
        raise InputError(f"key log {exc.filename}: {exc.strerror}") from None
    log.info("key log: %d TLS session(s), %d line(s) skipped", len(keys), keys.skipped_lines)
    return keys


def fingerprint(options: pipeline.Options) -> str:
    """What the rows depend on besides the input bytes: decoder version, decode options and which TLS
    sessions the key log covers (``KeyLog.fingerprint``: client randoms, never a secret)."""
    keys = options.decode_options.key_log()
    bare = dataclasses.replace(options, decode_options=dataclasses.replace(options.decode_options, tls_keys=None))
    settings = {k: v for k, v in dataclasses.asdict(bare).items() if not k.endswith("_struct")}
    if keys:
        settings["tls_keys"] = keys.fingerprint()
    settings["decode_options"].pop("compiled", None)  # the compiled path changes speed, not rows
    text = json.dumps({"version": __version__, **settings}, sort_keys=True, default=str)
    return f"{__version__}+{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"


def app_id(capture_id: str, fp: str) -> str:
    return f"amqplens/{JOB}/{capture_id}/{fp}"


def split_size_for(size: int, split_size: int, min_split_size: int, parallelism: int) -> int:
    """The split size of one file: ``split_size``, or smaller so a small file still feeds every core.

    A file under ``split_size`` would be one split and one busy core; cut it into
    ``parallelism`` splits instead, but none under ``min_split_size`` (a split
    costs a task and a resynchronisation).
    """
    per_core = -(-size // max(1, parallelism))
    return max(1, min(split_size, max(per_core, min_split_size)))


def _split_rows(files: list[CaptureFile], split_size: int, min_split_size: int = 0, parallelism: int = 1) -> list[tuple]:
    rows = []
    for f in files:
        size = split_size_for(f.size, split_size, min_split_size, parallelism)
        for i, (start, end) in enumerate(plan_splits(f.path, size)):
            rows.append((f.capture_id, f.path, start, end, i))
    return rows


def pack_splits(rows: list[tuple], min_split_size: int, parallelism: int) -> list[list[tuple]]:
    """The split rows grouped into tasks: a split of ``min_split_size`` bytes or more is a task of its own; smaller
    ones (small files: rotated captures, a capture cut into many) share a task up to ``min_split_size`` bytes, in
    at least ``parallelism`` tasks while there are splits for them. 300 files of 30 KB are 2 tasks on 2 cores,
    not 300 (each a Python task with its scheduling); the splits of one large file stay one task each."""
    small = [r for r in rows if r[3] - r[2] < min_split_size]
    out = [[r] for r in rows if r[3] - r[2] >= min_split_size]
    if not small:
        return out
    total = sum(r[3] - r[2] for r in small)
    n = min(len(small), max(parallelism - len(out), -(-total // max(1, min_split_size)), 1))
    groups: list[list[tuple]] = [[] for _ in range(n)]
    loads = [0] * n
    for r in sorted(small, key=lambda r: r[2] - r[3]):  # largest first, each into the least loaded task
        i = loads.index(min(loads))
        groups[i].append(r)
        loads[i] += r[3] - r[2]
    return out + groups


STAGED_FILE: Final[RowKind] = "staged_file"  # kind of the flows rows that report a file a task wrote (meta: a StagedFile)
TASK_COUNTS: Final[RowKind] = "task_counts"  # kind of the flows rows with a task's counts per capture (meta: its CaptureCounts)
STAGED_TABLES = ("connections", "frames", "decode_errors")  # what the decode tasks write themselves
LIFECYCLE_FAILED: Final[RowKind] = "lifecycle_failed"  # kind of the flows rows naming a capture the fused lifecycle left to the job (meta: why)


def frame_rows(out):
    """A stage-2 batch of frames as rows of the frames table (its data columns; capture_date is the partition's).

    The job columns, as Spark would compute them: ``frame_id`` = connection,
    ``s``/``c`` (to_server or not), stream offset joined by ``-``; ``ts`` from
    ``ts_us``; ``source`` = capture.
    """
    frame = out.column("frame")
    frame_id = frame_ids(frame.field("connection_id"), frame.field("direction"), frame.field("stream_offset"))
    return contract_batch(FRAMES, frame, {"frame_id": frame_id, "capture_id": out.column("capture_id"),
                                          "source": _capture_source(out.num_rows)})


def _capture_source(n: int):
    return repeated("capture", n)


def connection_rows(out):
    """A stage-2 batch of connections as rows of the connections table: the connection struct, the codec's facts
    under their column names, ``start_ts``/``end_ts`` from microseconds, ``duration_us``, ``source`` = capture."""
    import pyarrow.compute as pc

    conn, facts = out.column("connection"), out.column("facts")
    given = {c.name: facts.field(PROTOCOL_FACT_KEYS.get(c.name, c.name)) for c in PROTOCOL_COLUMNS}
    given.update(capture_id=out.column("capture_id"), source=_capture_source(out.num_rows),
                 duration_us=pc.subtract(conn.field("end_ts_us"), conn.field("start_ts_us")))
    return contract_batch(CONNECTIONS, conn, given)


def error_rows(out):
    """A stage-2 batch of errors as rows of the decode_errors table (``ts`` from ``ts_us``)."""
    return contract_batch(DECODE_ERRORS, out.column("error"), {"capture_id": out.column("capture_id")})


@dataclasses.dataclass
class CaptureCounts(MetaReport):
    """What the captures row counts of one capture, added up per task and then over the tasks."""

    connections: int = 0
    packets_selected: int = 0
    capture_errors: int = 0
    first_error: str | None = None  # the detail of the capture-stage error at the smallest offset
    first_error_offset: int | None = None

    def add_connections(self, out) -> None:
        import pyarrow.compute as pc

        conn = out.column("connection")
        self.connections += out.num_rows
        self.packets_selected += pc.sum(pc.add(conn.field("packets_to_server"), conn.field("packets_to_client"))).as_py() or 0

    def add_errors(self, out) -> None:
        for e in out.column("error").to_pylist():
            if e["stage"] == "capture":
                self.capture_errors += 1
                self._first(e["detail"], e["offset"])

    def _first(self, detail, offset) -> None:
        if detail is not None and (self.first_error_offset is None or offset < self.first_error_offset):
            self.first_error, self.first_error_offset = detail, offset

    def merge(self, other: "CaptureCounts") -> "CaptureCounts":
        self.connections += other.connections
        self.packets_selected += other.packets_selected
        self.capture_errors += other.capture_errors
        if other.first_error is not None:
            self._first(other.first_error, other.first_error_offset)
        return self


def read_counted_splits(batches, options: pipeline.Options, read_bytes=None):
    """``pipeline.read_splits``, adding each split's length to the ``read_bytes`` accumulator once it is read."""
    def counted():
        for batch in batches:
            yield batch
            if read_bytes is not None:
                read_bytes.add(sum(r["end"] - r["start"] for r in batch.select(["start", "end"]).to_pylist()))

    return pipeline.read_splits(counted(), options)


def decode_and_stage(batches, options: pipeline.Options, staged: dict[str, StagedTable], task: int | None = None,
                     frames_decoded=None, lifecycle_staged: dict[str, StagedTable] | None = None,
                     max_held_frames: int | None = None, lifecycle_compiled: bool = True, progress=None,
                     chunk_frames: int = 0):
    """``pipeline.decode_flows``, with its frames, connections and errors written to their tables' staging folders
    by this task.

    Frames are most of stage 2's rows, and the wide frames table is the costliest
    thing Spark's row-by-row Parquet writer writes: here they go from Arrow to
    Parquet in the worker and never cross into the JVM; connections and errors
    go the same way, so the job needs no second pass over its output. What is
    left passes through (split statistics), plus one ``staged_file`` row
    (meta: table, unit, path, rows) per file and one ``task_counts`` row per
    capture. ``frames_decoded``: an accumulator of the frames written (the CLI's progress line).

    ``lifecycle_staged`` (the lifecycle tables' staging folders, by kind; the
    fused lifecycle): the frames also go to the lifecycle machines, one whole
    connection at a time, and their rows to those folders; a capture they
    raised on gets a ``lifecycle_failed`` row (meta: why) instead of being committed. ``progress`` (a
    ``fused.TaskProgress``, the direct tasks'): what the task has read of its captures, from which the fused
    lifecycle gives a capture of long connections to the job early (``max_held_frames``). ``chunk_frames``: a 0-9-1
    connection holding more frames than this is done a chunk at a time as its frames come (``fused``; 0: never).
    """
    import pyarrow as pa

    task = current_task() if task is None else task
    writers = {name: staged[name].writer(task) for name in STAGED_TABLES}
    counts: dict[str, CaptureCounts] = collections.defaultdict(CaptureCounts)
    schema = options.flows_schema
    fused = life = None
    if lifecycle_staged:
        from amqplens.lifecycle.fused import ConnectionLifecycle

        fused = ConnectionLifecycle(**lifecycle.structs(), batch_rows=options.batch_rows, max_held_rows=max_held_frames,
                                    fold_content=lifecycle_compiled, arrays=lifecycle_compiled, progress=progress,
                                    chunk_frames=chunk_frames)
        life = lifecycle.LifecycleWriters(lifecycle_staged, task)
    for out in pipeline.decode_flows(batches, options):
        kind = out.column(0)[0].as_py() if out.num_rows else None
        cid = out.column(1)[0].as_py() if out.num_rows else None
        if kind == "frame":
            assert cid is not None  # a batch of a kind has rows, each with its capture id
            rows = frame_rows(out)
            writers["frames"].write(cid, rows)
            if fused:
                assert life is not None  # made with fused
                _write_all(life, fused.frames(cid, rows))
            if frames_decoded is not None:
                frames_decoded.add(out.num_rows)
        elif kind == "connection":
            assert cid is not None
            writers["connections"].write(cid, connection_rows(out))
            counts[cid].add_connections(out)
            if fused:
                assert life is not None
                ids = out.column("connection").field("connection_id").to_pylist()
                _write_all(life, fused.closed(cid, ids, out.column("meta").to_pylist()))
        elif kind == "error":
            assert cid is not None
            writers["decode_errors"].write(cid, error_rows(out))
            counts[cid].add_errors(out)
        elif out.num_rows:
            yield out
    files = [f for writer in writers.values() for f in writer.close()]
    if fused:
        assert life is not None and lifecycle_staged is not None  # fused is made only with both
        _write_all(life, fused.finish())
        files += [f for _, f in life.close()]
        for cid, why in fused.failed.items():
            yield pipeline.out_batch(schema, LIFECYCLE_FAILED, cid, 1, meta=pa.array([why], pa.string()))
    release_memory()
    for f in files:
        yield pipeline.out_batch(schema, STAGED_FILE, f.unit, 1, meta=pa.array([f.to_meta()], pa.string()))
    for cid, c in counts.items():
        yield pipeline.out_batch(schema, TASK_COUNTS, cid, 1, meta=pa.array([c.to_meta()], pa.string()))


DIRECT_SCHEMA_FIELDS = (("task", "int32"), ("plan", "string"))  # a direct task's row: its number, its flows as JSON


def direct_packets(batches, options: pipeline.Options, read_bytes=None, progress=None):
    """The direct path's stage-1 stand-in: for each task row (``plan``: a JSON list of captures, each with its path
    and the directional flows the task decodes), the packets of those flows as ``PACKETS_OUT_SCHEMA`` batches,
    sorted per capture as the shuffle path sorts a partition; ``headscan.read_flows`` reads them from the mapped file.
    ``progress`` (a ``fused.TaskProgress``): each capture's planned packets (the plan's flows), and those read."""
    import pyarrow as pa

    for batch in batches:
        items = [item for row in batch.to_pylist() for item in json.loads(row["plan"])]
        if progress is not None:
            for item in items:  # every capture's plan first: a task reads its captures one after the other
                progress.plan(item["capture_id"], sum(int(d[6]) for d in item["dflows"].values()))
        for item in items:
            dflows = {int(k): v for k, v in item["dflows"].items()}
            for packets in headscan.read_flows(item["path"], item["capture_id"], dflows, options.batch_rows):
                n = packets.num_rows
                if progress is not None:
                    progress.add(item["capture_id"], n)
                yield pa.RecordBatch.from_arrays(
                    [*packets.columns, repeated("packet", n), pa.nulls(n, pa.string())],
                    schema=pipeline.PACKETS_OUT_SCHEMA)
            if read_bytes is not None:
                read_bytes.add(item["bytes"])


def _direct_decode(batches, decode, options: pipeline.Options, read_bytes=None):
    """A direct task: its flows' packets (``direct_packets``) decoded and staged (``decode``: ``decode_and_stage``),
    the fused lifecycle told how much of each capture the task has read (``fused.TaskProgress``)."""
    from amqplens.lifecycle.fused import TaskProgress

    progress = TaskProgress()
    return decode(direct_packets(batches, options, read_bytes, progress), progress=progress)


def direct_scans(spark, conf: Config, files: list[CaptureFile], prescan: _Prescan | None = None) -> dict[str, "headscan.FileScan"]:
    """The captures that take the direct path (``capture.direct``), by id, with the driver's scan of each (the one
    ``prescan`` started, where it did)."""
    if not _direct_may(spark, conf):
        return {}
    scans = {}
    for f in files:
        try:
            scan = prescan.plan(f.path) if prescan is not None else headscan.plan(f.path)
        except OSError:  # gone or unreadable: the shuffle path's reader says so in the captures row
            continue
        if scan is None:
            log.info("capture.direct: numba does not import; the captures take the shuffle path")
            return {}
        if scan.clean:
            scans[f.capture_id] = scan
        else:
            log.info("capture %s: %s stops the header scan; read through the shuffle path", f.capture_id[:12], scan.why)
    return scans


# What a connection costs a direct task besides its bytes, counted in bytes of a long connection: its handshake and
# close through the Python decoder, its builders, windows and lifecycle group. Measured on the 2 GB load capture
# (tools.gen_load, 10,000 short connections of about 14 KB beside 8 long ones): planned by bytes alone, the task with
# the short connections took 50.5 s and the other 40.3 s for the same bytes, about 1 ms a connection, the time a long
# connection takes for about 25 KB.
FLOW_COST_BYTES = 25_000


def direct_plan(scans: dict[str, "headscan.FileScan"], tasks: int, whole_below: int = 0) -> list[tuple[int, str]]:
    """The direct tasks' rows: every flow of every capture in ``scans`` onto ``tasks`` bins, heaviest first onto the
    least loaded; empty bins are left out. Rows grow with flows (one JSON entry per directional flow). A flow weighs
    its bytes and ``FLOW_COST_BYTES`` (what a connection's fixed work costs, counted in bytes of a long one).

    With many captures (more than four per task), a capture of at most ``whole_below`` bytes goes whole to one
    task: each task then opens and scans only its own captures' files, not nearly every file (299 small captures,
    8 connections each, had both tasks scan all 299)."""
    many = len(scans) > 4 * tasks
    items = []
    for cid, scan in scans.items():
        flows = list(scan.flows())
        total = sum(flow.bytes for flow in flows)
        if many and total <= whole_below:
            items.append((total + FLOW_COST_BYTES * len(flows), (cid, flows)))
        else:
            items += [(flow.bytes + FLOW_COST_BYTES, (cid, [flow])) for flow in flows]
    rows = []
    for i, placed in enumerate(headscan.bins(items, tasks)):
        per: dict[str, dict] = {}
        for cid, flows in placed:
            scan = scans[cid]
            item = per.setdefault(cid, {"capture_id": cid, "path": scan.path, "dflows": {}, "bytes": 0})
            for flow in flows:
                for d in flow.dflows:
                    item["dflows"][d] = scan.dflows[d]
                item["bytes"] += flow.bytes
        if per:
            rows.append((i, json.dumps(list(per.values()))))
    return rows


def _write_all(writers: "lifecycle.LifecycleWriters", batches) -> None:
    for out in batches:
        writers.write(out)


def run(spark, conf: Config, inputs: list[str], run_id: str | None = None) -> IngestResult:
    """Ingest the capture files of ``inputs`` not done yet (or failed before); a capture that raises fails alone.
    A file that is a broker log is left alone (``IngestResult.not_captures``)."""
    files, logs = [], {}
    prescan = _Prescan(spark, conf)
    for f in capture_files(inputs, conf["inputs.roots"], on_file=prescan.start):
        kind = _log_format(f.path)
        if kind is None:
            files.append(f)
        else:
            logs[f.path] = f"a broker log ({kind}), not a capture: give it with --logs"
            log.warning("%s: %s; left alone", f.path, logs[f.path])
    try:
        result = run_files(spark, conf, files, run_id, prescan)
    finally:
        prescan.close()
    result.not_captures = logs
    return result


class _Prescan:
    """The driver's header scans (``headscan.plan``) started as ``capture_files`` lists each file, in a thread of
    their own, so that each runs beside the file's hash (both read the whole file; the scan's walk and hashlib let go
    of the GIL): on the 2 GB load capture the two took 1.2 and 1.3 s one after the other. Only where the direct path
    may apply (``direct_scans``)."""

    def __init__(self, spark, conf: Config) -> None:
        self.futures: dict[str, concurrent.futures.Future] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="headscan") if _direct_may(spark, conf) else None

    def start(self, path: str) -> None:
        if self.pool is not None and path not in self.futures:
            self.futures[path] = self.pool.submit(headscan.plan, path)

    def plan(self, path: str) -> "headscan.FileScan | None":
        """The scan of ``path``: the one started for it, else made now. Raises OSError as ``headscan.plan`` does."""
        future = self.futures.pop(path, None)
        return future.result() if future is not None else headscan.plan(path)

    def close(self) -> None:
        if self.pool is not None:
            for future in self.futures.values():  # scans of files not ingested (skipped, logs): not waited for
                future.cancel()
            self.pool.shutdown(wait=True)


def _direct_may(spark, conf: Config) -> bool:
    from amqplens.session import direct_path_may

    return direct_path_may(conf, spark.sparkContext.master)


def _log_format(path: str) -> str | None:
    """The broker-log format a file that is not a packet capture opens with (None: not a log, or a capture)."""
    try:
        with open(path, "rb") as f:
            head = f.read(LOG_SNIFF_BYTES)
    except OSError:  # gone or unreadable since it was listed: the capture's row says failed
        return None
    return None if sniff_head(head) is not None else log_sniff(head)


def run_files(spark, conf: Config, files: list[CaptureFile], run_id: str | None = None,
              prescan: _Prescan | None = None) -> IngestResult:
    """``run`` on captures already listed."""
    run_id = run_id or uuid.uuid4().hex[:12]
    store = TableStore(spark, conf["lake.root"], staging_max_age_hours=conf["lake.staging_max_age_hours"],
                       pack=conf["lake.pack_small_units"])
    options = options_from(conf)
    keys = read_keylog(conf)
    fp = fingerprint(dataclasses.replace(options, decode_options=dataclasses.replace(options.decode_options, tls_keys=keys)))
    if keys:  # read once here; the tasks get the secrets through a broadcast, nothing else carries them
        options = dataclasses.replace(options, decode_options=dataclasses.replace(
            options.decode_options, tls_keys=spark.sparkContext.broadcast(keys)))
    apps = {f.capture_id: app_id(f.capture_id, fp) for f in files}
    units, skipped = isolation.plan(store, apps, run_id)
    for cid in skipped:
        log.info("capture %s already ingested with %s; skipped", cid[:12], fp)
    if not units:
        return IngestResult(run_id, [], skipped)
    by_id = {f.capture_id: f for f in files if f.capture_id in units}
    fused: list[str] = []  # captures whose lifecycle tables _ingest committed
    by_other: list[str] = []  # captures whose rows another run committed first

    def ingest(ids):
        return _ingest(spark, conf, store, [by_id[cid] for cid in ids], units, options, run_id, fp, fused, by_other,
                       prescan)

    done = isolation.isolated(JOB, list(by_id), ingest, lambda cid: ingest([cid]))
    stored = {cid for cid in done.failed if any(store.rows(name, [cid]) for name in (*STAGED_TABLES, *lifecycle.TABLES))}
    unmarked = {cid: (by_id[cid].path, done.failed[cid]) for cid in stored}
    failed = {cid: e for cid, e in done.failed.items() if cid not in stored}
    isolation.mark_failed(spark, store, failed, apps, run_id,
                          rows={cid: _capture_row(by_id[cid], None, EPOCH_DAY, CaptureCounts(), 0, run_id, fp) for cid in failed})
    return IngestResult(run_id, done.results, skipped, failed, [cid for cid in fused if cid not in done.failed],
                        by_other=by_other, unmarked=unmarked)


def _ingest(spark, conf: Config, store: TableStore, todo: list[CaptureFile], units: dict[str, str], options, run_id: str,
            fp: str, fused: list[str], by_other: list[str] | None = None, prescan: _Prescan | None = None) -> list[dict]:
    """The captures ``todo`` through every stage of the job, written under ``units``; returns their captures rows.
    With ``lifecycle.fused``, also their lifecycle tables; ``fused`` gets the ids of the captures they were committed for."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    units = {f.capture_id: units[f.capture_id] for f in todo}
    scans = direct_scans(spark, conf, todo, prescan)  # the captures read without a packet shuffle (capture.direct)
    shuffled = [f for f in todo if f.capture_id not in scans]
    split_rows = _split_rows(shuffled, conf["capture.split_size"], conf["capture.min_split_size"],
                             spark.sparkContext.defaultParallelism)
    read_bytes = progress.counter(spark, "bytes read")
    # small captures read directly share a file per table and task (their dates known from the driver's scan): a file
    # per capture and table made 300 small captures 1,800 files the later stages each read many times
    small = [f.capture_id for f in todo if f.capture_id in scans and f.size <= conf["capture.min_split_size"]]
    pack = {cid: f"capture_date={_capture_date(scans[cid].stats).isoformat()}" for cid in small} if len(small) > 1 else {}
    staged = {name: store.stage(name, run_id, pack=pack) for name in STAGED_TABLES}
    lifecycle_staged = lifecycle.stage_tables(store, run_id, pack=pack) if conf["lifecycle.fused"] else {}
    decode = functools.partial(decode_and_stage, options=options, staged=staged,
                               frames_decoded=progress.counter(spark, "frames"), lifecycle_staged=lifecycle_staged,
                               max_held_frames=conf["lifecycle.fused_max_held_frames"],
                               lifecycle_compiled=conf["lifecycle.compiled"] != "off",
                               chunk_frames=conf["lifecycle.chunk_frames"])
    flows = None
    if split_rows:
        tasks = pack_splits(split_rows, conf["capture.min_split_size"], spark.sparkContext.defaultParallelism)
        # rows: the split rows; a partition per task of pack_splits (flatMap keeps each group in its partition)
        splits = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(lambda group: group).toDF(
            from_arrow_schema(pipeline.SPLITS_SCHEMA)
        )
        packets = splits.mapInArrow(
            functools.partial(read_counted_splits, options=options, read_bytes=read_bytes),
            from_arrow_schema(pipeline.PACKETS_OUT_SCHEMA),
        )
        parts = shuffle_partitions(spark, conf)
        # many small captures (rotated files, a capture cut in pieces): by capture, so that a task writes one file per
        # capture and table instead of every task one per capture it holds flows of (4 x 300 x 6 files for 300 captures)
        by_capture = len(shuffled) > 2 * parts and all(f.size <= conf["capture.min_split_size"] for f in shuffled)
        flows = (
            packets.repartition(parts, "capture_id" if by_capture else "flow_key")
            .sortWithinPartitions("capture_id", "flow_key", "ts_us", "record_offset")
            .mapInArrow(decode, from_arrow_schema(options.flows_schema))
        )
    direct_rows = direct_plan(scans, spark.sparkContext.defaultParallelism, conf["capture.min_split_size"])
    if direct_rows:
        # one task per row, each decoding its flows of the whole file: no packet crosses into the JVM. The rows as a
        # local relation (Spark's LocalTableScan: a partition per row when there are no more rows than cores), not
        # parallelize(...).toDF, whose conversion ran a Python worker of its own in each task beside the decoder's
        # (the 63 KB and 1 MB captures' ingest: 5.6-9.4 -> 4.3-7.3 s, alternated runs)
        direct_tasks = spark.createDataFrame(pa.table({"task": pa.array([r[0] for r in direct_rows], pa.int32()),
                                                       "plan": pa.array([r[1] for r in direct_rows], pa.string())}))
        direct = direct_tasks.mapInArrow(functools.partial(_direct_decode, decode=decode, options=options, read_bytes=read_bytes),
                                         from_arrow_schema(options.flows_schema))
        flows = direct if flows is None else flows.unionByName(direct)
    try:
        # the one Spark job: the tasks wrote the tables, what comes back is a few rows per task
        meta_rows = flows.select("kind", "capture_id", "meta").collect() if flows is not None else []
        per_capture = _merge_stats(r for r in meta_rows if r["kind"] == "split_stats")
        per_capture.update({cid: scan.stats for cid, scan in scans.items()})  # the driver's scan read every record
        counts = _merge_counts(r for r in meta_rows if r["kind"] == TASK_COUNTS)
        files = [StagedFile.from_meta(r["meta"]) for r in meta_rows if r["kind"] == STAGED_FILE]
        dates = {f.capture_id: _capture_date(per_capture.get(f.capture_id)) for f in todo}
        partitions = {cid: {"capture_date": d.isoformat()} for cid, d in dates.items()}
        n_splits = collections.Counter(row[0] for row in split_rows)  # 0 for a capture read directly
        capture_rows = [_capture_row(f, per_capture.get(f.capture_id), dates[f.capture_id],
                                     counts.get(f.capture_id, CaptureCounts()), n_splits[f.capture_id], run_id, fp) for f in todo]
        lifecycle_units = {}
        if lifecycle_staged:
            left = {r["capture_id"]: r["meta"] for r in meta_rows if r["kind"] == LIFECYCLE_FAILED}
            for cid, why in left.items():
                log.warning("capture %s: the fused lifecycle raised (%s); the lifecycle job derives it", cid[:12], why)
            # as the run's lifecycle stage, which leaves out the captures whose row says failed (nothing readable)
            lifecycle_units = {r["capture_id"]: lifecycle.app_id(r["capture_id"], fp) for r in capture_rows
                               if r["status"] != "failed" and r["capture_id"] not in left}
        if not _commit(store, staged, lifecycle_staged, files, units, lifecycle_units, partitions, capture_rows, run_id):
            (by_other if by_other is not None else []).extend(r["capture_id"] for r in capture_rows)
        fused += list(lifecycle_units)
    finally:
        for table_staged in (*staged.values(), *lifecycle_staged.values()):
            store.discard_staged(table_staged)
    return capture_rows


def _commit(store: TableStore, staged, lifecycle_staged, files: list[StagedFile], units: dict[str, str],
            lifecycle_units: dict[str, str], partitions, capture_rows: list[dict], run_id: str) -> bool:
    """The commits of one ingest, in this order: connections, frames, decode_errors; with the fused lifecycle
    deliveries, flow_events, request_responses (under the lifecycle job's transaction ids); captures last.

    Each commit is skipped for the captures its table already holds, and the captures row marks a capture as
    ingested (``isolation.plan``), so a run that dies between two commits is redone by the next run, which commits
    only what is missing: the lifecycle tables too, before the captures row that would make the ingest skip the
    capture. The lifecycle job's mark, request_responses, comes after the other two lifecycle tables, as in the job;
    a capture whose lifecycle tables are left uncommitted (``lifecycle.fused`` off on the rerun, or the fused
    machines raised) is derived by the lifecycle job from the committed frames.

    Returns whether the captures rows were committed by this run (False: another run at the same time did it first).
    """
    for name in STAGED_TABLES:
        store.commit_staged(staged[name], [f for f in files if f.table == name], units=units, run_id=run_id,
                            partitions=partitions)
    if lifecycle_units:
        by_kind = {kind: [f for f in files if f.table == s.table] for kind, s in lifecycle_staged.items()}
        lifecycle.commit(store, lifecycle_staged, by_kind, units=lifecycle_units, partitions=partitions, run_id=run_id)
    return store.write_rows("captures", capture_rows, units=units, run_id=run_id)


def _merge_counts(rows) -> dict[str, CaptureCounts]:
    merged: dict[str, CaptureCounts] = collections.defaultdict(CaptureCounts)
    for row in rows:
        merged[row["capture_id"]].merge(CaptureCounts.from_meta(row["meta"]))
    return merged


def _merge_stats(rows) -> dict[str, pipeline.SplitStats]:
    merged: dict[str, pipeline.SplitStats] = {}
    for row in rows:
        s = pipeline.stats_from_json(row["meta"])
        merged[row["capture_id"]] = merged[row["capture_id"]].merge(s) if row["capture_id"] in merged else s
    return merged


def _capture_date(stats) -> dt.date:
    return clock.utc_date(None if stats is None else stats.first_ts_us)


def _sniffed(path: str) -> str | None:
    try:
        return sniff_format(path)
    except OSError:  # gone or unreadable since it was listed: the row says failed, not the job
        return None


def _capture_row(f: CaptureFile, stats, date: dt.date, counts: CaptureCounts, splits: int, run_id: str, fp: str) -> dict:
    ts = clock.utc_datetime
    fmt = stats.format if stats and stats.format else (_sniffed(f.path) or "unknown")
    records = stats.records if stats else 0
    n_errors = counts.capture_errors
    if records == 0 and not n_errors and f.size > 0 and fmt in ("pcap", "pcapng"):
        status = "empty"  # its headers read cleanly and hold no packet (a quiet interval): a result, not a failure
    elif records == 0 and (n_errors or f.size > 0):
        status = "failed"
    elif n_errors:
        status = "partial"
    else:
        status = "ok"
    error = counts.first_error if status not in ("ok", "empty") else None
    if status == "failed" and not error:
        error = "no packet records could be read"
    if f.size == 0:
        status, error = "failed", "the file is empty"
    return {
        "capture_id": f.capture_id,
        "capture_date": date,
        "path": f.path,
        "size_bytes": f.size,
        "format": fmt,
        "link_types": sorted(stats.link_types) if stats else [],
        "splits": splits,
        "packets_total": records,
        "packets_tcp": stats.tcp_packets if stats else 0,
        "packets_selected": counts.packets_selected,
        "ip_fragments": stats.ip_fragments if stats else 0,
        "connections": counts.connections,
        "capture_errors": n_errors,
        "first_ts": ts(stats.first_ts_us) if stats else None,
        "last_ts": ts(stats.last_ts_us) if stats else None,
        "status": status,
        "error": error,
        "run_id": run_id,
        "decoder_version": fp,
    }
