"""The batch function the lifecycle job calls inside ``mapInArrow``.

Input: frames-table batches, repartitioned by connection_id and sorted by
``(connection_id, ts_us, stream_offset)`` (see runner.py for why the runner
still restores each direction's stream order). Batches carry ``ts_us``
(int64 microseconds) or the table's ``ts`` timestamp, which is converted.
Output: one kind per batch, ``kind`` saying which struct column holds the
rows (``delivery``, ``flow_event``, ``request_response``), the others null,
plus the ``capture_id`` of the connection. The struct types come from the
caller (the job derives them from amqplens/contracts/); rows fill them by field name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from amqplens.lifecycle.runner import LifecycleOptions, LifecycleRunner
from amqplens.decode.common.arrow import repeated, to_struct_array, use_task_memory_pool

KINDS = ("delivery", "flow_event", "request_response")
# frame columns the machines read; the others are not converted to Python
FRAME_COLUMNS = (
    "frame_id", "connection_id", "capture_id", "direction", "stream_offset", "ts_us", "dialect", "frame_type", "channel",
    "class_id", "method_id", "class_name", "method_name", "delivery_tag", "multiple", "requeue", "redelivered",
    "exchange", "routing_key", "queue", "consumer_tag", "prefetch_count", "global_qos", "reply_code", "body_size",
    "active", "reason", "mandatory", "immediate", "no_ack", "message_seq", "body_sha256", "arguments_json",
    "properties_json", "performative", "handle", "role", "link_name", "delivery_id", "delivery_tag_bin", "settled",
    "more", "aborted", "rcv_settle_mode", "snd_settle_mode", "link_credit", "delivery_count", "drain",
    "next_incoming_id", "incoming_window", "next_outgoing_id", "outgoing_window", "first", "last", "state",
    "error_condition", "source_address", "target_address",
    # 0-10
    "first_segment", "last_segment", "first_frame", "last_frame", "command_id", "sync", "destination", "accept_mode",
    "acquire_mode", "credit_unit", "credit_value", "flow_mode", "transfers_json", "commands_json", "referenced_command_id",
)


def lifecycle_out_schema(delivery_struct: pa.StructType, flow_event_struct: pa.StructType,
                         request_response_struct: pa.StructType) -> pa.Schema:
    return pa.schema([
        ("kind", pa.string()), ("capture_id", pa.string()), ("delivery", delivery_struct),
        ("flow_event", flow_event_struct), ("request_response", request_response_struct),
    ])


def frame_rows(batch: pa.RecordBatch, columns: list[str] | None = None) -> list[dict]:
    """The batch's rows as dicts of the columns the machines read, with ``ts_us``.

    ``columns``: the keys every row gets (default: the ``FRAME_COLUMNS`` the batch
    holds, ``ts_us`` included); those the batch lacks are None, as its all-null ones.
    """
    names = batch.schema.names
    if "ts_us" not in names and "ts" in names:
        ts = batch.column("ts")
        if pa.types.is_timestamp(ts.type) and ts.type.unit != "us":
            ts = ts.cast(pa.timestamp("us", tz=ts.type.tz))
        batch = batch.append_column("ts_us", ts.cast(pa.int64()))
        names = batch.schema.names
    # Column by column, and every all-null column (most of them: each dialect fills its own) from a
    # template dict instead of converting its nulls: a third cheaper than ``to_pylist`` on the batch.
    n = batch.num_rows
    if columns is None:
        columns = [c for c in FRAME_COLUMNS if c in names]
    present = set(names)
    filled = [c for c in columns if c in present and batch.column(c).null_count < n]
    template = dict.fromkeys(columns)
    if not filled:
        return [template.copy() for _ in range(n)]
    values = [batch.column(c).to_pylist() for c in filled]
    rows: list[dict] = []
    append = rows.append
    for vals in zip(*values):
        row = template.copy()
        row.update(zip(filled, vals))
        append(row)
    return rows


class LifecycleBatcher:
    """A ``LifecycleRunner`` whose rows leave as output batches of ``batch_rows`` rows per kind.

    ``feed`` frames-table batches (in the order the runner wants, see runner.py),
    ``end_connection`` when the caller knows the connection fed last is whole,
    ``finish`` at the end; each returns the output batches that are full by then
    (all of them for ``finish``).
    """

    def __init__(self, delivery_struct: pa.StructType, flow_event_struct: pa.StructType,
                 request_response_struct: pa.StructType, options: LifecycleOptions = LifecycleOptions(),
                 batch_rows: int = 8192) -> None:
        self.schema = lifecycle_out_schema(delivery_struct, flow_event_struct, request_response_struct)
        self.structs = dict(zip(KINDS, (delivery_struct, flow_event_struct, request_response_struct)))
        self.options, self.batch_rows = options, batch_rows
        self.runner = LifecycleRunner(options)
        self.pending: dict[str, list] = {k: [] for k in KINDS}  # kind -> [(capture_id, row)]

    def feed(self, batch: pa.RecordBatch, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        """``columns``: see ``frame_rows``."""
        if batch.num_rows:
            self.runner.feed(frame_rows(batch, columns))
            yield from self._emit(final=False)

    def end_connection(self) -> Iterator[pa.RecordBatch]:
        self.runner.finish()
        yield from self._emit(final=False)

    def finish(self) -> Iterator[pa.RecordBatch]:
        self.runner.finish()
        yield from self._emit(final=True)

    def arrays(self, done) -> Iterator[pa.RecordBatch]:
        """The rows ``array091.lifecycle`` gave (``done``: its ``Result``) as output batches of ``batch_rows``."""
        for kind, parts in (("delivery", done.deliveries), ("flow_event", done.flow_events)):
            struct = self.structs[kind]
            for part in parts(self.batch_rows):
                values = pa.StructArray.from_arrays([part.column(f.name).combine_chunks().cast(f.type) for f in struct],
                                                    fields=list(struct))
                yield _kind_batch(self.schema, kind, part.column("capture_id").combine_chunks(), values)
        rows = done.request_responses
        if hasattr(rows, "parts"):  # array091.RequestRows: the plain pairs as columns, the matcher's rows as dicts
            for capture, values in rows.parts(self.structs["request_response"], self.batch_rows):
                yield _kind_batch(self.schema, "request_response", capture, values)
            return
        for start in range(0, len(rows), self.batch_rows):
            yield _out_batch(self.schema, "request_response", rows[start:start + self.batch_rows],
                             self.structs["request_response"])

    def reset(self) -> None:
        """A fresh runner (after one raised: its state is not to be trusted); the rows already out are kept."""
        self.runner = LifecycleRunner(self.options)

    def _emit(self, final: bool) -> Iterator[pa.RecordBatch]:
        runner = self.runner
        for kind, rows in zip(KINDS, (runner.drain_deliveries(), runner.drain_flow_events(), runner.drain_request_responses())):
            self.pending[kind] += [(runner.capture_id_of(r["connection_id"]), r) for r in rows]
        runner.forget_finished()
        for kind in KINDS:
            buf = self.pending[kind]
            while buf and (final or len(buf) >= self.batch_rows):
                chunk, buf = buf[:self.batch_rows], buf[self.batch_rows:]
                yield _out_batch(self.schema, kind, chunk, self.structs[kind])
            self.pending[kind] = buf


def lifecycle_batches(
    batches: Iterable[pa.RecordBatch],
    delivery_struct: pa.StructType,
    flow_event_struct: pa.StructType,
    request_response_struct: pa.StructType,
    options: LifecycleOptions = LifecycleOptions(),
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    use_task_memory_pool()
    out = LifecycleBatcher(delivery_struct, flow_event_struct, request_response_struct, options, batch_rows)
    for batch in batches:
        yield from out.feed(batch)
    yield from out.finish()


def _out_batch(schema: pa.Schema, kind: str, chunk: list, struct: pa.StructType) -> pa.RecordBatch:
    return _kind_batch(schema, kind, pa.array([c for c, _ in chunk], pa.string()),
                       to_struct_array([r for _, r in chunk], struct))


def _kind_batch(schema: pa.Schema, kind: str, capture: pa.Array, values: pa.Array) -> pa.RecordBatch:
    """An output batch of one kind: its capture ids and its struct column, the other kinds' columns null."""
    n = len(values)
    arrays = [repeated(kind, n), capture]
    arrays += [values if f.name == kind else pa.nulls(n, f.type) for f in list(schema)[2:]]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
