"""Table files written by the executors' Python tasks themselves, for the driver's TableStore to commit.

Only pyarrow and the contracts: a task that writes here needs neither Spark's
writer nor delta-rs. ``TableStore.stage`` names a staging folder,
``StagedWriter`` fills it, ``TableStore.commit_staged`` places and commits the
files (amqplens/lake/store.py).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from amqplens.contracts import Table, table as table_def
from amqplens.decode.common.reports import MetaReport

STAGING = "_staging"
REPLACE_DIR = "_rk"  # staging sub-folder per replace-key value: <table>/_staging/<folder>/_rk=<unit>/
PACKED = "+packed"  # the REPLACE_DIR value of a file that holds several units (a replace-key value never starts with +)
UNITS_KEY = b"amqplens.units"  # a packed file's footer metadata: JSON {unit: rows}
# Rows per Parquet row group. A writer holds its group as Arrow (frames ~650 bytes a row, deliveries ~700)
# until it is encoded at once, so this bounds a worker's extra memory (~10 MB per open file) more than it
# shapes the reads; the lifecycle tasks keep three files open.
GROUP_ROWS = 16384
TRIM_ROWS = 16_384  # a flushed row group of at least this many rows hands its freed pages back to the system


class SchemaMismatch(ValueError):
    pass


def filesystem(root_uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(root_uri if "://" in root_uri else "file://" + root_uri)


def contract_batch(t: Table, struct, given: Mapping[str, pa.Array]) -> pa.RecordBatch:
    """The rows of a batch function's struct column as ``t``'s data columns (no partition column), by name.

    A column comes from ``given`` (the job's own columns), else from the struct
    field of its name, else, for a timestamp column, from the struct's
    ``<name>_us`` microseconds (what Spark's ``timestamp_micros`` gives); a
    nullable column found nowhere is null. Types are the contract's; the
    writer casts and refuses what does not fit.
    """
    names = set(struct.type.names)
    n = len(struct)
    arrays = []
    for c in t.data_columns():
        if c.name in given:
            arrays.append(given[c.name])
        elif c.name in names:
            arrays.append(struct.field(c.name))
        elif c.type == "timestamp" and f"{c.name}_us" in names:
            arrays.append(struct.field(f"{c.name}_us").cast(c.arrow_type))
        elif c.nullable:
            arrays.append(pa.nulls(n, c.arrow_type))
        else:
            raise SchemaMismatch(f"table {t.name}: no values for column {c.name}")
    return pa.RecordBatch.from_arrays(arrays, names=[c.name for c in t.data_columns()])


def current_task() -> int:
    """The Spark partition number of the task running this code (0 outside Spark): what names a task's files."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


@dataclasses.dataclass(frozen=True)
class StagedTable:
    """A staging folder that executors fill with a table's Parquet files themselves (picklable, sent to tasks).

    The Spark path (``TableStore.write``) hands a DataFrame to Spark's row-by-row
    Parquet writer. A batch function that already holds the table's rows as
    Arrow writes them with ``StagedWriter`` instead, column by column, and the
    rows never cross into the JVM; ``TableStore.commit_staged`` then places
    and commits the files like any others.
    """

    table: str
    root: str  # the lake root URI
    folder: str  # under <table>/_staging/
    # units to pack: unit -> its partition folders (``capture_date=2024-01-15``). A task writes the rows of these
    # units into one file per partition (``PACKED``), not one per unit: 300 small captures are 300 files per table
    # otherwise, and every reader of the lake pays per file (``TableStore.stage``).
    pack: Mapping[str, str] = dataclasses.field(default_factory=dict)
    pack_all: bool = False  # every unit packed, under the partition folders its rows are written with

    def writer(self, task: int, group_rows: int = GROUP_ROWS) -> "StagedWriter":
        return StagedWriter(self, task, group_rows)


@dataclasses.dataclass(frozen=True)
class StagedFile(MetaReport):
    """A file a task wrote into a table's staging folder, as the task reports it to the driver."""

    table: str
    unit: str  # the replace-key value (capture) whose rows it holds; of a packed file, its least
    path: str  # relative to the staging folder
    rows: int
    units: dict[str, int] | None = None  # a packed file's units and their rows

    def holds(self) -> dict[str, int]:
        """The file's units and their rows."""
        return dict(self.units) if self.units is not None else {self.unit: self.rows}


def packed_units(meta) -> dict[str, int] | None:
    """A packed file's units and their rows, from its Parquet footer's metadata (``pq.read_metadata``); None for a
    file of one unit or one another writer made."""
    kv = meta.metadata or {}
    raw = kv.get(UNITS_KEY)
    if raw is None:
        return None
    try:
        units = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(units, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in units.items()):
        return None
    return units


def footer_units(path, filesystem=None) -> dict[str, int] | None:
    """``packed_units`` of the file at ``path``; None also when its footer does not read (gone, cut short)."""
    try:
        return packed_units(pq.read_metadata(path, filesystem=filesystem))
    except (OSError, pa.ArrowException):
        return None


class StagedWriter:
    """Writes Arrow batches of one table into a staging folder: one file per (task, unit) in ``_rk=<unit>/``, and
    one per (task, partition) in ``_rk=+packed/`` for the units ``StagedTable.pack`` names (their units and rows in
    the footer's metadata, ``UNITS_KEY``).

    File names depend only on the task's partition number, so a retried task
    replaces its earlier attempt's files instead of adding to them, and a file
    appears under its name only once complete (written under a temporary name,
    then renamed). Batches are gathered into row groups of ``group_rows``.
    """

    def __init__(self, staged: StagedTable, task: int, group_rows: int = GROUP_ROWS):
        self.t = table_def(staged.table)
        self.fs, root_path = filesystem(staged.root)
        self.dir = "/".join([root_path, staged.table, STAGING, staged.folder])
        self.schema = pa.schema([pa.field(c.name, c.arrow_type) for c in self.t.data_columns()])
        self.task, self.group_rows = task, group_rows
        self.pack, self.pack_all = staged.pack, staged.pack_all
        # (part_dirs, unit or PACKED) -> {writer, tmp, rel, pending, pending_rows, rows, units}
        self.files: dict[tuple[str, str], dict] = {}

    def write(self, unit: str, batch: pa.RecordBatch, part_dirs: str = "") -> None:
        """Add rows of ``unit`` (a replace-key value); the batch must hold the table's data columns. ``part_dirs``
        (``capture_date=2024-01-15``): the partition folders the file goes under in the staging folder, for a
        writer whose rows carry their partition values (``TableStore``'s Arrow writes); the driver's ``partitions``
        otherwise."""
        have = set(batch.schema.names)
        missing = [f.name for f in self.schema if f.name not in have]
        if missing:
            raise SchemaMismatch(f"table {self.t.name}: staged rows lack {', '.join(missing)}")
        try:
            cols = [c if c.type == f.type else c.cast(f.type) for f in self.schema for c in [batch.column(f.name)]]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatch(f"table {self.t.name}: staged rows do not fit the contract's types ({exc})") from exc
        packed = self.pack_all or unit in self.pack
        if packed and not self.pack_all:
            part_dirs = self.pack[unit]
        slot = (part_dirs, PACKED if packed else unit)
        f = self.files.get(slot)
        if f is None:
            rel = f"{REPLACE_DIR}={urllib.parse.quote(slot[1], safe='')}/part-t{self.task:05d}.parquet"
            rel = f"{part_dirs}/{rel}" if part_dirs else rel
            tmp = f"{self.dir}/{rel}.tmp"
            self.fs.create_dir(tmp.rsplit("/", 1)[0], recursive=True)
            f = self.files[slot] = {"rel": rel, "tmp": tmp, "pending": [], "pending_rows": 0, "rows": 0, "units": {},
                                    "writer": pq.ParquetWriter(tmp, self.schema, filesystem=self.fs, compression="snappy",
                                                              use_dictionary=self.t.dictionary_columns(),
                                                              write_statistics=self.t.statistics_columns())}
        f["pending"].append(pa.RecordBatch.from_arrays(cols, schema=self.schema))
        f["pending_rows"] += batch.num_rows
        f["units"][unit] = f["units"].get(unit, 0) + batch.num_rows
        if f["pending_rows"] >= self.group_rows:
            self._flush(f)

    def _flush(self, f: dict) -> None:
        rows = f["pending_rows"]
        if rows:
            f["writer"].write_table(pa.Table.from_batches(f["pending"], self.schema), row_group_size=rows)
            f["rows"] += rows
        f["pending"], f["pending_rows"] = [], 0
        # the group's buffers are free now: hand the allocator's free pages back (malloc_trim with the system
        # pool), or a worker's RSS keeps the high-water mark of every task it ran; not after a small group (a small
        # capture's rows: a millisecond each, 1 s of 303 captures' ingest, for pages the next group reuses)
        if rows >= TRIM_ROWS:
            pa.default_memory_pool().release_unused()

    def close(self) -> list[StagedFile]:
        """Finish every file; returns what the driver needs to commit each (``TableStore.commit_staged``)."""
        done = []
        for (_, unit), f in self.files.items():
            self._flush(f)
            units = f["units"] if unit == PACKED else None
            if units is not None:
                f["writer"].add_key_value_metadata({UNITS_KEY: json.dumps(units, sort_keys=True).encode()})
            f["writer"].close()
            self.fs.move(f["tmp"], f"{self.dir}/{f['rel']}")
            done.append(StagedFile(self.t.name, min(units) if units else unit, f["rel"], f["rows"], units))
        self.files = {}
        return done
