"""The batch functions the Spark jobs call inside ``mapInArrow``.

They are plain functions from an iterator of Arrow record batches to an
iterator of Arrow record batches, so a unit test runs them without a JVM.

Stage 1, ``read_splits``: one input row per byte-range split of a capture
file -> packet rows (``PACKETS_OUT_SCHEMA``), plus one ``split_stats`` row per
split and one ``capture_error`` row per container problem, both with
``flow_key`` null and their content as JSON in ``meta``.

Stage 2, ``decode_flows``: packets repartitioned by flow_key and sorted by
(flow_key, ts_us, record_offset) -> one row per output record with ``kind``
saying which struct column holds it (``connection``, ``error``), plus the
``split_stats`` rows passed through. A ``connection`` row's ``meta`` says when
the connection's frames are all out (``frames_through``, see ``_FlowDecoder``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.capture import read_split
from amqplens.decode.common.arrow import repeated, to_struct_array, use_task_memory_pool  # noqa: F401  (the batch functions' names)
from amqplens.decode.common.rows import STAGE_FRAME
from amqplens.decode.common.reports import ConnectionsClosed
from amqplens.decode.codecs import DecodeOptions, DecodingConsumer
from amqplens.decode.capture.records import PACKET_SCHEMA, CaptureErrorRecord, SplitStats
from amqplens.decode.tcp import TcpReassembler
from amqplens.decode.tcp.records import ConnectionRecord, GapRecord
from amqplens.decode.v0_9_1.hotpath import FrameBatch, compiled_enabled, run_kernel
from amqplens.decode.v1_0.hotpath import Frame10Batch

SPLITS_SCHEMA = pa.schema(
    [("capture_id", pa.string()), ("path", pa.string()), ("start", pa.int64()), ("end", pa.int64()), ("split_index", pa.int32())]
)

PACKETS_OUT_SCHEMA = PACKET_SCHEMA.append(pa.field("kind", pa.string())).append(pa.field("meta", pa.string()))

# What a row of the batch functions (and of the ingest's decode task) is, in its ``kind`` column: stage 1 gives packet,
# capture_error and split_stats rows; stage 2 connection, frame and error rows and passes split_stats on; the
# ingest's task turns the frame, connection and error rows into files and reports them (staged_file, task_counts,
# lifecycle_failed: amqplens/jobs/ingest_captures.py).
RowKind = typing.Literal["packet", "capture_error", "split_stats", "connection", "frame", "error", "staged_file",
                         "task_counts", "lifecycle_failed"]


def _arrow_type(annotation) -> pa.DataType:
    base = {str: pa.string(), int: pa.int64(), bool: pa.bool_(), bytes: pa.binary()}
    if annotation in base:
        return base[annotation]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return base[args[0]]


def _struct_of(cls) -> pa.StructType:
    hints = typing.get_type_hints(cls)
    return pa.struct([pa.field(f.name, _arrow_type(hints[f.name])) for f in dataclasses.fields(cls)])



@dataclasses.dataclass
class ErrorRow:
    """One decode_errors row before the job adds capture-level columns."""

    error_id: str
    connection_id: str | None
    direction: str | None
    stage: str  # capture | tcp | codec | frame
    offset: int
    length: int
    reason: str
    detail: str | None
    ts_us: int | None
    raw: bytes | None
    raw_length: int
    raw_sha256: str | None


CONNECTION_STRUCT = _struct_of(ConnectionRecord)
ERROR_STRUCT = _struct_of(ErrorRow)

def flows_out_schema(frame_struct: pa.StructType, facts_struct: pa.StructType) -> pa.Schema:
    """Stage 2's output. The frame and facts struct types come from the caller (the table contracts)."""
    return pa.schema(
        [
            ("kind", pa.string()),
            ("capture_id", pa.string()),
            ("meta", pa.string()),
            ("connection", CONNECTION_STRUCT),
            ("facts", facts_struct),
            ("error", ERROR_STRUCT),
            ("frame", frame_struct),
        ]
    )


_EMPTY = pa.struct([pa.field("none", pa.null())])


@dataclasses.dataclass(frozen=True)
class Options:
    batch_rows: int = 8192
    amqp_ports: tuple[int, ...] = (5672,)
    tls_ports: tuple[int, ...] = (5671,)
    sniff: bool = True
    max_ooo_bytes: int = 4 << 20
    history_bytes: int = 256 << 10
    port_reuse_idle_s: int = 60
    max_error_bytes: int = 4096
    decode: bool = True  # run the AMQP codecs on the streams (False: transport only)
    decode_options: DecodeOptions = DecodeOptions()
    # Arrow struct types of frame rows and connection facts, given by the job from amqplens/contracts/.
    frame_struct: pa.StructType = _EMPTY
    facts_struct: pa.StructType = _EMPTY

    @property
    def flows_schema(self) -> pa.Schema:
        return flows_out_schema(self.frame_struct, self.facts_struct)


