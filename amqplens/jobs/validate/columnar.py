"""Every check of a run's tables counted on the driver: delta-rs/pyarrow scans and Arrow compute -> ``tally.Tally``.

The same counts as tally.py's Spark aggregate and quality.reference_jobs, check for check, without a Spark job: each
table's columns that validation reads (``small.columns_read``) are scanned once in record batches of ``BATCH_ROWS``
rows, each check's offending rows counted per batch and summed. What a count needs of other rows is gathered on the
way, in an order that has it ready: the frames' and decode_errors' bytes per connection and direction (connections'
byte accounting), the connections per capture (captures' connection rows), the captures' windows (read first), and
the key columns (uniqueness; the targets of the reference checks). Held whole, so memory grows with them and not
with the tables' other columns: the key column of each table (the 300 MB load capture's frames: 1.85M ids of about
40 bytes), the referencing values (each ``*frame_id(s)`` and ``connection_id`` of the referencing tables) and the
columns of a mean check (connections only). Python runs per batch and per check, never per row.

Spark's semantics carried over: a test is true, false or null (null compares as Spark's three-valued logic does, and
a row counts only where its test is true: ``count(when(...))``); ``isin`` of a null value is null; a reference value
(an array's elements one by one, a null element included) is missing unless a key equals it; a uniqueness count is the
non-null keys less the distinct ones; a mean of no rows is null (the check is left to GX on the rows). A test compares
every count with the Spark tally's on the fixtures' lake and on a lake of damaged rows (tests/validate).
"""

from __future__ import annotations

import functools
from typing import Any
import logging
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.contracts import Table, table
from amqplens.contracts import expectations as ex
from amqplens.jobs.validate.quality import SOURCE_CAPTURE
from amqplens.jobs.validate.tally import MEAN, Tally, key_columns

log = logging.getLogger(__name__)

BATCH_ROWS = 1 << 17
# what the other tables' counts need of a table: counted before those tables (connections' byte accounting reads the
# frames' and decode_errors' bytes, captures' connection rows the connections)
FIRST = ("frames", "decode_errors", "connections")


# ------------------------------------------------------------ three-valued tests
def _true(mask) -> int:
    """Rows where ``mask`` is true (null and false: not)."""
    return int(pc.sum(mask).as_py() or 0) if len(mask) else 0


def _or(*masks):
    return functools.reduce(pc.or_kleene, masks)


def _and(*masks):
    return functools.reduce(pc.and_kleene, masks)


def _false(n: int):
    return pa.array(np.zeros(n, dtype=bool))


def _isin(values, value_set):
    """Spark's ``isin``: null for a null value, else whether ``value_set`` holds it."""
    inside = pc.is_in(values, value_set=pa.array(list(value_set), values.type), skip_nulls=True)
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), inside)


def _micros(values):
    return values.cast(pa.timestamp("us", tz=getattr(values.type, "tz", None))).cast(pa.int64())


# ------------------------------------------------------------------- a batch
class _Batch:
    """One record batch's columns, with the extra columns of quality.batch (``text=False``) computed when a check
    reads them: a mask, true where quality.py's column would hold the offending value(s)."""

    def __init__(self, t: Table, batch: pa.RecordBatch, ctx: "_Run"):
        self.t, self.ctx, self.n = t, ctx, batch.num_rows
        self.cols = {name: batch.column(name) for name in batch.schema.names}
        self._extra: dict[str, pa.Array] = {}

    def __getitem__(self, name: str):
        if name in self.cols:
            return self.cols[name]
        if name not in self._extra:
            self._extra[name] = self._compute(name)
        return self._extra[name]

    def _compute(self, name: str):
        t, c = self.t, self.cols
        if name == ex.REQUIRED_NULL:
            return _or(*(pc.is_null(c[col]) for col in ex.required_columns(t)))
        if name == ex.NEGATIVE:
            return _or(*(pc.less(c[col], 0) for col in ex.non_negative_columns(t)))
        if name == ex.ANOMALY:
            return self._anomaly()
        if name == ex.OUTSIDE_WINDOW:
            return self._outside()
        if name == ex.PERCENTILES_UNORDERED:
            cols = ("p50_us", "p90_us", "p99_us", "max_us")
            return _or(_false(self.n), *(pc.greater(c[a], c[b]) for a, b in zip(cols, cols[1:])))
        if name == ex.CONNECTION_ROWS:
            return self.ctx.connection_rows(c["capture_id"])
        if name == ex.CODEC_ERROR_SHARE or name in {ex.accounted(d) for d in ex.TO_SERVER_CLIENT}:
            self._extra.update(self.ctx.accounting(c))
            return self._extra[name]
        raise KeyError(name)

    def _anomaly(self):
        c = self.cols
        if self.t.name == "deliveries":
            return pc.greater(pc.fill_null(pc.list_value_length(c["flags"]), 0), 0)
        benign = _false(self.n)
        for event, reasons in ex.REASON_NOT_ANOMALY.items():
            same = pc.equal(c["event"], event)
            benign = _or(benign, same if reasons is None else _and(same, _isin(c["reason"], reasons)))
        return _and(pc.is_valid(c["reason"]), pc.invert(benign))

    def _outside(self):
        c, (ids, lo_all, hi_all) = self.cols, self.ctx.window
        at = pc.index_in(c["capture_id"], value_set=ids)
        lo, hi = pc.take(lo_all, at), pc.take(hi_all, at)
        judged = pc.equal(c["source"], SOURCE_CAPTURE) if "source" in c else pa.scalar(True)
        bucket = pc.multiply(c["bucket_seconds"].cast(pa.int64()), 1_000_000) if "bucket_seconds" in c else None
        outs = []
        for col in ex.window_columns(self.t):
            us = _micros(c[col])
            start = pc.add(us, bucket) if col == "bucket_start" and bucket is not None else us
            outs.append(_and(judged, _or(pc.less(start, lo), pc.greater(us, hi))))
        return _or(*outs)


