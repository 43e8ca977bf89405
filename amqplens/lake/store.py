"""The lake: Delta tables written by Spark executors and committed by delta-rs.

Maven is out of reach, so Spark has no Delta jars here. Executors write plain
Parquet into a staging folder inside the table (Spark's writer, or the Python
tasks themselves through amqplens/lake/staging.py); the driver moves the files
into the table's partition folders and commits them with delta-rs in one
transaction that also removes the files being replaced. Each commit carries
an application transaction id per (job, input unit): when a table already
holds that id, the write is skipped, so a repeated run leaves the table
version unchanged and a run that died between two tables' commits resumes
where it stopped.

Rows are replaced per ``Table.replace_by`` value (a capture): the writer puts
each replace-key value in files of its own, so replacing one capture is an
exact remove+add of whole files. Small units are packed instead (many small
captures in one run: a file per table and task, not per capture; see
``StagedTable.pack``): such a file says its units and their rows in its
footer, and replacing one of its units rewrites it without that unit's rows
in the same commit.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction, create_table_with_add_actions

from amqplens.lake import check as lake_check
from amqplens.lake.staging import (GROUP_ROWS, PACKED, STAGING, UNITS_KEY, SchemaMismatch, StagedFile, StagedTable,
                                   footer_units, packed_units)
from amqplens.lake.staging import REPLACE_DIR as _REPLACE_DIR
from amqplens.lake.staging import filesystem as _filesystem
from amqplens.contracts import Table, table as table_def

log = logging.getLogger(__name__)

# a driver's Arrow write (the metrics on the driver, a few rows per capture) packs the units below this many rows
PACK_ROWS = 200_000
COMMIT_ATTEMPTS = 5  # commits tried when other writers keep committing first: a few concurrent runs, not a storm
# "commit:<table>": the process kills itself (SIGKILL) right after committing that table. For the crash-restart test,
# which needs a run to die between two commits that follow each other within milliseconds. "raise:<table>": the
# commit after that table's raises instead (a failure the run survives: the damage tests' half-committed capture).
FAILPOINT_ENV = "AMQPLENS_FAILPOINT"


class FailPoint(RuntimeError):
    pass


def _failpoint(event: str, name: str) -> None:
    point = os.environ.get(FAILPOINT_ENV)
    if point == f"{event}:{name}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if point == f"raise:{name}" and event == "commit":
        os.environ[FAILPOINT_ENV] = "raised"  # the next commit raises (once: the retry of the capture alone commits)
    elif point == "raised" and event == "before":
        del os.environ[FAILPOINT_ENV]
        raise FailPoint(f"failpoint: the commit of table {name} failed")


class LakeConflict(RuntimeError):
    pass


def _partition_str(value) -> str | None:
    return None if value is None else value.isoformat() if hasattr(value, "isoformat") else str(value)


def _part_dirs(t: Table, values: Mapping[str, str | None]) -> str:
    """A unit's partition folders (``capture_date=2024-01-15``) from its partition values."""
    return "/".join(f"{k}={urllib.parse.quote(values.get(k) or '__HIVE_DEFAULT_PARTITION__', safe='')}" for k in t.partition_by)


# (lake root, table, file) -> a packed file's units and rows (TableStore.file_units); files never change
_UNITS_CACHE: dict[tuple[str, str, str], dict[str, int] | None] = {}


def _write_units(batches, *, staged: StagedTable, rkey: str, partition_by: tuple[str, ...]):
    """mapInArrow body of ``TableStore._arrow_stage``: each (unit, partition values) of a batch to its file, by a
    filter per such group (a few per batch, the rows sorted by unit), never a Python call per row."""
    import pyarrow.compute as pc

    from amqplens.lake.staging import current_task

    writer = staged.writer(current_task())
    keys = [rkey, *partition_by]
    for batch in batches:
        if not batch.num_rows:
            continue
        for group in pa.Table.from_batches([batch]).select(keys).group_by(keys).aggregate([]).to_pylist():
            mask = None
            for k in keys:
                col = batch.column(k)
                m = pc.is_null(col) if group[k] is None else pc.equal(col, pa.scalar(group[k], col.type))
                mask = m if mask is None else pc.and_(mask, m)
            dirs = "/".join(f"{k}={urllib.parse.quote(_partition_str(group[k]) or '__HIVE_DEFAULT_PARTITION__', safe='')}"
                            for k in partition_by)  # the unit's partition: its packed file's too (pack_all)
            writer.write(group[rkey], batch.filter(mask), part_dirs=dirs)
    for f in writer.close():
        yield pa.RecordBatch.from_pydict({"meta": [f.to_meta()]})


