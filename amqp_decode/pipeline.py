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
``split_stats`` rows passed through.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from amqp_decode.capture import read_split
from amqp_decode.capture.records import PACKET_SCHEMA, CaptureErrorRecord, SplitStats
from amqp_decode.tcp import TcpReassembler
from amqp_decode.tcp.records import ConnectionRecord, GapRecord

SPLITS_SCHEMA = pa.schema(
    [("capture_id", pa.string()), ("path", pa.string()), ("start", pa.int64()), ("end", pa.int64()), ("split_index", pa.int32())]
)

PACKETS_OUT_SCHEMA = PACKET_SCHEMA.append(pa.field("kind", pa.string())).append(pa.field("meta", pa.string()))


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
    stage: str  # capture | tcp | codec
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

FLOWS_OUT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("capture_id", pa.string()),
        ("meta", pa.string()),
        ("connection", CONNECTION_STRUCT),
        ("error", ERROR_STRUCT),
    ]
)


@dataclasses.dataclass(frozen=True)
class Options:
    batch_rows: int = 8192
    amqp_ports: tuple[int, ...] = (5672,)
    tls_ports: tuple[int, ...] = (5671,)
    sniff: bool = True
    max_ooo_bytes: int = 4 << 20
    port_reuse_idle_s: int = 60
    max_error_bytes: int = 4096


def error_id(capture_id: str, connection_id: str | None, direction: str | None, stage: str, offset: int) -> str:
    key = f"{capture_id}|{connection_id or ''}|{direction or ''}|{stage}|{offset}"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


# ----------------------------------------------------------------- stage 1


def _meta_batch(capture_id: str, kind: str, metas: list[str]) -> pa.RecordBatch:
    n = len(metas)
    cols = [pa.nulls(n, f.type) for f in PACKET_SCHEMA]
    cols[0] = pa.array([capture_id] * n, pa.string())
    cols.append(pa.array([kind] * n, pa.string()))
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
    for batch in batches:
        for split in batch.to_pylist():
            reader = read_split(
                split["path"], split["capture_id"], split["start"], split["end"],
                batch_rows=options.batch_rows, max_error_bytes=options.max_error_bytes,
            )
            n = 0
            for cols in reader:
                n = len(cols["record_offset"])
                if n:
                    arrays = [pa.array(cols[f.name], f.type) for f in PACKET_SCHEMA]
                    arrays += [pa.array(["packet"] * n, pa.string()), pa.nulls(n, pa.string())]
                    yield pa.RecordBatch.from_arrays(arrays, schema=PACKETS_OUT_SCHEMA)
            cid = split["capture_id"]
            errors = [capture_error_to_json(e, options.max_error_bytes) for e in reader.errors]
            if errors:
                yield _meta_batch(cid, "capture_error", errors)
            yield _meta_batch(cid, "split_stats", [stats_to_json(reader.stats, split["split_index"])])


# ----------------------------------------------------------------- stage 2


class _FlowsOutput:
    """Collects output records and emits them as Arrow batches of one kind each."""

    def __init__(self, capture_rows: int):
        self.limit = capture_rows

    @staticmethod
    def batch(kind: str, capture_ids: list[str], *, meta=None, connection=None, error=None) -> pa.RecordBatch:
        n = len(capture_ids)

        def col(values, typ):
            return pa.array(values, typ) if values is not None else pa.nulls(n, typ)

        return pa.RecordBatch.from_arrays(
            [
                pa.array([kind] * n, pa.string()),
                pa.array(capture_ids, pa.string()),
                col(meta, pa.string()),
                col(connection, CONNECTION_STRUCT),
                col(error, ERROR_STRUCT),
            ],
            schema=FLOWS_OUT_SCHEMA,
        )


def _gap_row(capture_id: str, gap: GapRecord) -> dict:
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, gap.connection_id, gap.direction, "tcp", gap.offset),
            connection_id=gap.connection_id, direction=gap.direction, stage="tcp", offset=gap.offset,
            length=gap.length, reason=f"tcp_{gap.reason}", detail=f"{gap.length} stream bytes were not captured ({gap.reason})",
            ts_us=gap.ts_us, raw=b"", raw_length=gap.length, raw_sha256=None,
        )
    )


def _capture_error_row(capture_id: str, meta: str) -> dict:
    d = json.loads(meta)
    return dataclasses.asdict(
        ErrorRow(
            error_id=error_id(capture_id, None, None, "capture", d["offset"]),
            connection_id=None, direction=None, stage="capture", offset=d["offset"], length=d["length"],
            reason=d["reason"], detail=d["detail"], ts_us=None, raw=bytes.fromhex(d["raw_hex"]),
            raw_length=d["raw_length"], raw_sha256=d["raw_sha256"],
        )
    )


def decode_flows(batches: Iterable[pa.RecordBatch], options: Options = Options()) -> Iterator[pa.RecordBatch]:
    """Reassemble TCP per flow and emit connections, gaps and passed-through capture rows."""
    reassemblers: dict[str, TcpReassembler] = {}
    out = _FlowsOutput

    def drain(cid: str, r: TcpReassembler):
        conns = [dataclasses.asdict(c) for c in r.drain_connections()]
        if conns:
            yield out.batch("connection", [cid] * len(conns), connection=conns)
        gaps = [_gap_row(cid, g) for g in r.drain_gaps()]
        if gaps:
            yield out.batch("error", [cid] * len(gaps), error=gaps)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        kinds = batch.column("kind")
        packets_mask = pc.equal(kinds, "packet")
        others = batch.filter(pc.invert(packets_mask))
        for row in others.select(["kind", "capture_id", "meta"]).to_pylist():
            if row["kind"] == "capture_error":
                yield out.batch("error", [row["capture_id"]], error=[_capture_error_row(row["capture_id"], row["meta"])])
            else:
                yield out.batch(row["kind"], [row["capture_id"]], meta=[row["meta"]])
        packets = batch.filter(packets_mask)
        if packets.num_rows == 0:
            continue
        # A partition may hold flows of several captures; runs of one capture are contiguous per flow.
        cids = packets.column("capture_id")
        unique = pc.unique(cids).to_pylist()
        for cid in unique:
            part = packets if len(unique) == 1 else packets.filter(pc.equal(cids, cid))
            r = reassemblers.get(cid)
            if r is None:
                r = reassemblers[cid] = TcpReassembler(
                    cid, amqp_ports=options.amqp_ports, tls_ports=options.tls_ports, sniff=options.sniff,
                    max_ooo_bytes=options.max_ooo_bytes, reuse_idle_us=options.port_reuse_idle_s * 1_000_000,
                )
            r.feed_columns(part.to_pydict())
            yield from drain(cid, r)
    for cid, r in reassemblers.items():
        r.finish()
        yield from drain(cid, r)