def error_id(capture_id: str, connection_id: str | None, direction: str | None, stage: str, offset: int, reason: str) -> str:
    """decode_errors' key. The reason is part of it: one damaged record can be wrong in two ways at one offset (an
    interface no IDB defines and an impossible time), each its own row."""
    key = f"{capture_id}|{connection_id or ''}|{direction or ''}|{stage}|{offset}|{reason}"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


# ----------------------------------------------------------------- stage 1


def _meta_batch(capture_id: str, kind: RowKind, metas: list[str]) -> pa.RecordBatch:
    n = len(metas)
    cols = [pa.nulls(n, f.type) for f in PACKET_SCHEMA]
    cols[0] = repeated(capture_id, n)
    cols.append(repeated(kind, n))
    cols.append(pa.array(metas, pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=PACKETS_OUT_SCHEMA)


def stats_to_json(stats: SplitStats, split_index: int) -> str:
    d = dataclasses.asdict(stats)
    d["link_types"] = sorted(stats.link_types)
    d["split_index"] = split_index
    return json.dumps(d)


def stats_from_json(text: str) -> SplitStats:
    d = json.loads(text)
    d.pop("split_index", None)
    d["link_types"] = set(d["link_types"])
    return SplitStats(**d)


def capture_error_to_json(err: CaptureErrorRecord, max_error_bytes: int) -> str:
    raw = err.raw or b""
    return json.dumps(
        {
            "offset": err.offset,
            "length": err.length,
            "reason": err.reason,
            "detail": err.detail,
            "raw_hex": raw[:max_error_bytes].hex(),
            "raw_sha256": hashlib.sha256(raw).hexdigest() if raw else None,
            "raw_length": len(raw),
        }
    )


def read_splits(batches: Iterable[pa.RecordBatch], options: Options = Options()) -> Iterator[pa.RecordBatch]:
    use_task_memory_pool()
    for batch in batches:
        for split in batch.to_pylist():
            reader = read_split(
                split["path"], split["capture_id"], split["start"], split["end"],
                batch_rows=options.batch_rows, max_error_bytes=options.max_error_bytes,
            )
            for cols in reader:
                n = len(cols["record_offset"])
                if n:
                    arrays = [pa.array(cols[f.name], f.type) for f in PACKET_SCHEMA]
                    arrays += [repeated("packet", n), pa.nulls(n, pa.string())]
                    yield pa.RecordBatch.from_arrays(arrays, schema=PACKETS_OUT_SCHEMA)
            cid = split["capture_id"]
            errors = [capture_error_to_json(e, options.max_error_bytes) for e in reader.errors]
            if errors:
                yield _meta_batch(cid, "capture_error", errors)
            yield _meta_batch(cid, "split_stats", [stats_to_json(reader.stats, split["split_index"])])


# ----------------------------------------------------------------- stage 2


def frame_array(parts: list, typ: pa.StructType) -> pa.Array:
    """Frame parts (lists of row dicts, the compiled paths' ``FrameBatch`` (0-9-1) and ``Frame10Batch`` (1.0)) as
    one struct array: one conversion for them all, not one per connection (a run of 1.0 parts and a run of the
    others each converted at once, in their order)."""
    if all(isinstance(p, list) for p in parts):
        return to_struct_array([r for p in parts for r in p], typ)
    if not any(isinstance(p, Frame10Batch) for p in parts):
        return FrameBatch.combine(parts).to_struct(typ, to_struct_array)
    runs: list[list] = []
    for p in parts:  # lists go with the 1.0 batches (either kind takes them): runs of 0-9-1 batches apart
        kind = isinstance(p, FrameBatch)
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(p)
        else:
            runs.append([kind, [p]])
    arrays = [FrameBatch.combine(ps).to_struct(typ, to_struct_array) if kind
              else Frame10Batch.combine(ps).to_struct(typ, to_struct_array) for kind, ps in runs]
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _gap_row(capture_id: str, gap: GapRecord) -> dict:
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, gap.connection_id, gap.direction, "tcp", gap.offset, f"tcp_{gap.reason}"),
            connection_id=gap.connection_id, direction=gap.direction, stage="tcp", offset=gap.offset,
            length=gap.length, reason=f"tcp_{gap.reason}", detail=f"{gap.length} stream bytes were not captured ({gap.reason})",
            ts_us=gap.ts_us, raw=b"", raw_length=gap.length, raw_sha256=None,
        )
    )