def _offending(check: ex.Check, b: _Batch):
    """``tally.offending``'s count for one batch (a mean check: its non-null values), or None when not counted."""
    kind = check.expectation_type.__name__
    kw = check.kwargs
    if kind == "ExpectColumnValuesToNotBeNull":
        return b[kw["column"]].null_count
    if kind == "ExpectColumnValuesToBeNull":
        values = b[kw["column"]]
        return _true(values) if kw["column"] not in b.cols else len(values) - values.null_count
    if kind in ("ExpectColumnValuesToBeInSet", "ExpectColumnValuesToNotBeInSet"):
        col = b[kw["column"]]
        inside = _isin(col, kw["value_set"])
        return _true(_and(pc.is_valid(col), pc.invert(inside) if kind == "ExpectColumnValuesToBeInSet" else inside))
    if kind == "ExpectColumnValuesToBeBetween":
        col = b[kw["column"]]
        out = [_false(len(col))]
        if kw.get("min_value") is not None:
            out.append((pc.less_equal if kw.get("strict_min") else pc.less)(col, kw["min_value"]))
        if kw.get("max_value") is not None:
            out.append((pc.greater_equal if kw.get("strict_max") else pc.greater)(col, kw["max_value"]))
        if pa.types.is_floating(col.type):
            out.append(pc.is_nan(col))
        return _true(_and(pc.is_valid(col), _or(*out)))
    if kind in ("ExpectColumnPairValuesToBeEqual", "ExpectColumnPairValuesAToBeGreaterThanB") \
            and kw.get("ignore_row_if") == "either_value_is_missing":
        a, c = b[kw["column_A"]], b[kw["column_B"]]
        if kind == "ExpectColumnPairValuesToBeEqual":
            ok = pc.equal(a, c)
        else:
            ok = (pc.greater_equal if kw.get("or_equal") else pc.greater)(a, c)
        return _true(_and(pc.is_valid(a), pc.is_valid(c), pc.invert(ok)))
    if kind == MEAN:
        return pc.drop_null(b[kw["column"]])
    return None


def _repeats(columns: dict[str, list]) -> int:
    """Non-null keys less distinct ones (tally.py's uniqueness count); a compound key: rows with a value, less groups."""
    if len(columns) == 1:
        (chunks,) = columns.values()
        keys = pa.chunked_array(chunks)
        return (len(keys) - keys.null_count) - int(pc.count_distinct(keys, mode="only_valid").as_py())
    data = pa.table({name: pa.chunked_array(chunks) for name, chunks in columns.items()})
    some = _or(*(pc.is_valid(data[name]) for name in columns))
    data = data.filter(some)
    return data.num_rows - data.group_by(list(columns)).aggregate([]).num_rows


def _joined(batches: list[pa.RecordBatch]):
    """``batches`` as one record batch (none for none)."""
    if len(batches) == 1:
        yield batches[0]
    elif batches:
        yield from pa.Table.from_batches(batches).combine_chunks().to_batches()


