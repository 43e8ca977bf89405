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
# ... but the frames' groups are larger: the most rows of any table (12.4M of the 2 GB load capture) and the most
# columns, whose every row group costs per column (a 0-9-1 capture's frames written 0.72-0.79 us a row in groups of
# 16k rows, 0.58-0.66 in groups of 64k); about 41 MiB of Arrow a group, in the one frames file a decode task has open
GROUP_ROWS_OF = {"frames": 65536}
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

    def writer(self, task: int, group_rows: int | None = None) -> "StagedWriter":
        """A task's writer; ``group_rows``: rows per row group (default: the table's, ``GROUP_ROWS_OF``)."""
        return StagedWriter(self, task, GROUP_ROWS_OF.get(self.table, GROUP_ROWS) if group_rows is None else group_rows)


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


def read_file(path, table: str, filesystem=None) -> pa.Table:
    """A file of ``table`` (staged or committed) with the contract's data columns, in their order: those the file
    left out (``_Slot``) as nulls, as the lake's readers give them."""
    got = pq.read_table(path, filesystem=filesystem)
    columns = [got.column(c.name) if c.name in got.column_names else pa.nulls(got.num_rows, c.arrow_type)
               for c in table_def(table).data_columns()]
    return pa.Table.from_arrays(columns, names=[c.name for c in table_def(table).data_columns()])


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
        # the columns a file may leave out while no row of it fills them (``_Slot``): nullable, and not the replace key
        self.omissible = {c.name for c in self.t.data_columns() if c.nullable and c.name not in self.t.replace_by}
        self.task, self.group_rows = task, group_rows
        self.pack, self.pack_all = staged.pack, staged.pack_all
        self.files: dict[tuple[str, str], _Slot] = {}  # (part_dirs, unit or PACKED) -> its files

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
            base = f"{REPLACE_DIR}={urllib.parse.quote(slot[1], safe='')}/part-t{self.task:05d}"
            f = self.files[slot] = _Slot(self, f"{part_dirs}/{base}" if part_dirs else base, slot[1], packed)
        f.pending.append(pa.RecordBatch.from_arrays(cols, schema=self.schema))
        f.pending_rows += batch.num_rows
        f.pending_units[unit] = f.pending_units.get(unit, 0) + batch.num_rows
        if f.pending_rows >= self.group_rows:
            f.flush()

    def close(self) -> list[StagedFile]:
        """Finish every file; returns what the driver needs to commit each (``TableStore.commit_staged``)."""
        done = []
        for f in self.files.values():
            f.flush()
            done += f.finish()
        self.files = {}
        return done


class _Slot:
    """The files of one (partition folders, unit or ``PACKED``) of a ``StagedWriter``: a row group at a time.

    A file leaves out the nullable columns (not the replace key) that no row of its first row group fills: most of
    the frames' 87 columns belong to other dialects than a capture's, and Parquet encodes a column of nulls value by
    value (58 such columns of a 0-9-1 capture's frames were about a third of the frames' write). Every reader of the
    lake reads a column a file lacks as nulls (``TableStore.dataset``, Spark's Parquet reader with the contract's
    schema, delta-rs). A later row group that fills a column left out ends the file and begins the next (``-1``,
    ``-2``, ...), which keeps the columns the file before it had and those the group fills: a slot has at most one
    file more than the columns that can be left out, and most have one. Names depend only on the task and the rows, so a retried task writes the same."""

    def __init__(self, writer: StagedWriter, base: str, unit: str, packed: bool) -> None:
        self.w, self.base, self.unit, self.packed = writer, base, unit, packed
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_units: dict[str, int] = {}
        self.done: list[StagedFile] = []  # the files finished
        self.pq: pq.ParquetWriter | None = None  # the file being written, its columns, path, rows and units
        self.columns: list[str] = []
        self.rel = self.tmp = ""
        self.rows = 0
        self.units: dict[str, int] = {}

    def flush(self) -> None:
        rows = self.pending_rows
        if not rows and self.pq is not None:  # nothing to write (a unit's empty batches still count, with 0 rows)
            for unit in self.pending_units:
                self.units.setdefault(unit, 0)
            self.pending, self.pending_units = [], {}
            return
        table = pa.Table.from_batches(self.pending, self.w.schema)
        self.pending, self.pending_rows = [], 0
        filled = {c for c in self.w.omissible if table.column(c).null_count < rows} if rows else set(self.w.omissible)
        if self.pq is None or filled - set(self.columns):
            # the next file keeps what this one had too: the columns only grow, so a slot's files are at most one
            # more than its columns that can be left out, whatever order the groups fill them in
            self._next(filled | set(self.columns) if rows else None)
        assert self.pq is not None  # _next opened it
        if rows:
            self.pq.write_table(table.select(self.columns), row_group_size=rows)
            self.rows += rows
        for unit, n in self.pending_units.items():
            self.units[unit] = self.units.get(unit, 0) + n
        self.pending_units = {}
        del table
        # the group's buffers are free now: hand the allocator's free pages back (malloc_trim with the system
        # pool), or a worker's RSS keeps the high-water mark of every task it ran; not after a small group (a small
        # capture's rows: a millisecond each, 1 s of 303 captures' ingest, for pages the next group reuses)
        if rows >= TRIM_ROWS:
            pa.default_memory_pool().release_unused()

    def _next(self, filled: set[str] | None) -> None:
        """The file written ends (if one is) and the next begins, with the columns ``filled`` names besides the ones
        no file may leave out (``None``: every column, a file of no rows)."""
        self._end()
        w = self.w
        keep = [f.name for f in w.schema if filled is None or f.name not in w.omissible or f.name in filled]
        self.columns = keep
        n = len(self.done)
        self.rel = f"{self.base}.parquet" if not n else f"{self.base}-{n}.parquet"
        self.tmp = f"{w.dir}/{self.rel}.tmp"
        w.fs.create_dir(self.tmp.rsplit("/", 1)[0], recursive=True)
        self.pq = pq.ParquetWriter(self.tmp, pa.schema([w.schema.field(c) for c in keep]), filesystem=w.fs,
                                   compression="snappy", use_dictionary=[c for c in w.t.dictionary_columns() if c in keep],
                                   write_statistics=[c for c in w.t.statistics_columns() if c in keep])
        self.rows, self.units = 0, {}

    def _end(self) -> None:
        if self.pq is None:
            return
        units = self.units if self.packed else None
        if units is not None:
            self.pq.add_key_value_metadata({UNITS_KEY: json.dumps(units, sort_keys=True).encode()})
        self.pq.close()
        self.pq = None
        self.w.fs.move(self.tmp, f"{self.w.dir}/{self.rel}")
        self.done.append(StagedFile(self.w.t.name, min(units) if units else self.unit, self.rel, self.rows, units))

    def finish(self) -> list[StagedFile]:
        """Every file of the slot, the last one finished."""
        self._end()
        return self.done
