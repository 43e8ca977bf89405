"""Python rows to Arrow: the conversions every batch function shares (the decode tasks, the lifecycle, broker logs)."""

from __future__ import annotations

import os
import typing

import pyarrow as pa


def use_system_memory_pool() -> None:
    """Arrow buffers of this process from the C library's allocator, unless ``ARROW_DEFAULT_MEMORY_POOL`` chose one.

    With pyarrow's default mimalloc pool the batch functions, which build many small arrays from
    Python rows, took 10-15% more CPU (decode and lifecycle alike) than with the system or jemalloc
    pool on the benchmark capture. The pool changes no value; buffers keep the pool they came from.
    """
    _use_pool(pa.system_memory_pool)


def use_task_memory_pool() -> None:
    """Arrow buffers of a decode or lifecycle task from jemalloc where this pyarrow has it (else the C library's
    allocator), unless ``ARROW_DEFAULT_MEMORY_POOL`` chose one.

    A task allocates and frees its batches' buffers all the time (the sort's and the folding's copies, the Parquet
    writers' groups): the other pools kept the high-water mark of those as the worker's RSS, where jemalloc hands
    freed pages back at once (pyarrow's decay 0). The C++ calls (Parquet reads) take Arrow's own default pool,
    which the session sets for its workers (``session.WORKER_ARROW_POOL``); docs/performance.md, "The lifecycle
    task's memory", has the figures of both.
    """
    _use_pool(pa.jemalloc_memory_pool if has_jemalloc() else pa.system_memory_pool)


def has_jemalloc() -> bool:
    """Whether this pyarrow was built with jemalloc."""
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def trim_heap() -> None:
    """Hand the C library heap's free pages back to the system (glibc's ``malloc_trim``; nothing where there is none).

    numpy's arrays come from that heap, whose free pages glibc keeps as the process's RSS once its threshold for
    mapping large blocks alone has grown: the folding plan's arrays of the 2 GB load capture's 3.4M-frame connection
    kept 460 MiB after they were freed (``fold``: the lifecycle's peak 3,764 -> 3,429 MiB with this call after the
    plan). ``pa.system_memory_pool().release_unused()`` does not trim here. Milliseconds: for large steps only."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: typing.Any = None  # the function once looked up; False where there is none


def _use_pool(make) -> None:
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    pool = make()
    if pa.default_memory_pool().backend_name != pool.backend_name:
        pa.set_memory_pool(pool)


def release_memory() -> None:
    """A task's freed memory handed back at its end: the Arrow pool's unused pages (jemalloc's purge) and the C
    heap's (``trim_heap``). Python workers are reused from task to task and stage to stage: without it a worker
    carried what its last task freed into the next (the 2 GB load capture's lifecycle job ran in workers that had
    done the ingest: the largest 854 MiB against 726 MiB in fresh ones)."""
    pa.default_memory_pool().release_unused()
    trim_heap()


def repeated(value: str | None, n: int) -> pa.Array:
    """A string column of ``n`` times ``value``, made in C (a list of ``n`` Python strings converted one by one cost
    10x: 0.32 against 0.03 ms for 8,192 rows)."""
    return pa.repeat(pa.scalar(value, pa.string()), n)


def frame_ids(connection_id, direction, stream_offset):
    """The frames table's ``frame_id`` of rows (Arrow arrays, or chunked): connection, ``s`` (to_server) or ``c``
    (anything else, a null direction too) and stream offset joined by ``-``, a null part left out. The rule both
    ingest jobs write the column by (``ingest_captures.frame_rows``; ``ingest_logs`` in Spark: ``concat_ws`` of the same
    parts); the lifecycle job's direct tasks make the ids of the rows they write by it instead of reading the column."""
    import pyarrow.compute as pc

    to_server = pc.fill_null(pc.equal(direction, "to_server"), False)
    letter = pc.if_else(to_server, pa.scalar("s"), pa.scalar("c"))
    return pc.binary_join_element_wise(connection_id, letter, pc.cast(stream_offset, pa.string()), "-",
                                       null_handling="skip")


def to_struct_array(rows: list[dict], typ: pa.StructType) -> pa.Array:
    """Rows (dicts, extra keys ignored) as a struct array; values the type cannot hold become null."""
    try:
        return _struct_array(rows, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([_coerce(r, typ) for r in rows], type=typ)


def _struct_array(rows: list[dict], typ: pa.StructType) -> pa.Array:
    """``pa.array(rows, typ)``, converting only the fields some row has (the others become null children).

    The frames struct has the columns of every dialect and a codec's rows hold its own
    third of them: looking up the absent ones row by row costs more than the rest.
    """
    present = set().union(*rows)
    fields = [f for f in typ if f.name in present]
    if len(fields) == typ.num_fields or not rows:
        return pa.array(rows, type=typ)
    some = pa.array(rows, type=pa.struct(fields))
    n = len(rows)
    children = [some.field(f.name) if f.name in present else pa.nulls(n, f.type) for f in typ]
    return pa.StructArray.from_arrays(children, fields=list(typ))


def _fits(v: int, typ: pa.DataType) -> bool:
    """Whether the column's integer width holds ``v``: a field can carry a wider value than its column (a 1.0
    channel-max sent as a uint, say); it becomes null, not a failed task."""
    bits = typ.bit_width
    lo, hi = (-(1 << bits - 1), 1 << bits - 1) if pa.types.is_signed_integer(typ) else (0, 1 << bits)
    return lo <= v < hi


def _coerce(row: dict, typ: pa.StructType) -> dict:
    out: dict[str, typing.Any] = {}
    for field in typ:
        v = row.get(field.name)
        if v is None:
            out[field.name] = None
        elif pa.types.is_boolean(field.type):
            out[field.name] = bool(v) if isinstance(v, (bool, int)) else None
        elif pa.types.is_integer(field.type):
            out[field.name] = v if isinstance(v, int) and _fits(v, field.type) else None
        elif pa.types.is_string(field.type):
            out[field.name] = v if isinstance(v, str) else str(v)
        elif pa.types.is_binary(field.type):
            out[field.name] = bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else None
        else:
            out[field.name] = v
    return out