# ------------------------------------------------------------------- the run
class _Run:
    """What the counts of one table need of the others, gathered as the tables are scanned."""

    def __init__(self, store, ids: list[str], slack_s: int):
        self.store, self.ids = store, ids
        caps = store.read_arrow("captures", ["capture_id", "first_ts", "last_ts"], ids)
        if caps.num_columns == 0:
            caps = pa.table({"capture_id": pa.array([], pa.string()), "first_ts": pa.array([], pa.timestamp("us", tz="UTC")),
                             "last_ts": pa.array([], pa.timestamp("us", tz="UTC"))})
        ids_col = caps["capture_id"].combine_chunks()
        first = pc.index_in(ids_col, value_set=ids_col)  # a capture's first row (dropDuplicates)
        caps = caps.filter(pc.equal(first, pa.array(range(len(ids_col)), pa.int32())))
        slack = slack_s * 1_000_000
        self.window = (caps["capture_id"].combine_chunks(), pc.subtract(_micros(caps["first_ts"].combine_chunks()), slack),
                       pc.add(_micros(caps["last_ts"].combine_chunks()), slack))
        self.keys: dict[str, list] = {}  # table -> its key column's chunks (a reference target)
        self.bytes: dict[str, list[pa.Table]] = {"frames": [], "decode_errors": []}  # (connection, direction) sums
        self.per_capture: list[pa.Table] = []  # connections per capture
        self._sums = None

    def gather(self, name: str, cols: dict) -> None:
        """What the other tables read of this batch of ``name``."""
        from amqplens.decode.common.rows import STAGE_FRAME

        if name in self.bytes:
            measure = "size" if name == "frames" else "length"
            data = pa.table({"connection_id": cols["connection_id"], "direction": cols["direction"], "v": cols[measure]})
            keep = pc.is_valid(data["connection_id"])
            if name == "decode_errors":
                keep = _and(keep, pc.not_equal(cols["stage"], STAGE_FRAME))
            data = data.filter(pc.fill_null(keep, False))
            self.bytes[name].append(data.group_by(["connection_id", "direction"]).aggregate([("v", "sum")]))
        elif name == "connections":
            data = pa.table({"capture_id": cols["capture_id"]})
            self.per_capture.append(data.group_by(["capture_id"]).aggregate([("capture_id", "count")]))

    def connection_rows(self, capture_id):
        """Rows per capture in connections (0 for none), for each row's capture."""
        if self.per_capture:
            counts = pa.concat_tables(self.per_capture).group_by(["capture_id"]).aggregate([("capture_id_count", "sum")])
        else:
            counts = pa.table({"capture_id": pa.array([], pa.string()), "capture_id_count_sum": pa.array([], pa.int64())})
        at = pc.index_in(capture_id, value_set=counts["capture_id"].combine_chunks())
        return pc.fill_null(pc.take(counts["capture_id_count_sum"].combine_chunks(), at), 0)

    def _per_connection(self):
        """connection -> frame bytes and codec/gap error bytes per direction (null: no such row)."""
        if self._sums is None:
            self._sums = {}
            for name, parts in self.bytes.items():
                data = (pa.concat_tables(parts).group_by(["connection_id", "direction"]).aggregate([("v_sum", "sum")])
                        if parts else pa.table({"connection_id": pa.array([], pa.string()),
                                                "direction": pa.array([], pa.string()), "v_sum_sum": pa.array([], pa.int64())}))
                self._sums[name] = data
        return self._sums

    def accounting(self, c) -> dict:
        """quality.with_accounting's columns for a batch of connections."""
        out = {}
        decoded = _and(pc.is_valid(c["dialect"]), pc.equal(c["source"], SOURCE_CAPTURE))
        for d in ex.TO_SERVER_CLIENT:
            covered = pc.fill_null(c[f"tls_overhead_bytes_{d}"].cast(pa.int64()), 0)
            for name, sums in self._per_connection().items():
                one = sums.filter(pc.equal(sums["direction"], d))
                at = pc.index_in(c["connection_id"], value_set=one["connection_id"].combine_chunks())
                covered = pc.add(covered, pc.fill_null(pc.take(one["v_sum_sum"].combine_chunks().cast(pa.int64()), at), 0))
            out[ex.accounted(d)] = pc.if_else(decoded, covered, pa.scalar(None, pa.int64()))
        stream = functools.reduce(pc.add, (pc.subtract(c[f"bytes_{d}"], c[f"missing_bytes_{d}"]) for d in ex.TO_SERVER_CLIENT))
        codec = functools.reduce(pc.add, (pc.fill_null(c[f"codec_error_bytes_{d}"], 0) for d in ex.TO_SERVER_CLIENT))
        share = pc.divide(codec.cast(pa.float64()), stream.cast(pa.float64()))
        out[ex.CODEC_ERROR_SHARE] = pc.if_else(_and(decoded, pc.greater(stream, 0)), share, pa.scalar(None, pa.float64()))
        return out

    def scan(self, name: str, columns: list[str]):
        (rkey,) = table(name).replace_by
        dt = self.store.delta(name)
        if dt is None:
            return
        files, exact = self.store.unit_files(name, dt, self.ids)
        wanted = None if exact else pc.field(rkey).isin(pa.array(list(self.ids), pa.string()))
        # a batch per file at least: the small files of many captures are counted together, not one by one
        held: list[pa.RecordBatch] = []
        for batch in self.store.dataset(name, files).to_batches(columns=columns, filter=wanted, batch_size=BATCH_ROWS,
                                                                 use_threads=True):
            held.append(batch)
            if sum(b.num_rows for b in held) >= BATCH_ROWS:
                yield from _joined(held)
                held = []
        yield from _joined(held)

    def target_keys(self, target: str, whole: bool):
        """``target``'s key values: of the run's slice (gathered when it was counted), or of the whole table."""
        (key,) = table(target).key
        if whole:
            data = self.store.read_arrow(target, [key], None)
            return data[key].combine_chunks() if data.num_columns else pa.array([], pa.string())
        return pa.chunked_array(self.keys.get(target, []), pa.string()).combine_chunks()