def _present(uri: str, size: int) -> bool:
    """Whether the local file is there with its logged size."""
    try:
        return os.stat(uri.removeprefix("file://")).st_size == size
    except OSError:
        return False


def _to_uri(root: str) -> str:
    if "://" in root:
        return root.rstrip("/")
    return os.path.abspath(root)


def conform(df, table: Table):
    """Cast a DataFrame's columns to the contract's types (the TableStore then checks them strictly)."""
    from pyspark.sql import functions as F

    return df.select(*[F.col(c.name).cast(c.spark_type()).alias(c.name) for c in table.columns])


class TableStore:
    # captures whose rows this process derives again whatever the tables' transaction ids say (``amqplens repair``,
    # a rerun of a damaged capture): their earlier units count as not committed
    redo: frozenset[str] = frozenset()

    def __init__(self, spark, root: str, *, staging_max_age_hours: int = 1, pack: bool = True):
        self.spark = spark
        self.pack = pack  # lake.pack_small_units: small units share files (``stage``)
        self.root = _to_uri(root)
        self.staging_max_age_s = staging_max_age_hours * 3600
        self.fs, self._root_path = _filesystem(self.root)

    # ----------------------------------------------------------------- paths
    def uri(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _path(self, name: str, *parts: str) -> str:
        return "/".join([self._root_path, name, *parts])

    def delta(self, name: str) -> DeltaTable | None:
        """The table's snapshot; None when it does not exist or its log holds no commit (a first write cut off).
        A log that does not open raises ``LakeDamaged``, which names the table (``amqplens check``'s line)."""
        local = lake_check.local_root(self.root)
        if local is not None and not lake_check.has_commits(local / name):
            return None
        try:
            return DeltaTable(self.uri(name))
        except TableNotFoundError:
            return None
        except DeltaError as exc:
            problems = lake_check.log_problems(self.root, name) or [lake_check.Problem(name, None, None, str(exc).splitlines()[0])]
            raise lake_check.LakeDamaged(self.root, problems) from exc

    def version(self, name: str) -> int | None:
        dt = self.delta(name)
        return None if dt is None else dt.version()

    def _redone(self, app_id: str) -> bool:
        """Whether ``app_id`` (``amqplens/<job>/<capture id>/...``) belongs to a capture ``redo`` names."""
        parts = app_id.split("/")
        return bool(self.redo) and len(parts) > 2 and parts[2].split("#")[0] in self.redo

    def _done(self, dt: DeltaTable | None, app_id: str) -> bool:
        return dt is not None and not self._redone(app_id) and dt.transaction_version(app_id) is not None

    def committed(self, name: str, app_id: str) -> bool:
        return self._done(self.delta(name), app_id)

    def unit_files(self, name: str, dt: DeltaTable, units: Sequence[str] | None) -> tuple[list[tuple[str, str, int]], bool]:
        """(the snapshot's files holding rows of ``units`` (None: every file) as (URI, path in the table as the log has
        it, size in bytes), whether each of them holds only rows of those units).

        A file's unit is in the Delta log's statistics: amqplens writes one unit per file (``_place_files``), or
        packs several and lists them in the file's footer (``file_units``); a file another writer added (several
        units not listed, or none said) is kept and not exact. Less the local files that are gone or not of their
        logged size (``amqplens check`` names them): a reader of other captures' rows never fails on one capture's
        damage.
        """
        (rkey,) = table_def(name).replace_by
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()  # in file_uris()'s order
        rels, sizes = actions.get("path", []), actions.get("size_bytes", [])
        lo, hi = actions.get(f"min.{rkey}", [None] * len(rels)), actions.get(f"max.{rkey}", [None] * len(rels))
        wanted = None if units is None else set(units)
        local = lake_check.local_root(self.root) is not None
        files, exact = [], True
        for i, (rel, uri) in enumerate(zip(rels, dt.file_uris())):
            one = lo[i] is not None and lo[i] == hi[i]
            if wanted is not None and one and lo[i] not in wanted:
                continue
            if local and not _present(uri, sizes[i]):
                log.warning("table %s: file %s is missing or damaged; its rows are left out (amqplens check)", name, uri)
                continue
            if wanted is not None and not one:
                held = self.file_units(name, rel)
                if held is not None and not wanted.intersection(held):
                    continue
                exact = exact and held is not None and wanted.issuperset(held)
            files.append((uri, rel, sizes[i]))
        return files, exact

    def file_units(self, name: str, rel: str) -> dict[str, int] | None:
        """A packed file's units and their rows, from its footer (None: not packed, or not readable); read once per
        file and process (a file never changes: a replaced one is a new file)."""
        key = (self.root, name, rel)
        if key not in _UNITS_CACHE:
            held = footer_units(self._path(name, urllib.parse.unquote(rel)), self.fs)
            if held is None:
                return None  # not cached: a file that does not read now may be mended (``amqplens repair``)
            _UNITS_CACHE[key] = held
        return _UNITS_CACHE[key]

    # ------------------------------------------------------------------ read
    def read(self, name: str, units: Sequence[str] | None = None):
        """A Spark DataFrame of the table's current snapshot (empty if the table does not exist); with ``units``, of
        the rows of those ``replace_by`` values only.

        The units' rows are their files (``unit_files``), not a filter: a filter of 303 capture ids on 600 files of a
        table cost about 1 s of task time per scan, as much as the scan itself (300 small captures' metrics read
        each table several times). Only a file that does not say its unit is filtered row by row.
        """
        from pyspark.sql import functions as F

        t = table_def(name)
        schema = t.spark_schema()
        dt = self.delta(name)
        files, exact = self.unit_files(name, dt, units) if dt is not None else ([], True)
        if not files:
            return self.spark.createDataFrame([], schema)
        df = (self.spark.read.schema(schema).option("basePath", self.uri(name)).parquet(*(uri for uri, _, _ in files))
              .select(*t.column_names))
        if not exact:
            assert units is not None  # every file is exact when all units are read
            df = df.where(F.col(t.replace_by[0]).isin(list(units)))
        return df

    def read_arrow(self, name: str, columns: Sequence[str], units=None, *, threads: bool = False, where=None,
                   dictionary: Sequence[str] = ()) -> pa.Table:
        """The current snapshot's ``columns`` of the rows whose ``replace_by`` value is one of ``units`` (None: every
        row), read by delta-rs on the driver: no Spark job, for a stage that only looks a few rows up (the captures
        table holds one row per capture). Empty, with no columns, if the table does not exist.

        ``where``: a pyarrow dataset expression the rows must meet, applied batch by batch as the files are read (only
        the rows kept are held). ``dictionary``: string columns read as their Parquet dictionaries' codes (``dataset``).
        ``threads``: scan with Arrow's thread pool. Off by default: a lookup is the last thing a run does before the
        interpreter exits, and a scan's threads still winding down then abort the process (``terminate called
        without an active exception``, exit 134: 6 of 10 runs of a session plus a lookup, none without threads).

        The units' files only (``unit_files``), as ``read``: not ``DeltaTable.to_pyarrow_dataset``, which builds
        each file's guarantee from its statistics (300 captures' 600 files a table: 0.3 s a table before a row is
        read) and a filter on the unit over every file.
        """
        import pyarrow.compute as pc

        dt = self.delta(name)
        if dt is None:
            return pa.table({})
        (rkey,) = table_def(name).replace_by
        files, exact = self.unit_files(name, dt, units)
        # the unit's own column stays text where a filter reads it
        data = self.dataset(name, files, [c for c in dictionary if exact or c != rkey])
        wanted = None if exact else pc.field(rkey).isin(pa.array(list(units or ()), pa.string()))
        if where is not None:
            wanted = where if wanted is None else wanted & where
        return data.to_table(columns=list(columns), use_threads=threads, filter=wanted)

    def dataset(self, name: str, files: Sequence[tuple[str, str, int]], dictionary: Sequence[str] = ()):
        """A pyarrow dataset of ``files`` (``unit_files``' entries) of the table, with the contract's schema (every
        column nullable, as Spark reads them; a column an older file lacks reads as null) and its partition columns.
        Not ``DeltaTable.to_pyarrow_dataset``: it turns the files' statistics into each file's guarantee, and the
        columns without statistics come out as ``column >= null``, which a filter on such a column reads as false:
        every file skipped, no rows. ``dictionary``: string columns read dictionary-encoded (as Parquet holds them)."""
        import pyarrow.dataset as ds

        t = table_def(name)
        parts = ds.partitioning(pa.schema([t.arrow_schema().field(c) for c in t.partition_by]), flavor="hive")
        schema = pa.schema([f.with_nullable(True) if f.name not in dictionary
                            else pa.field(f.name, pa.dictionary(pa.int32(), f.type)) for f in t.arrow_schema()])
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=set(dictionary))) \
            if dictionary else "parquet"
        return ds.dataset([self._path(name, urllib.parse.unquote(rel)) for _, rel, _ in files], schema=schema,
                          format=fmt, filesystem=self.fs, partitioning=parts, partition_base_dir=self._path(name))

    def null_columns(self, name: str, units: Sequence[str] | None, columns: Sequence[str]) -> set[str]:
        """Those of ``columns`` that no row of ``units`` fills, by the Parquet footers' statistics of their files (a
        null count equal to the row group's rows; a file without the column reads it as nulls; a column without
        statistics is not known to be null). A reader can leave them out: most of the frames' columns belong to
        other dialects than a capture's."""
        dt = self.delta(name)
        if dt is None:
            return set()
        files, _ = self.unit_files(name, dt, units)
        null = set(columns)
        for fragment in self.dataset(name, files).get_fragments():
            meta = fragment.metadata
            at = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
            for i in range(meta.num_row_groups):
                rg = meta.row_group(i)
                for c in [c for c in null if c in at]:
                    stats = rg.column(at[c]).statistics
                    if stats is None or not stats.has_null_count or stats.null_count < rg.num_rows:
                        null.discard(c)
                if not null:
                    return null
        return null

    def rows(self, name: str, units) -> int:
        """Rows the table holds for these ``replace_by`` values, from the Delta log's file statistics (no Spark job).

        Every file amqplens writes holds one unit and says so in its min/max statistics (``_place_files``), or
        packs several and counts each one's rows in its footer (``file_units``).
        """
        dt = self.delta(name)
        if dt is None:
            return 0
        (rkey,) = table_def(name).replace_by
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
        wanted = set(units)
        n = 0
        for rel, rows, lo, hi in zip(actions.get("path", []), actions.get("num_records", []),
                                     actions.get(f"min.{rkey}", []), actions.get(f"max.{rkey}", [])):
            if lo == hi:
                n += rows if lo in wanted else 0
            elif lo is not None and hi is not None and any(lo <= u <= hi for u in wanted):
                held = self.file_units(name, rel) or {}
                n += sum(c for u, c in held.items() if u in wanted)
        return n

    # ----------------------------------------------------------------- write
    def check_schema(self, t: Table, df) -> None:
        want = {f.name: f.dataType for f in t.spark_schema().fields}
        have = {f.name: f.dataType for f in df.schema.fields}
        for col in t.column_names:
            if col not in have:
                raise SchemaMismatch(f"table {t.name}: column {col} is missing (contract type {want[col].simpleString()})")
            if have[col] != want[col]:
                raise SchemaMismatch(
                    f"table {t.name}: column {col} has type {have[col].simpleString()}, "
                    f"the contract in amqplens/contracts/ says {want[col].simpleString()}"
                )
        extra = [c for c in have if c not in want]
        if extra:
            raise SchemaMismatch(f"table {t.name}: columns not in the contract: {', '.join(extra)}")

    def write(self, name: str, df, *, units: Mapping[str, str], run_id: str | None = None) -> bool:
        """Replace the rows of each unit (a ``replace_by`` value) with ``df``'s rows, in one commit.

        ``units`` maps each replace-key value written (e.g. a capture_id) to the
        application transaction id of (job, that input). Units whose id the
        table already holds are skipped. Returns True if a commit was made.
        """
        return self.write_many([(name, df)], units=units, run_id=run_id)[name]

    def write_many(self, tables: Sequence[tuple[str, object]], *, units: Mapping[str, str], run_id: str | None = None,
                   parallel: int = 1) -> dict[str, bool]:
        """``write`` for several tables: Spark writes their rows (``parallel`` queries at a time, from driver
        threads), then each is committed in the order given, the last one last (a job's last table marks its units
        done). If any table's rows fail, nothing is committed. Returns table -> whether a commit was made.

        A table's rows are a DataFrame or a function that builds it: a builder runs in the query's own thread, so
        that one query's construction (each DataFrame call is a round trip to the JVM, analysed there) overlaps
        the others' construction and execution.

        Queries at a time: on a small run each query's cost is planning and scheduling, which overlap; on a
        large one they share the executors' cores as one query's stages would.
        """
        run_id = run_id or uuid.uuid4().hex[:12]
        staged: dict[str, tuple[Table, DeltaTable | None, list[AddAction], dict[str, str], str] | None] = {}
        try:
            if parallel > 1 and len(tables) > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="amqplens-write") as pool:
                    futures = {name: pool.submit(self._stage_rows, name, df, units, run_id) for name, df in tables}
                    for name, _ in tables:  # every query ends (or fails) before anything is committed or dropped
                        futures[name].exception()
                    for name, _ in tables:
                        staged[name] = futures[name].result()
            else:
                for name, df in tables:
                    staged[name] = self._stage_rows(name, df, units, run_id)
            done = {}
            for name, _ in tables:
                st = staged[name]
                done[name] = st is not None and self._commit_retrying(*st[:4], run_id)
            return done
        finally:
            for name, st in staged.items():
                if st is not None:
                    self._drop_dir(st[4])

    def _stage_rows(self, name: str, df, units: Mapping[str, str], run_id: str) -> tuple[Table, DeltaTable | None, list[AddAction], dict[str, str], str] | None:
        """Spark writes ``df``'s rows of the pending units into a staging folder, placed as the table's files (not
        committed): (table, snapshot, adds, pending units, staging folder), or None when every unit is committed."""
        t = table_def(name)
        if callable(df):
            df = df()
        self.check_schema(t, df)
        df = df.select(*t.column_names)
        dt = self.delta(name)
        pending = {k: a for k, a in units.items() if not self._done(dt, a)}
        if not pending:
            log.info("table %s: every unit already committed, nothing to do", name)
            return None
        (rkey,) = t.replace_by
        from pyspark.sql import functions as F

        df = df.where(F.col(rkey).isin(list(pending)))
        parts = int(self.spark.conf.get("spark.sql.shuffle.partitions"))
        self._clean_staging(name)
        token = uuid.uuid4().hex[:8]
        staging = self._path(name, STAGING, f"{run_id}-{token}")
        try:
            if len(pending) > 2 * parts:
                # many units (captures): each task would write a file per unit it holds (partitions x units files,
                # each then placed and committed); by unit, each unit's rows are one task's, and the task packs its
                # units into a file per date (lake.pack_small_units; else a file per unit). Written
                # by the tasks with pyarrow, not Spark's writer: its partitioned writer costs about 9 ms a file
                # (302 captures' metrics_settlement: 3.4-3.7 s against 0.7-0.8 s, the same 63k rows and 302 files)
                listed = self._arrow_stage(t, df.repartition(parts, rkey), f"{run_id}-{token}")
                adds = self._place_files(t, staging, f"{run_id}-{token}", only=listed)
            else:
                (
                    df.withColumn(_REPLACE_DIR, F.col(rkey))
                    .write.mode("overwrite")
                    .partitionBy(*t.partition_by, _REPLACE_DIR)
                    .parquet(f"{self.uri(name)}/{STAGING}/{run_id}-{token}")
                )
                # A run's jobs share its run id and may write the same table and partition (captures, then logs):
                # the write's own token keeps their file names apart.
                adds = self._place_files(t, staging, f"{run_id}-{token}")
        except BaseException:
            self._drop_dir(staging)
            raise
        return t, dt, adds, pending, staging

    def _arrow_stage(self, t: Table, df, folder: str) -> set[str]:
        """The tasks write ``df``'s rows into the staging ``folder`` with ``StagedWriter``: a file per (unit,
        partition) a task holds. Returns the files they reported (a failed attempt's leftovers are not among them)."""
        import functools

        (rkey,) = t.replace_by
        # StagedWriter casts the rows to the contract's Arrow types (Spark's may differ, e.g. a timestamp's zone name)
        # many units (captures): a task packs them into a file per partition (TableStore.stage)
        write = functools.partial(_write_units, staged=StagedTable(t.name, self.root, folder, pack_all=self.pack), rkey=rkey,
                                  partition_by=t.partition_by)
        reports = df.sortWithinPartitions(rkey).mapInArrow(write, "meta string").collect()
        return {StagedFile.from_meta(r.meta).path for r in reports}

    def stage(self, name: str, run_id: str, *, pack: Mapping[str, str] | None = None, pack_all: bool = False) -> StagedTable:
        """A staging folder of ``name`` for executors that write the table's files themselves (``StagedWriter``).

        ``pack``: units (unit -> partition folders) whose rows a task writes into one file per partition with the
        other packed units' rather than a file each; ``pack_all``: every unit so (the rows carry their partition
        values). For many small units: a reader pays per file, and replacing a packed unit rewrites its file."""
        table_def(name)
        self._clean_staging(name)
        if not self.pack:
            pack, pack_all = None, False
        return StagedTable(name, self.root, f"{run_id}-{uuid.uuid4().hex[:8]}", dict(pack or {}), pack_all)

    def commit_staged(self, staged: StagedTable, files: list[StagedFile], *, units: Mapping[str, str],
                      partitions: Mapping[str, Mapping[str, str]], run_id: str) -> bool:
        """Place and commit the staged files the tasks reported (``StagedWriter.close``), like ``write`` does.

        Only the reported files count (a file of a failed task attempt that no
        successful attempt reported is left out); ``partitions`` gives each
        unit's partition values, which the executors did not know. Units the
        table already holds are skipped. The staging folder is removed.
        """
        t = table_def(staged.table)
        staging = self._path(t.name, STAGING, staged.folder)
        try:
            dt = self.delta(t.name)
            pending = {k: a for k, a in units.items() if not self._done(dt, a)}
            if not pending:
                log.info("table %s: every unit already committed, nothing to do", t.name)
                return False
            listed, packed = set(), {}
            for f in files:
                held = f.holds()
                if f.table != t.name or not pending.keys() & held.keys():
                    continue
                if f.units is not None:
                    # units another run committed meanwhile leave the file (their rows are that run's)
                    packed[f.path] = held if pending.keys() >= held.keys() else \
                        self._drop_units(t, f"{staging}/{f.path}", set(held) - set(pending))
                listed.add(f.path)
            adds = self._place_files(t, staging, staged.folder, partitions=partitions, only=listed, packed=packed)
            return self._commit_retrying(t, dt, adds, pending, run_id)
        finally:
            self._drop_dir(staging)

    def write_rows(self, name: str, rows: list[dict], *, units: Mapping[str, str], run_id: str) -> bool:
        """``write`` for a few rows the driver holds (e.g. one captures row per file): written with pyarrow, no Spark job."""
        t = table_def(name)
        (rkey,) = t.replace_by
        partitions = {}
        by_unit: dict[str, list[dict]] = {}
        for row in rows:
            by_unit.setdefault(row[rkey], []).append(row)
            partitions[row[rkey]] = {k: _partition_str(row[k]) for k in t.partition_by}
        # a few rows per unit (one captures row, a capture's findings): every unit in its partition's one file
        staged = self.stage(name, run_id, pack={u: _part_dirs(t, p) for u, p in partitions.items()})
        writer = staged.writer(0)
        schema = pa.schema([pa.field(c.name, c.arrow_type) for c in t.data_columns()])
        for unit, unit_rows in by_unit.items():  # one batch per unit (the findings of a capture: thousands of rows)
            writer.write(unit, pa.RecordBatch.from_pylist(unit_rows, schema=schema))
        try:
            # the partition columns are not nullable (amqplens/contracts): each value is a str, not None
            return self.commit_staged(staged, writer.close(), units=units, partitions=cast("dict[str, dict[str, str]]", partitions), run_id=run_id)
        finally:
            self.discard_staged(staged)

    def write_arrow(self, name: str, data: pa.Table, *, units: Mapping[str, str], run_id: str) -> bool:
        """``write`` for rows the driver computed as an Arrow table (the metrics on the driver): written with pyarrow,
        no Spark job; the units of fewer than ``PACK_ROWS`` rows packed into a file per date, the others a file each.
        Every unit of ``units`` is replaced, also one without rows."""
        t = table_def(name)
        (rkey,) = t.replace_by
        partitions: dict[str, dict[str, str]] = {}
        # the rows by unit, each unit's a slice: one sort, not a filter of every row per unit (303 captures)
        data = data.take(pc.sort_indices(data, [(rkey, "ascending")]))
        at, slices = 0, []
        for run in pc.value_counts(data.column(rkey)).to_pylist():
            unit, rows = run["values"], data.slice(at, run["counts"])
            at += run["counts"]
            if unit not in units:
                continue
            # the partition columns are not nullable (amqplens/contracts): each value is a str, not None
            partitions[unit] = {k: cast(str, _partition_str(rows.column(k)[0].as_py())) for k in t.partition_by}
            slices.append((unit, rows))
        # small units share their partition's file (300 small captures: 1 file a table, not 300)
        staged = self.stage(name, run_id, pack={u: _part_dirs(t, partitions[u]) for u, rows in slices
                                                if rows.num_rows < PACK_ROWS})
        writer = staged.writer(0)
        for unit, rows in slices:
            for batch in rows.combine_chunks().to_batches():
                writer.write(unit, batch)
        try:
            return self.commit_staged(staged, writer.close(), units=units, partitions=partitions, run_id=run_id)
        finally:
            self.discard_staged(staged)

    def discard_staged(self, staged: StagedTable) -> None:
        self._drop_dir(self._path(staged.table, STAGING, staged.folder))

    def _drop_dir(self, path: str) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=True)
        try:
            self.fs.delete_dir(path)
        except (FileNotFoundError, OSError):
            pass

    def _place_files(self, t: Table, staging: str, token: str, *, partitions: Mapping[str, Mapping[str, str]] | None = None,
                     only: set[str] | None = None, packed: Mapping[str, Mapping[str, int]] | None = None) -> list[AddAction]:
        """Move the staged files into the table's partition folders; their add actions. A packed file's units
        (``packed``: staged path -> units and rows; else its footer) give its statistics' least and greatest unit."""
        selector = pafs.FileSelector(staging, recursive=True, allow_not_found=True)
        infos = [i for i in self.fs.get_file_info(selector) if i.is_file and i.path.endswith(".parquet")]
        if only is not None:
            infos = [i for i in infos if i.path[len(staging) + 1 :] in only]
        adds = []
        for n, info in enumerate(sorted(infos, key=lambda i: i.path)):
            rel = info.path[len(staging) + 1 :]
            parts = dict(urllib.parse.unquote(p).split("=", 1) for p in rel.split("/")[:-1])
            unit = parts.pop(_REPLACE_DIR)
            held = None
            if unit == PACKED:
                held = (packed or {}).get(rel) or footer_units(info.path, self.fs)
                if not held:
                    continue  # every unit of it left (committed by another run): nothing of it to add
                unit = min(held)
            parts = {**(partitions or {}).get(unit, {}), **parts}
            part_dirs = "/".join(f"{k}={urllib.parse.quote(parts[k], safe='')}" for k in t.partition_by)
            rel_dest = f"{part_dirs}/part-{token}-{n:05d}.parquet"
            dest = self._path(t.name, rel_dest)
            self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
            self.fs.move(info.path, dest)
            meta = pq.read_metadata(dest, filesystem=self.fs)
            (rkey,) = t.replace_by
            stats = {"numRecords": meta.num_rows, "minValues": {rkey: unit}, "maxValues": {rkey: max(held) if held else unit},
                     "nullCount": {rkey: 0}}
            adds.append(
                AddAction(
                    path=rel_dest,
                    size=self.fs.get_file_info(dest).size,
                    partition_values={k: (None if parts[k] == "__HIVE_DEFAULT_PARTITION__" else parts[k]) for k in t.partition_by},
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=json.dumps(stats),
                )
            )
        return adds

    def _removals(self, t: Table, dt: DeltaTable | None, units: set[str]) -> tuple[list[RemoveAction], list[AddAction]]:
        """The files that replacing ``units`` removes, and the files that take the place of packed ones holding other
        units too (rewritten without the replaced units' rows, already in the table's folder, not committed)."""
        if dt is None:
            return [], []
        (rkey,) = t.replace_by
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
        lo, hi = actions.get(f"min.{rkey}", []), actions.get(f"max.{rkey}", [])
        removes, rewritten = [], []
        now = int(time.time() * 1000)
        for i, path in enumerate(actions.get("path", [])):
            if lo[i] is None or hi[i] is None:
                raise LakeConflict(f"table {t.name}: file {path} has no {rkey} statistics; it was not written by amqplens")
            if lo[i] == hi[i] and lo[i] not in units or not any(lo[i] <= u <= hi[i] for u in units):
                continue
            if lo[i] != hi[i]:
                held = self.file_units(t.name, path)
                local = lake_check.local_root(self.root) is not None
                if held is None and (not local or _present(self._path(t.name, urllib.parse.unquote(path)),
                                                           actions["size_bytes"][i])):
                    raise LakeConflict(f"table {t.name}: file {path} mixes several {rkey} values without saying which "
                                       "(not written by amqplens) and cannot be replaced file-wise")
                # held None: a packed file gone or cut short; its rows are lost, and `amqplens check` named its
                # captures (those of the commit that added it), which the rerun replacing this one redoes: removed
                if held is not None and not units.intersection(held):
                    continue
                if held is not None and not units.issuperset(held):
                    rewritten += self._rewrite_without(t, path, units)
            removes.append(
                RemoveAction(
                    path=path,
                    data_change=True,
                    deletion_timestamp=now,
                    size=actions["size_bytes"][i],
                    partition_values={k: _partition_str(actions[f"partition.{k}"][i]) for k in t.partition_by},
                )
            )
        return removes, rewritten

    def _rewrite_without(self, t: Table, rel: str, units: set[str]) -> list[AddAction]:
        """A packed file's rows less those of ``units``, as a new file of the table beside it (its add action)."""
        staging = self._path(t.name, STAGING, f"rewrite-{uuid.uuid4().hex[:8]}")
        src = self._path(t.name, urllib.parse.unquote(rel))
        token = uuid.uuid4().hex[:8]
        folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
        tmp = f"{staging}/{folder}/{_REPLACE_DIR}={urllib.parse.quote(PACKED, safe='')}/part-rewrite.parquet"
        self.fs.create_dir(tmp.rsplit("/", 1)[0], recursive=True)
        try:
            kept = self._drop_units(t, src, units, dest=tmp)
            return self._place_files(t, staging, token, packed={tmp[len(staging) + 1:]: kept}) if kept else []
        finally:
            self._drop_dir(staging)

    def _drop_units(self, t: Table, path: str, units: set[str], *, dest: str | None = None) -> dict[str, int]:
        """The packed file at ``path`` without the rows of ``units``, written to ``dest`` (default: in its place, a
        staged file); the units left and their rows."""
        (rkey,) = t.replace_by
        f = pq.ParquetFile(path, filesystem=self.fs)
        held = packed_units(f.metadata) or {}
        kept = {u: n for u, n in held.items() if u not in units}
        data = f.read()
        f.close()
        data = data.filter(pc.invert(pc.is_in(data.column(rkey), pa.array(sorted(units), pa.string()))))
        with pq.ParquetWriter(dest or path, data.schema, filesystem=self.fs, compression="snappy") as w:
            w.add_key_value_metadata({UNITS_KEY: json.dumps(kept, sort_keys=True).encode()})
            w.write_table(data, row_group_size=GROUP_ROWS)
        return kept

    def _commit_retrying(self, t: Table, dt, adds, pending: Mapping[str, str], run_id: str) -> bool:
        """Commit; when another writer committed first, re-read the table and try again (``COMMIT_ATTEMPTS``).

        The placed files stay valid: the retry only recomputes which files the units replace. If the
        other writer committed these very units (same transaction ids), ours are redundant and removed.
        """
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                _failpoint("before", t.name)
                removes, rewritten = self._removals(t, dt, set(pending))
                try:
                    self._commit(t, dt, adds + rewritten, removes, pending, run_id)
                except BaseException:
                    for add in rewritten:  # this attempt's rewrites of packed files: not in the table
                        self.fs.delete_file(self._path(t.name, urllib.parse.unquote(add.path)))
                    raise
                _failpoint("commit", t.name)
                return True
            except LakeConflict as exc:
                dt = self.delta(t.name)
                if dt is not None and all(self._done(dt, a) for a in pending.values()):
                    log.info("table %s: another writer committed the same units first; run %s adds nothing", t.name, run_id)
                    for add in adds:
                        self.fs.delete_file(self._path(t.name, add.path))
                    return False
                if attempt == COMMIT_ATTEMPTS:
                    raise LakeConflict(f"{exc} (tried {COMMIT_ATTEMPTS} times)") from exc.__cause__
                # another run committed other captures to the table first: routine, the retry on its snapshot is
                # the commit; only the last attempt's failure is the user's business
                log.info("table %s: another run committed first; committing again on its snapshot (attempt %d)",
                         t.name, attempt + 1)
        raise AssertionError("unreachable: the last attempt returns or raises")  # for mypy: the loop never falls through

    def _commit(self, t, dt, adds, removes, pending: Mapping[str, str], run_id: str) -> None:
        props = CommitProperties(
            app_transactions=[Transaction(app_id=a, version=1) for a in sorted(pending.values())],
            custom_metadata={"amqplens.run_id": run_id, "amqplens.units": ",".join(sorted(pending))},
            # delta-rs would otherwise retry a lost commit itself, blind to our transaction ids: two runs of the
            # same capture would both land (duplicate rows). _commit_retrying re-checks the ids and retries.
            max_commit_retries=0,
        )
        schema = Schema.from_arrow(t.arrow_schema())
        try:
            if dt is None:
                create_table_with_add_actions(
                    self.uri(t.name), schema, adds, mode="error", partition_by=list(t.partition_by),
                    name=t.name, description=t.doc, commit_properties=props,
                )
            else:
                dt.create_write_transaction(
                    adds + removes, mode="append", schema=schema, partition_by=list(t.partition_by), commit_properties=props
                )
        except (CommitFailedError, DeltaError) as exc:
            raise LakeConflict(
                f"table {t.name}: the commit of run {run_id} failed ({exc}); another writer may have changed the "
                "same captures at the same time. Nothing was changed by this run; run it again."
            ) from exc

    def _clean_staging(self, name: str) -> None:
        """Remove staging folders of crashed runs (older than the configured age)."""
        base = self._path(name, STAGING)
        now = time.time()
        for info in self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
            mtime = info.mtime.timestamp() if info.mtime else now
            if info.type == pafs.FileType.Directory and now - mtime >= self.staging_max_age_s:
                self.fs.delete_dir(info.path)

    def vacuum(self, name: str, retention_hours: int = 168) -> list[str]:
        """Delete files no snapshot within the retention references (orphans of crashed commits included)."""
        dt = self.delta(name)
        if dt is None:
            return []
        return dt.vacuum(retention_hours=retention_hours, enforce_retention_duration=False, dry_run=False)

    def vacuum_kept(self, name: str, retention_hours: int) -> int:
        """Files the current snapshot no longer references that ``vacuum`` keeps: removed (a capture's rows replaced)
        less than ``retention_hours`` ago, so that a reader of an older snapshot still finds them."""
        dt = self.delta(name)
        if dt is None:
            return 0
        now = dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)
        later = dt.vacuum(retention_hours=retention_hours, enforce_retention_duration=False, dry_run=True)
        return len(set(now) - set(later))
