"""Every check of a run's tables counted on the driver: delta-rs/pyarrow scans and Arrow compute -> ``tally.Tally``.

The same counts as tally.py's Spark aggregate and quality.reference_jobs, check for check, without a Spark job: each
table's columns that validation reads (``small.columns_read``) are scanned once in record batches of ``BATCH_ROWS``
rows, each check's offending rows counted per batch and summed. What a count needs of other rows is gathered on the
way, in an order that has it ready: the frames' and decode_errors' bytes per connection and direction (connections'
byte accounting), the connections per capture (captures' connection rows), the captures' windows (read first), and
the key columns (uniqueness; the targets of the reference checks), each counted and looked up in a compiled hash
table over its own buffers (``KeySet``, keyset.py; Arrow's kernels its reference), built and probed in two driver
threads while the next tables are read. Columns read only for the not-null and not-negative checks are left unread
where the files' statistics prove them clean (``proven``). Held whole, so memory grows with them and not with the
tables' other columns: the key column of each table with its hash table (the 2 GB load capture's 12.4M frame ids:
about 0.5 GB and 0.27 GB), the referencing values (each ``*frame_id(s)`` and ``connection_id`` of the referencing
tables; value counts where those halve them) and the columns of a mean check (connections only). Python runs per
batch and per check, never per row.

Spark's semantics carried over: a test is true, false or null (null compares as Spark's three-valued logic does, and
a row counts only where its test is true: ``count(when(...))``); ``isin`` of a null value is null; a reference value
(an array's elements one by one, a null element included) is missing unless a key equals it; a uniqueness count is the
non-null keys less the distinct ones; a mean of no rows is null (the check is left to GX on the rows). A test compares
every count with the Spark tally's on the fixtures' lake and on a lake of damaged rows (tests/validate).
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import AbstractSet, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.contracts import Table, table
from amqplens.contracts import expectations as ex
from amqplens.jobs.validate.quality import SOURCE_CAPTURE
from amqplens.jobs.validate.tally import MEAN, Tally, key_columns

log = logging.getLogger(__name__)

BATCH_ROWS = 1 << 17
READAHEAD = 2  # record batches read ahead of the one counted
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
        # a column not read is one whose statistics prove it clean (``_Run.proven``)
        if name == ex.REQUIRED_NULL:
            return _or(_false(self.n), *(pc.is_null(c[col]) for col in ex.required_columns(t) if col in c))
        if name == ex.NEGATIVE:
            return _or(_false(self.n), *(pc.less(c[col], 0) for col in ex.non_negative_columns(t) if col in c))
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
        # rows: one window per capture (the first of its rows), a lookup per batch row: the batch's rows
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


def kernels():
    """``keyset`` (numba, the decoder's disk cache), or None without numba: Arrow's kernels count then."""
    from amqplens.decode.v0_9_1.hotpath import compiled_module

    return compiled_module("amqplens.jobs.validate.keyset")


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _text_chunks(values, rows: int):
    """A text column (an array or chunks) as string arrays of at most ``rows`` rows each (slices: no copy)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    for c in chunks:
        if not pa.types.is_string(c.type):
            c = c.cast(pa.string())
        for at in range(0, len(c), rows):
            yield c.slice(at, rows)


def _buffers(c: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A string array's (offsets, bytes, valid) as numpy arrays over its own buffers (no copy but the validity)."""
    bufs = c.buffers()
    offsets = np.frombuffer(bufs[1], np.int32)[c.offset : c.offset + len(c) + 1] if len(c) else _readonly(np.zeros(1, np.int32))
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else _readonly(np.zeros(0, np.uint8))
    valid = c.is_valid().to_numpy(zero_copy_only=False) if c.null_count else np.ones(len(c), np.bool_)
    return offsets, data, valid


class KeySet:
    """The distinct values of a text column and lookups of other values in them: keyset.py's compiled table, or
    Arrow's kernels (``compiled=False``, or without numba: the reference)."""

    def __init__(self, keys, *, compiled: bool = True, keep=None):
        self.keys = keys if isinstance(keys, pa.ChunkedArray) else pa.chunked_array([keys], pa.string())
        self.valid = len(self.keys) - self.keys.null_count
        self.k = kernels() if compiled and len(self.keys) < 2**32 - 1 else None  # a slot holds a 32-bit index
        if self.k is None:
            self.distinct = int(pc.count_distinct(self.keys, mode="only_valid").as_py()) if len(self.keys) else 0
            self._set = None
            return
        from numba.typed import List

        self.keep = self.k.ALL_BITS if keep is None else np.uint64(keep)
        self.offsets, self.data, valid = List(), List(), List()
        for c in _text_chunks(self.keys, 1 << self.k.ROW_BITS):
            o, d, v = _buffers(c)
            self.offsets.append(o)
            self.data.append(d)
            valid.append(v)
        size = 1 << max(4, int(2 * len(self.keys)).bit_length())  # at most half full
        self.slots = np.full(size, self.k.FREE, np.uint64)
        self.distinct = int(self.k.build(self.offsets, self.data, valid, self.slots, self.keep)) if len(valid) else 0

    @property
    def repeats(self) -> int:
        """Non-null keys less distinct ones (tally.py's uniqueness count)."""
        return self.valid - self.distinct

    def found(self, values) -> pa.Array:
        """Per value, whether a key equals it (a null value: false)."""
        if self.k is None:
            if self._set is None:
                self._set = self.keys.combine_chunks() if self.keys.num_chunks != 1 else self.keys.chunk(0)
            return pc.is_in(values, value_set=self._set, skip_nulls=True)
        if not len(self.offsets):
            return pa.array(np.zeros(len(values), np.bool_))
        out = np.empty(len(values), np.bool_)
        at = 0
        for c in _text_chunks(values, len(values) or 1):
            offsets, data, valid = _buffers(c)
            self.k.probe(self.offsets, self.data, self.slots, self.keep, offsets, data, valid, out[at : at + len(c)])
            at += len(c)
        return pa.array(out)


def warm() -> float:
    """Seconds to load (or compile) keyset.py's passes and run them once (an install step: ``python -m
    amqplens.jobs.validate.columnar``, after amqplens.decode.v0_9_1.warm, sharing its numba cache)."""
    t0 = time.perf_counter()
    keys = KeySet(pa.chunked_array([["a", "b", None], ["a"]], pa.string()))
    keys.found(pa.array(["a", "c", None], pa.string()))
    return time.perf_counter() - t0


def _repeats(columns: dict[str, list]) -> int:
    """A compound key's rows with a value less its groups (tally.py's uniqueness count)."""
    data = pa.table({name: pa.chunked_array(chunks) for name, chunks in columns.items()})
    some = _or(*(pc.is_valid(data[name]) for name in columns))
    data = data.filter(some)
    return data.num_rows - data.group_by(list(columns)).aggregate([]).num_rows


def _distinct(chunks: list, column_type, compiled: bool) -> "KeySet":
    keys = pa.chunked_array(chunks, column_type)
    return KeySet(keys, compiled=compiled and pa.types.is_string(keys.type))


def prunable(t: Table, settings: ex.Settings) -> set[str]:
    """Columns of ``t`` read only for the not-null and not-negative checks: left unread where statistics prove them
    clean."""
    from amqplens.jobs.validate.small import EXTRA_INPUTS, READ_BY_OTHERS

    other = {*t.key, *ex.window_columns(t), *ex.references(t), *ex.suite_columns(t, settings), *EXTRA_INPUTS,
             *READ_BY_OTHERS.get(t.name, ())}
    return {*ex.required_columns(t), *ex.non_negative_columns(t)} - other


def proven(data, t: Table, columns: AbstractSet[str]) -> set[str]:
    """Those of ``columns`` that no row of ``data`` (a pyarrow dataset of Parquet files) can break, by every row
    group's statistics: a not-null column none of whose values is null, a not-negative one whose least value is 0 or
    more (or that holds only nulls). A file without the column (it reads as nulls) or without statistics proves
    nothing. A count over the other columns is then the count over all of them."""
    if not columns:
        return set()
    required, non_negative = set(ex.required_columns(t)), set(ex.non_negative_columns(t))
    clean = set(columns)
    for fragment in data.get_fragments():
        meta = fragment.metadata
        at = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
        clean &= set(at)
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            for c in list(clean):
                stats = rg.column(at[c]).statistics
                ok = stats is not None and stats.has_null_count
                if ok and c in required:
                    ok = stats.null_count == 0
                if ok and c in non_negative and stats.null_count < rg.num_rows:
                    ok = stats.has_min_max and stats.min is not None and stats.min >= 0
                if not ok:
                    clean.discard(c)
            if not clean:
                return clean
    return clean


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
        self.compiled = True
        self.keys: dict[str, Future] = {}  # table -> its keys (a reference target), a KeySet being built
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
        # rows: one count per capture (grouped), a lookup per captures row: the batch's rows
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
                # rows: one sum per (connection, direction) (grouped), a lookup per connection row: the batch's rows
                at = pc.index_in(c["connection_id"], value_set=one["connection_id"].combine_chunks())
                covered = pc.add(covered, pc.fill_null(pc.take(one["v_sum_sum"].combine_chunks().cast(pa.int64()), at), 0))
            out[ex.accounted(d)] = pc.if_else(decoded, covered, pa.scalar(None, pa.int64()))
        stream = functools.reduce(pc.add, (pc.subtract(c[f"bytes_{d}"], c[f"missing_bytes_{d}"]) for d in ex.TO_SERVER_CLIENT))
        codec = functools.reduce(pc.add, (pc.fill_null(c[f"codec_error_bytes_{d}"], 0) for d in ex.TO_SERVER_CLIENT))
        share = pc.divide(codec.cast(pa.float64()), stream.cast(pa.float64()))
        out[ex.CODEC_ERROR_SHARE] = pc.if_else(_and(decoded, pc.greater(stream, 0)), share, pa.scalar(None, pa.float64()))
        return out

    def scan(self, name: str, columns: list[str], prunable: AbstractSet[str] = frozenset()):
        """Record batches of ``columns`` of the run's rows of table ``name``, less the ``prunable`` columns whose
        statistics prove them clean (``proven``)."""
        (rkey,) = table(name).replace_by
        dt = self.store.delta(name)
        if dt is None:
            return
        files, exact = self.store.unit_files(name, dt, self.ids)
        wanted = None if exact else pc.field(rkey).isin(pa.array(list(self.ids), pa.string()))
        data = self.store.dataset(name, files)
        clean = proven(data, table(name), prunable)
        columns = [c for c in columns if c not in clean]
        # a batch per file at least: the small files of many captures are counted together, not one by one. Few
        # batches read ahead: Arrow's default (16 batches of each of 4 files) held 5.7 GB of the 2 GB load capture's
        # frames at once
        held: list[pa.RecordBatch] = []
        for batch in data.to_batches(columns=columns, filter=wanted, batch_size=BATCH_ROWS, batch_readahead=READAHEAD,
                                     fragment_readahead=1, use_threads=True):
            held.append(batch)
            if sum(b.num_rows for b in held) >= BATCH_ROWS:
                yield from _joined(held)
                held = []
        yield from _joined(held)

    def key_set(self, target: str, whole: bool) -> "KeySet":
        """``target``'s keys: of the run's slice (built when it was counted), or of the whole table."""
        (key,) = table(target).key
        if not whole:
            built = self.keys.get(target)
            return built.result() if built is not None else KeySet(pa.chunked_array([], pa.string()), compiled=self.compiled)
        data = self.store.read_arrow(target, [key], None)
        return KeySet(data[key] if data.num_columns else pa.chunked_array([], pa.string()), compiled=self.compiled)


def count_tables(store, ids: list[str], names: list[str], settings: ex.Settings, slack_s: int, *,
                 compiled: bool = True) -> dict[str, Tally]:
    """``tally.count`` (with the reference counts ``Tally.add`` takes) for each table of ``names`` over the run's
    captures ``ids``, on the driver. ``compiled``: text keys counted and looked up by keyset.py (numba) when it
    loads, else by Arrow's kernels (the reference)."""
    t0 = time.monotonic()
    run = _Run(store, ids, slack_s)
    run.compiled = compiled
    order = [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]
    # the tables other tables' rows name (frames, connections): their keys are kept for the lookups
    targets = {target for name in names for target in ex.references(table(name)).values()}
    out: dict[str, Tally] = {}
    refs: dict[tuple[str, bool], list[tuple[str, list]]] = {}  # (target, whole table) -> [(check, values)]
    # the key sets are built and probed in driver threads (the compiled passes leave the interpreter's lock): a
    # table's keys while the next tables are read, the lookups two at a time
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="amqplens-keys")
    distinct: list[tuple[str, str, Future]] = []  # (table, check, its key set)
    try:
        _count(run, order, targets, settings, out, refs, distinct, pool)
        for name, check, keys in distinct:
            out[name].values[check] = keys.result().repeats
        lookups = [(check, rows, pool.submit(run.key_set(target, whole).found, values))
                   for (target, whole), items in refs.items() for check, parts in items for values, rows in parts]
        missing = {check: 0 for items in refs.values() for check, _ in items}
        for check, rows, found in lookups:
            lacking = pc.invert(found.result())
            missing[check] += _true(lacking) if rows is None else int(pc.sum(pc.filter(rows, lacking)).as_py() or 0)
        for check, n in missing.items():
            out[check.split(".", 1)[0]].add({check: n})
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    log.info("tallies of %d table(s) on the driver in %.1fs", len(names), time.monotonic() - t0)
    return out


def _count(run: _Run, order: list[str], targets: set[str], settings, out: dict, refs: dict, distinct: list, pool) -> None:
    """Scan each table of ``order`` and count its checks into ``out``, but the uniqueness checks (their key sets
    submitted to ``pool``, listed in ``distinct``) and the reference checks (their values listed in ``refs``)."""
    from amqplens.jobs.validate.small import columns_read

    for name in order:
        t = table(name)
        checks = ex.checks(t, settings)
        keyed = {c.name: key_columns(c) for c in checks if key_columns(c)}
        key_chunks: dict[str, list] = {col: [] for cols in keyed.values() for col in cols}
        referencing = {column: (ex.reference_check(t, column), target) for column, target in ex.references(t).items()}
        ref_values: dict[str, list] = {column: [] for column in referencing}
        dedupe = dict.fromkeys(referencing, True)  # while a batch's value counts are fewer than half its values
        counts: dict[str, Any] = {c.name: 0 for c in checks if c.name not in keyed and c.name not in
                                     {check for check, _ in referencing.values()}}
        means: dict[str, list] = {c.name: [] for c in checks if c.expectation_type.__name__ == MEAN}
        rows = 0
        for batch in run.scan(name, columns_read(t, settings), prunable(t, settings)):
            b = _Batch(t, batch, run)
            rows += b.n
            run.gather(name, b.cols)
            for col in key_chunks:
                key_chunks[col].append(b.cols[col])
            for column in referencing:
                named = b.cols[column]
                named = pc.list_flatten(named) if pa.types.is_list(named.type) else pc.drop_null(named)
                counted = pc.value_counts(named) if dedupe[column] else None  # a batch's frames name a few connections
                if counted is not None and len(counted) * 2 < len(named):
                    ref_values[column].append((counted.field(0), counted.field(1)))
                else:
                    dedupe[column] = False
                    ref_values[column].append((named, None))
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
            if len(cols) > 1:
                values[check_name] = _repeats({col: key_chunks[col] for col in cols})
                continue
            keys = pool.submit(_distinct, key_chunks[cols[0]], t.column(cols[0]).arrow_type, run.compiled)
            values[check_name] = None
            distinct.append((name, check_name, keys))
            if tuple(cols) == t.key and name in targets:
                run.keys[name] = keys
        for check_name, parts in means.items():
            if counts.get(check_name) is None:
                continue
            all_values = pa.chunked_array(parts, pa.float64()) if parts else pa.chunked_array([], pa.float64())
            values[check_name] = pc.mean(all_values).as_py() if len(all_values) else None
        for column, (check, target) in referencing.items():
            values[check] = None
            refs.setdefault((target, t.replace_by != ("capture_id",)), []).append((check, ref_values[column]))
        out[name] = Tally(rows, values, frozenset(means))


if __name__ == "__main__":  # an install step beside amqplens.decode.v0_9_1.warm (the Makefile's)
    print(f"amqplens.validate: key sets ready in {warm():.1f} s")