def count_tables(store, ids: list[str], names: list[str], settings: ex.Settings, slack_s: int) -> dict[str, Tally]:
    """``tally.count`` (with the reference counts ``Tally.add`` takes) for each table of ``names`` over the run's
    captures ``ids``, on the driver."""
    from amqplens.jobs.validate.small import columns_read

    t0 = time.monotonic()
    run = _Run(store, ids, slack_s)
    order = [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]
    out: dict[str, Tally] = {}
    refs: dict[tuple[str, bool], list[tuple[str, list]]] = {}  # (target, whole table) -> [(check, values)]
    for name in order:
        t = table(name)
        checks = ex.checks(t, settings)
        keyed = {c.name: key_columns(c) for c in checks if key_columns(c)}
        key_chunks: dict[str, list] = {col: [] for cols in keyed.values() for col in cols}
        referencing = {column: (ex.reference_check(t, column), target) for column, target in ex.references(t).items()}
        ref_values: dict[str, list] = {column: [] for column in referencing}
        counts: dict[str, Any] = {c.name: 0 for c in checks if c.name not in keyed and c.name not in
                                     {check for check, _ in referencing.values()}}
        means: dict[str, list] = {c.name: [] for c in checks if c.expectation_type.__name__ == MEAN}
        rows = 0
        for batch in run.scan(name, columns_read(t, settings)):
            b = _Batch(t, batch, run)
            rows += b.n
            run.gather(name, b.cols)
            for col in key_chunks:
                key_chunks[col].append(b.cols[col])
            for column in referencing:
                named = b.cols[column]
                ref_values[column].append(pc.list_flatten(named) if pa.types.is_list(named.type) else pc.drop_null(named))
            for c in checks:
                if c.name not in counts or counts[c.name] is None:
                    continue
                n = _offending(c, b)
                if n is None:
                    counts[c.name] = None
                elif c.name in means:
                    means[c.name].append(n)
                else:
                    counts[c.name] += n
        values: dict[str, float | int | None] = dict(counts)
        for check_name, cols in keyed.items():
            values[check_name] = _repeats({col: key_chunks[col] for col in cols})
        for check_name, parts in means.items():
            if counts.get(check_name) is None:
                continue
            all_values = pa.chunked_array(parts, pa.float64()) if parts else pa.chunked_array([], pa.float64())
            values[check_name] = pc.mean(all_values).as_py() if len(all_values) else None
        (key,) = t.key if len(t.key) == 1 else (None,)
        if key is not None and key in key_chunks:
            run.keys[name] = key_chunks[key]
        for column, (check, target) in referencing.items():
            values[check] = None
            refs.setdefault((target, t.replace_by != ("capture_id",)), []).append((check, ref_values[column]))
        out[name] = Tally(rows, values, frozenset(means))
    for (target, whole), items in refs.items():
        # one lookup per target for every check's values (a lookup hashes every key of the target first)
        named = pa.chunked_array([part for _, parts in items for part in parts], pa.string())
        found = pc.is_in(named, value_set=run.target_keys(target, whole), skip_nulls=True) if len(named) else named
        at = 0
        for check, parts in items:
            n = sum(len(part) for part in parts)
            out[check.split(".", 1)[0]].add({check: n - _true(found.slice(at, n))})
            at += n
    log.info("tallies of %d table(s) on the driver in %.1fs", len(names), time.monotonic() - t0)
    return out
