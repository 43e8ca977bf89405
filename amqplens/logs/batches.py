"""The log job's ``mapInArrow`` function: split rows in, one Arrow row per parsed record out.

Plain Arrow in and out (testable without a JVM), like ``amqplens.decode.pipeline``:
each input row names a byte range of a log file, its format and the number of
its first line; the output has a ``kind`` (event | delivery | frame |
connection | error), the ``log_id`` and one struct column per kind, whose
types the job derives from the table contracts and passes in ``Options``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterable, Iterator

import pyarrow as pa

from amqplens.logs import FORMATS
from amqplens.logs.lines import Line, read_entries
from amqplens.logs.records import error_row
from amqplens.decode.common.arrow import to_struct_array

SPLITS_SCHEMA = pa.schema([
    ("log_id", pa.string()), ("path", pa.string()), ("log_format", pa.string()),
    ("start", pa.int64()), ("end", pa.int64()), ("first_line", pa.int64()),
])  # fmt: skip
KINDS = ("event", "delivery", "frame", "connection", "error")


@dataclasses.dataclass(frozen=True)
class Options:
    structs: dict  # kind -> pa.StructType of its rows
    batch_rows: int = 8192

    @property
    def out_schema(self) -> pa.Schema:
        return pa.schema([("kind", pa.string()), ("log_id", pa.string())] + [(k, self.structs[k]) for k in KINDS])


def split_records(path: str, log_format: str, log_id: str, start: int, end: int, first_line: int) -> Iterator[tuple[str, dict]]:
    """Every record of one split, never raising: a failure becomes an error row at the split's start."""
    fmt = FORMATS.get(log_format)
    try:
        if fmt is None:  # not a format we read: one row says so, with the first line
            first = next(iter(read_entries(path, start, end, first_line, lambda prev, line: False)), None)
            if first is not None:
                yield "error", error_row(first[0], "unknown_log_format",
                                         "not a RabbitMQ log, RabbitMQ trace or Proton frame trace: " + repr(first[0].raw[:200]))
            return
        yield from fmt.parse(read_entries(path, start, end, first_line, fmt.continues), log_format, log_id)
    except OSError as exc:
        yield "error", error_row(Line(first_line, start, b""), "read_error", f"the file could not be read: {exc}")


def row_id(log_id: str, kind: str, row: dict) -> str:
    """Deterministic id of a row: the log, the kind, and where in the file it comes from."""
    key = f"{log_id}|{kind}|{row.get('line_number')}|{row.get('offset')}|{row.get('reason')}"
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def read_log_splits(batches: Iterable[pa.RecordBatch], options: Options) -> Iterator[pa.RecordBatch]:
    rows: list[tuple[str, str, dict]] = []
    for batch in batches:
        for split in batch.to_pylist():
            for kind, row in split_records(split["path"], split["log_format"], split["log_id"], split["start"],
                                           split["end"], split["first_line"]):
                if kind in ("event", "delivery", "error"):  # frames and connections carry their own ids
                    row["row_id"] = row_id(split["log_id"], kind, row)
                rows.append((kind, split["log_id"], row))
                if len(rows) >= options.batch_rows:
                    yield _batch(rows, options)
                    rows = []
    if rows:
        yield _batch(rows, options)


def _batch(rows: list[tuple[str, str, dict]], options: Options) -> pa.RecordBatch:
    columns = {"kind": pa.array([r[0] for r in rows], pa.string()), "log_id": pa.array([r[1] for r in rows], pa.string())}
    for kind in KINDS:
        columns[kind] = to_struct_array([r[2] if r[0] == kind else {} for r in rows], options.structs[kind])
    return pa.RecordBatch.from_pydict(columns, schema=options.out_schema)