def _codec_error_row(capture_id: str, e: dict, stage: str = "codec") -> dict:
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, e["connection_id"], e["direction"], stage, e["stream_offset"], e["reason"]),
            connection_id=e["connection_id"], direction=e["direction"], stage=stage, offset=e["stream_offset"],
            length=e["length"], reason=e["reason"], detail=e["detail"], ts_us=e["ts_us"], raw=e["raw"],
            raw_length=e["raw_length"], raw_sha256=e["raw_sha256"],
        )
    )


def _accounting_row(capture_id: str, conn: ConnectionRecord, direction: str, facts: dict) -> dict | None:
    """The nothing-is-lost check: frame + codec error + gap bytes (+ TLS record overhead) must equal the stream bytes."""
    stream = conn.bytes_to_server if direction == "to_server" else conn.bytes_to_client
    covered = sum(facts.get(f"{k}_bytes_{direction}") or 0 for k in ("frame", "error", "gap", "tls_overhead"))
    if covered == stream:
        return None
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, conn.connection_id, direction, "accounting", 0, "byte_accounting_mismatch"),
            connection_id=conn.connection_id, direction=direction, stage="codec", offset=0, length=0,
            reason="byte_accounting_mismatch",
            detail=f"frames+errors+gaps cover {covered} bytes but the stream has {stream}",
            ts_us=conn.start_ts_us, raw=b"", raw_length=0, raw_sha256=None,
        )
    )


def _capture_error_row(capture_id: str, meta: str) -> dict:
    d = json.loads(meta)
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, None, None, "capture", d["offset"], d["reason"]),
            connection_id=None, direction=None, stage="capture", offset=d["offset"], length=d["length"],
            reason=d["reason"], detail=d["detail"], ts_us=None, raw=bytes.fromhex(d["raw_hex"]),
            raw_length=d["raw_length"], raw_sha256=d["raw_sha256"],
        )
    )


def out_batch(schema: pa.Schema, kind: RowKind, capture_id: str, n: int, **columns) -> pa.RecordBatch:
    """A stage-2 batch of one kind: the named struct columns filled, the others null."""
    arrays = [repeated(kind, n), repeated(capture_id, n)]
    for field in list(schema)[2:]:
        values = columns.get(field.name)
        arrays.append(pa.nulls(n, field.type) if values is None else values)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _FlowDecoder:
    """TCP reassembly plus the codecs for one capture's packets; yields output batches."""

    def __init__(self, capture_id: str, options: Options):
        self.capture_id = capture_id
        self.options = options
        self.schema = options.flows_schema
        self.live: dict[str, DecodingConsumer] = {}
        self.facts: dict[str, dict] = {}
        self.frames: list = []  # parts in wire order: lists of row dicts, the compiled path's FrameBatch, struct arrays
        self.frame_rows = 0
        self.frames_total = 0  # frame rows collected so far (emitted, or held in self.frames)
        self.errors: list[dict] = []
        self.reassembler = TcpReassembler(
            capture_id, amqp_ports=options.amqp_ports, tls_ports=options.tls_ports, sniff=options.sniff,
            max_ooo_bytes=options.max_ooo_bytes, history_bytes=options.history_bytes, reuse_idle_us=options.port_reuse_idle_s * 1_000_000,
            consumer_factory=self._consumer if options.decode else None,
            runs=run_kernel() if compiled_enabled(options.decode_options.compiled) else None,
        )

    def _consumer(self, info) -> DecodingConsumer | None:
        c = DecodingConsumer(info.connection_id, self.options.decode_options, self._closed, tls_port=info.tls)
        self.live[info.connection_id] = c
        return c

    def _closed(self, consumer: DecodingConsumer, conn: ConnectionRecord) -> None:
        self._collect(consumer)
        self.facts[conn.connection_id] = consumer.connection_facts()
        self.live.pop(conn.connection_id, None)

    def _collect(self, consumer: DecodingConsumer) -> None:
        for part in consumer.drain_frame_parts():
            self.frames.append(part)
            self.frame_rows += len(part)
            self.frames_total += len(part)
        self.errors += [_codec_error_row(self.capture_id, e) for e in consumer.drain_errors()]
        self.errors += [_codec_error_row(self.capture_id, e, STAGE_FRAME) for e in consumer.drain_frame_errors()]

    def batch(self, kind: RowKind, n: int, **columns) -> pa.RecordBatch:
        return out_batch(self.schema, kind, self.capture_id, n, **columns)

    def feed(self, columns) -> Iterator[pa.RecordBatch]:
        self.reassembler.feed_columns(columns)
        yield from self.drain(final=False)

    def finish(self) -> Iterator[pa.RecordBatch]:
        self.reassembler.finish()
        yield from self.drain(final=True)

    def drain(self, final: bool) -> Iterator[pa.RecordBatch]:
        """Connections, frames and errors decoded so far (all of them when ``final``).

        A connection's batch comes before some of its frames (frames leave in
        batches of at most ``batch_rows``), so its ``meta`` carries a ``ConnectionsClosed`` with ``frames_through``:
        the count of this capture's frame rows, in the order the frame batches
        give them, by which all of the connection's frames are out. A consumer
        that counts the capture's frame rows knows then that the connection is
        whole (the fused lifecycle, ``amqplens/lifecycle/fused.py``).
        """
        for consumer in list(self.live.values()):
            self._collect(consumer)
        conns = self.reassembler.drain_connections()
        if conns:
            facts = [self.facts.pop(c.connection_id, None) for c in conns]
            for c, f in zip(conns, facts):
                if f:
                    for d in ("to_server", "to_client"):
                        row = _accounting_row(self.capture_id, c, d, f)
                        if row:
                            self.errors.append(row)
            yield self.batch(
                "connection", len(conns),
                meta=pa.array([ConnectionsClosed(self.frames_total).to_meta()] * len(conns), pa.string()),
                # the records' own field dicts (plain values): ``dataclasses.asdict`` deep-copied each field
                connection=pa.array([vars(c) for c in conns], CONNECTION_STRUCT),
                facts=to_struct_array([f or {} for f in facts], self.options.facts_struct),
            )
        gaps = [_gap_row(self.capture_id, g) for g in self.reassembler.drain_gaps()]
        self.errors += gaps
        limit = self.options.batch_rows
        if self.frame_rows and (final or self.frame_rows >= limit):
            # every row converted leaves now, the last batch shorter: a rest kept for the next drain was copied
            # again with the next rows (concat_arrays), once more per frame; the writers group rows themselves
            whole = frame_array(self.frames, self.options.frame_struct)
            for start in range(0, len(whole), limit):
                chunk = whole.slice(start, limit)
                yield self.batch("frame", len(chunk), frame=chunk)
            self.frames, self.frame_rows = [], 0
        if self.errors and (final or len(self.errors) >= limit or conns):
            chunk, self.errors = self.errors, []
            yield self.batch("error", len(chunk), error=pa.array(chunk, ERROR_STRUCT))


def decode_flows(batches: Iterable[pa.RecordBatch], options: Options = Options()) -> Iterator[pa.RecordBatch]:
    """Reassemble TCP per flow, decode AMQP, emit connections, frames, errors and the capture rows passed through."""
    use_task_memory_pool()
    decoders: dict[str, _FlowDecoder] = {}
    schema = options.flows_schema

    def passthrough(kind: str, cid: str, meta: str) -> pa.RecordBatch:
        if kind == "capture_error":
            return out_batch(schema, "error", cid, 1, error=pa.array([_capture_error_row(cid, meta)], ERROR_STRUCT))
        return out_batch(schema, typing.cast(RowKind, kind), cid, 1, meta=pa.array([meta], pa.string()))  # stage 1's kind

    for batch in batches:
        if batch.num_rows == 0:
            continue
        packets_mask = pc.equal(batch.column("kind"), "packet")
        if pc.all(packets_mask, skip_nulls=False).as_py():  # the common batch: packets only, not copied by a filter that keeps them all
            packets = batch
        else:
            others = batch.filter(pc.invert(packets_mask))
            for row in others.select(["kind", "capture_id", "meta"]).to_pylist():
                yield passthrough(row["kind"], row["capture_id"], row["meta"])
            packets = batch.filter(packets_mask)
        if packets.num_rows == 0:
            continue
        # A partition may hold flows of several captures; each capture's flows are contiguous (sort order).
        cids = packets.column("capture_id")
        unique = pc.unique(cids).to_pylist()
        for cid in unique:
            part = packets if len(unique) == 1 else packets.filter(pc.equal(cids, cid))
            d = decoders.get(cid)
            if d is None:
                d = decoders[cid] = _FlowDecoder(cid, options)
            yield from d.feed(part)  # the reassembler converts only the columns it reads
    for d in decoders.values():
        yield from d.finish()
