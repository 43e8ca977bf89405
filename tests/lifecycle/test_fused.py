"""The fused lifecycle without Spark: the decode task's batch function against ``lifecycle_batches`` on its frames.

Every capture fixture goes through ``ingest_captures.decode_and_stage`` with the lifecycle staged (what a
decode task runs), in small batches so connections span many frame batches and a connection's batch comes
long before its last frames; its lifecycle files must hold the rows ``stage_lifecycle`` (what the lifecycle
job's tasks run) writes from the same frames files, sorted as the job sorts them. The Spark jobs and the
commits are tests/e2e/test_fused_lifecycle.py's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools

import pyarrow as pa
import pytest

from amqplens.decode import pipeline
from amqplens.decode.common.reports import ConnectionsClosed
from amqplens.lifecycle import amqp091
from amqplens.lifecycle.batches import lifecycle_batches
from amqplens.lifecycle.fused import ConnectionLifecycle, TaskProgress
from amqplens.decode.tls import KeyLog
from amqplens.jobs import ingest_captures
from amqplens.jobs import lifecycle
from amqplens.config import load_config
from amqplens.lake.staging import StagedTable, read_file
from tests.lifecycle.captures import DATA

CAPTURES = sorted(p for p in DATA.rglob("*.pcap*") if "fuzz" not in p.parts)
KEYLOGS = sorted(str(p) for p in (DATA / "tls").glob("*.keylog"))


def _packets(options):
    splits = pa.RecordBatch.from_pylist(
        [{"capture_id": f"cap{i:02d}", "path": str(p), "start": 0, "end": p.stat().st_size, "split_index": 0}
         for i, p in enumerate(CAPTURES)], schema=pipeline.SPLITS_SCHEMA)
    packets = pa.Table.from_batches(list(pipeline.read_splits([splits], options)))
    return packets.sort_by([(k, "ascending") for k in ("capture_id", "flow_key", "ts_us", "record_offset")])


@functools.lru_cache(maxsize=None)
def _options(batch_rows: int) -> pipeline.Options:
    options = dataclasses.replace(ingest_captures.options_from(load_config()), batch_rows=batch_rows)
    return dataclasses.replace(options, decode_options=dataclasses.replace(options.decode_options,
                                                                         tls_keys=KeyLog.read(KEYLOGS)))


def _staged(root, folder: str) -> dict[str, StagedTable]:
    return {kind: StagedTable(t.name, str(root), folder) for kind, t in lifecycle.OUTPUTS}


def _read(root, table: str, folder: str) -> list:
    files = sorted((root / table / "_staging" / folder).rglob("*.parquet"))
    rows = [r for f in files for r in read_file(f, table).to_pylist()]
    return sorted(rows, key=repr)


def _decode(tmp_path, batch_rows: int, chunk_frames: int = 0, progress=None) -> list[pa.RecordBatch]:
    """Every fixture through a decode task with the fused lifecycle (its output batches)."""
    options = _options(batch_rows)
    staged = {name: StagedTable(name, str(tmp_path), "decode") for name in ingest_captures.STAGED_TABLES}
    return list(ingest_captures.decode_and_stage(_packets(options).to_batches(max_chunksize=batch_rows), options, staged,
                                                 task=0, lifecycle_staged=_staged(tmp_path, "fused"),
                                                 chunk_frames=chunk_frames, progress=progress,
                                                 max_held_frames=None if progress is None else 1500))


def _decoded(tmp_path, monkeypatch, batch_rows: int, chunk_frames: int, progress=None):
    """``_decode`` of every fixture: (the task's ``ConnectionLifecycle``, the captures it left to the job)."""
    from amqplens.lifecycle import fused

    made = []

    class Counted(fused.ConnectionLifecycle):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(fused, "ConnectionLifecycle", Counted)
    out = _decode(tmp_path, batch_rows, chunk_frames, progress)
    left = {b.column("capture_id")[0].as_py() for b in out if b.column("kind")[0].as_py() == ingest_captures.LIFECYCLE_FAILED}
    (life,) = made
    assert set(life.failed) == left
    return life, left


def _same_as_the_job(tmp_path, left: set[str], least: int = 500) -> None:
    """The fused rows of every capture not ``left`` to the job are those ``stage_lifecycle`` (the machines, frame by
    frame) writes from the same frames files, sorted as the job sorts them."""
    frames = pa.concat_tables(read_file(f, "frames") for f in (tmp_path / "frames" / "_staging" / "decode").rglob("*.parquet"))
    read = [c for c in (*lifecycle.FRAME_COLUMNS, "ts") if c in frames.column_names]
    ordered = frames.select(read).sort_by([(k, "ascending") for k in ("connection_id", *lifecycle.SORT_KEYS)])
    fn = functools.partial(lifecycle_batches, **lifecycle.structs())
    list(lifecycle.stage_lifecycle(ordered.to_batches(max_chunksize=1000), fn, _staged(tmp_path, "job"), task=0))
    sizes = {}
    for _, t in lifecycle.OUTPUTS:
        fused, job = _read(tmp_path, t.name, "fused"), _read(tmp_path, t.name, "job")
        if left:  # the rows of a capture left to the job are not committed: the others' must be the job's
            fused = [r for r in fused if r["capture_id"] not in left]
            job = [r for r in job if r["capture_id"] not in left]
        assert fused == job, t.name
        sizes[t.name] = len(job)
    assert min(sizes.values()) > least, sizes  # compared rows of every table, those of the captures left out aside


@pytest.mark.parametrize(("batch_rows", "chunk_frames"), [(61, 0), (8192, 0), (61, 7), (8192, 40), (500, 300)])
def test_the_decode_task_writes_the_rows_the_lifecycle_job_would(tmp_path, monkeypatch, batch_rows, chunk_frames):
    """Every fixture, each connection held whole or (``chunk_frames``) a long one done a chunk at a time as its
    frames come: the lifecycle job's rows."""
    life, left = _decoded(tmp_path, monkeypatch, batch_rows, chunk_frames)
    # held whole, nothing is left to the job; in chunks, a capture is where a connection passed a chunk and then could
    # not be cut (no place to cut within four chunks: with chunks of 7 frames, many) or not be modelled
    assert len(left) <= {0: 0, 7: 8, 40: 2, 300: 2}[chunk_frames], sorted(life.failed.values())
    # not vacuous: connections are done in chunks; some are given back (done whole: not modelled from their start)
    assert life.chunked >= {0: 0, 7: 40, 40: 20, 300: 3}[chunk_frames] and (life.chunked > 0) == bool(chunk_frames)
    assert bool(life.whole_only) == bool(chunk_frames)
    _same_as_the_job(tmp_path, left)


class _Pinned:
    """A task's progress that says a tenth of every capture is read, whatever was: the frames of connections not yet
    whole are projected to ten times what they are."""

    def fraction(self, capture_id: str) -> float:
        return 0.1


def test_frames_passed_in_chunks_count_for_the_projection(tmp_path, monkeypatch):
    """Every fixture (49 captures) in one task with a limit of 1,500 frames and a progress pinned at a tenth (so a
    capture is projected past the limit once 150 frames of its connections not yet whole came): the same captures are
    left to the job by the projection whether their connections are held whole or passed in chunks of 7 frames as
    they come (a connection's frames count until it is whole, wherever they are), and the rows of the others are
    the job's."""
    def projected(life):
        return {c for c, why in life.failed.items() if "on course for more than" in why}

    whole, _ = _decoded(tmp_path / "whole", monkeypatch, 61, 0, progress=_Pinned())
    chunked, left = _decoded(tmp_path / "chunked", monkeypatch, 61, 7, progress=_Pinned())
    assert len(projected(whole)) >= 15 and projected(chunked) == projected(whole), (projected(whole), chunked.failed)
    assert chunked.chunked >= 8  # in the captures not projected away
    _same_as_the_job(tmp_path / "chunked", left, least=50)


def _frames(connection: str, capture: str, offsets: list[int]) -> pa.RecordBatch:
    """Frames-table rows (every column the machines read) of 0-9-1 heartbeats."""
    blank = dict.fromkeys(c for c in lifecycle.FRAME_COLUMNS if c != "ts_us")
    return pa.RecordBatch.from_pylist([
        blank | {"connection_id": connection, "capture_id": capture, "direction": "to_server", "stream_offset": o,
                 "ts": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=o), "dialect": "0-9-1",
                 "frame_type": "heartbeat", "channel": 0} for o in offsets])


def test_frames_of_a_connection_after_it_ran_leave_the_capture_to_the_job():
    fused = ConnectionLifecycle(**lifecycle.structs())
    meta = [ConnectionsClosed(2).to_meta()]
    for _ in (*fused.frames("a", _frames("a1", "a", [8, 20])), *fused.closed("a", ["a1"], meta),
              *fused.frames("b", _frames("b1", "b", [8])), *fused.closed("b", ["b1"], [ConnectionsClosed(1).to_meta()]),
              *fused.frames("a", _frames("a1", "a", [40])), *fused.finish()):
        pass
    assert list(fused.failed) == ["a"] and "after it was whole" in fused.failed["a"]
    assert fused.done == {"a1", "b1"} and fused.held == {}


def test_a_capture_holding_more_frames_than_the_limit_goes_to_the_job():
    """lifecycle.fused_max_held_frames bounds a task's memory: capture a's long connection passes the limit of 3 held
    frames and a is left to the lifecycle job; b, whole within the limit, is kept; nothing stays held."""
    fused = ConnectionLifecycle(**lifecycle.structs(), max_held_rows=3)
    out = [*fused.frames("b", _frames("b1", "b", [1, 2])), *fused.closed("b", ["b1"], [ConnectionsClosed(2).to_meta()]),
           *fused.frames("a", _frames("a1", "a", [8, 20, 30])), *fused.frames("a", _frames("a1", "a", [40])),
           *fused.closed("a", ["a1"], [ConnectionsClosed(4).to_meta()]), *fused.finish()]
    assert list(fused.failed) == ["a"] and "fused_max_held_frames" in fused.failed["a"]
    assert fused.held == {} and fused.held_rows == 0
    kept = {c for b in out if b.num_rows for c in b.column("capture_id").to_pylist()}
    assert kept <= {"b"}


def test_a_capture_on_course_to_pass_the_limit_goes_to_the_job_before_it_is_held():
    """A direct task knows its captures' packets (``TaskProgress``): as capture a's frames come, the task holds 8 frames
    of connections not yet whole at 10% of a's 100 packets, on course for 80 against a limit of 16, so a (whose batch
    it is, as with the limit itself) is left to the job then, not at the 17th frame; capture b's 2 frames at 50% of its
    packets (on course for 4) are kept. Bad progress tried: a capture with no packets planned (never projected) and
    more read than planned (whole: never projected)."""
    progress = TaskProgress()
    progress.plan("a", 100)
    progress.plan("b", 4)
    progress.plan("c", 0)
    progress.plan("d", 2)
    fused = ConnectionLifecycle(**lifecycle.structs(), max_held_rows=16, progress=progress)
    progress.add("a", 10)
    progress.add("b", 2)
    progress.add("c", 10)
    progress.add("d", 9)
    out = [*fused.frames("b", _frames("b1", "b", [1, 2])), *fused.frames("c", _frames("c1", "c", [1, 2])),
           *fused.frames("d", _frames("d1", "d", [1, 2])), *fused.frames("a", _frames("a1", "a", [8, 20]))]
    assert list(fused.failed) == ["a"] and "on course for more than 16" in fused.failed["a"]
    assert "a1" not in fused.held and fused.held_rows == 6
    out += [*fused.closed("b", ["b1"], [ConnectionsClosed(2).to_meta()]), *fused.closed("c", ["c1"], [ConnectionsClosed(2).to_meta()]),
            *fused.closed("d", ["d1"], [ConnectionsClosed(2).to_meta()]), *fused.finish()]
    assert list(fused.failed) == ["a"] and fused.held == {} and fused.held_rows == 0
    kept = {c for b in out if b.num_rows for c in b.column("capture_id").to_pylist()}
    assert kept <= {"b", "c", "d"}
    assert progress.fraction("c") == 0.0 and progress.fraction("d") == 1.0 and progress.fraction("e") == 0.0


def test_a_capture_the_machines_raise_on_is_named_and_the_others_are_kept(tmp_path, monkeypatch):
    """Machines that raise (a bug: they never should) on one capture: the task goes on, names it in a
    ``lifecycle_failed`` row (the driver then commits no lifecycle file of it; so are the captures whose connections
    were fed in the same batch, for the lifecycle job to derive), and every other capture's rows are the same as
    without the failure."""
    clean = _decode(tmp_path / "clean", 61)  # small batches: the victim's is a few captures
    # tx.pcap: a transaction, which the array path leaves to the machines (array091.py), so the machines run on it
    victim = f"cap{CAPTURES.index(DATA / 'broker' / 'tx.pcap'):02d}"
    original = amqp091.Connection091.on_frame

    def on_frame(self, row, *args):
        if row["capture_id"] == victim:
            raise RuntimeError("machine bug")
        return original(self, row, *args)

    monkeypatch.setattr(amqp091.Connection091, "on_frame", on_frame)
    out = _decode(tmp_path / "broken", 61)
    failed = {b.column("capture_id")[0].as_py(): b.column("meta")[0].as_py() for b in out
              if b.column("kind")[0].as_py() == ingest_captures.LIFECYCLE_FAILED}
    assert failed[victim] == "RuntimeError: machine bug" and set(failed.values()) == {"RuntimeError: machine bug"}
    assert len(failed) < len(CAPTURES) / 2  # the others of the victim's batch, not the task
    assert [b for b in clean if b.column("kind")[0].as_py() == ingest_captures.LIFECYCLE_FAILED] == []
    for _, t in lifecycle.OUTPUTS:
        kept = [r for r in _read(tmp_path / "broken", t.name, "fused") if r["capture_id"] not in failed]
        assert kept and kept == [r for r in _read(tmp_path / "clean", t.name, "fused") if r["capture_id"] not in failed], t.name


def test_read_sorted_gives_the_rows_in_the_lifecycles_order():
    """The lifecycle job's direct tasks' read (amqplens/jobs/lifecycle.py): shuffled rows come out in (connection_id,
    ts, stream_offset, direction) order, nulls first, as Arrow's sort of the same keys gives them; rows already in
    that order come out as they are (the shortcut that takes no copy)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from amqplens.jobs.lifecycle import read_sorted
    from amqplens.lifecycle.fused import sort_options

    rng = np.random.default_rng(3)
    n = 500
    table = pa.table({
        "connection_id": pa.array([f"c{int(i)}" for i in rng.integers(0, 5, n)]),
        "ts": pa.array([None if k % 50 == 0 else int(t) for k, t in enumerate(rng.integers(0, 40, n))], pa.int64()),
        "stream_offset": pa.array(rng.integers(0, 3, n), pa.int64()),
        "direction": pa.array([None if k % 77 == 0 else ("to_server", "to_client")[int(d)]
                               for k, d in enumerate(rng.integers(0, 2, n))]),
        "row": pa.array(np.arange(n)),
    })
    everything = ds.field("row") >= 0
    got = read_sorted(ds.dataset(table), table.column_names, everything)
    want = table.take(pc.sort_indices(table, options=sort_options()))
    assert got.equals(want) and not got.equals(table)
    again = read_sorted(ds.dataset(want), want.column_names, everything)
    assert again.equals(want)
    # the direct tasks read direction (and connection ids, were they so read) dictionary-encoded, each row group with
    # its own dictionary: ranked by value, the same order, nulls first
    parts = []
    for batch in table.to_batches(max_chunksize=120):
        cols = [c.dictionary_encode() if name in ("connection_id", "direction") else c
                for name, c in zip(batch.schema.names, batch.columns)]
        parts.append(pa.RecordBatch.from_arrays(cols, names=batch.schema.names))
    encoded = pa.Table.from_batches(parts)
    assert encoded.schema.field("direction").type == pa.dictionary(pa.int32(), pa.string())
    got = read_sorted(ds.dataset(encoded), encoded.column_names, everything)
    assert got.column("row").equals(want.column("row"))
    assert got.column("direction").cast(pa.string()).equals(want.column("direction"))


@pytest.mark.parametrize("sliced_runs", [0, 64])
def test_read_sorted_puts_runs_in_order_together(monkeypatch, sliced_runs):
    """Connections written each in its sorted order, the connections out of order (as a direct task reads several
    of them): the same rows as Arrow's sort, whether the runs are put together as slices (a few) or copied (many:
    ``SLICED_RUNS`` 0), and from a table of several chunks."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from amqplens.jobs import lifecycle as job
    from amqplens.lifecycle import chunks
    from amqplens.lifecycle.fused import sort_options

    monkeypatch.setattr(chunks, "SLICED_RUNS", sliced_runs)
    parts = []
    for c in ("c3", "c1", "c2"):
        m = 40
        part = pa.table({"connection_id": pa.array([c] * m), "ts": pa.array(np.repeat(np.arange(m // 2), 2), pa.int64()),
                         "stream_offset": pa.array(np.arange(m), pa.int64()),
                         "direction": pa.array(["to_client", "to_server"] * (m // 2))})
        parts.append(part.take(pc.sort_indices(part, options=sort_options())))
    table = pa.concat_tables(parts)
    table = table.append_column("row", pa.array(np.arange(table.num_rows)))
    data = ds.dataset([pa.Table.from_batches(table.to_batches(max_chunksize=25))])  # several chunks
    got = job.read_sorted(data, table.column_names, ds.field("row") >= 0)
    want = table.take(pc.sort_indices(table, options=sort_options()))
    assert got.equals(want) and not table.equals(want)
    assert got.column("row").to_pylist() == list(range(40, 80)) + list(range(80, 120)) + list(range(0, 40))


def test_read_sorted_of_one_connection_makes_its_id_and_applies_each_batch():
    """A direct task of one connection reads no connection id (``single``: made, a dictionary of the one value) and
    lets go of the hot methods' arguments a batch at a time as it reads (``each``): the same rows, in the same order,
    as the read of every column with the whole table made lean after it. The dataset's rows come in several batches,
    the rows out of order, a filter dropping some."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from amqplens.jobs.lifecycle import read_sorted
    from amqplens.lifecycle.fold import lean, plain_table

    rng = np.random.default_rng(5)
    n = 600
    methods = ["publish", "deliver", "ack", "consume", "qos", None]
    table = pa.table({
        "connection_id": pa.array(["only"] * n),
        "ts": pa.array(rng.integers(0, 50, n), pa.int64()),
        "stream_offset": pa.array(rng.permutation(n), pa.int64()),
        "direction": pa.array([("to_server", "to_client")[int(d)] for d in rng.integers(0, 2, n)]),
        "dialect": pa.array(["0-9-1"] * n),
        "class_name": pa.array(["basic"] * n),
        "method_name": pa.array([methods[int(m)] for m in rng.integers(0, len(methods), n)]),
        "arguments_json": pa.array([f'{{"k": {k}}}' for k in range(n)]),
        "row": pa.array(np.arange(n)),
        "kept": pa.array(np.arange(n) % 7 != 3),
    })
    data = ds.dataset([pa.Table.from_batches(table.to_batches(max_chunksize=70))])
    where = ds.field("kept")
    want = lean(read_sorted(data, table.column_names, where))
    columns = [c for c in table.column_names if c != "connection_id"]
    got = read_sorted(data, columns, where, single="only", each=lean)
    assert pa.types.is_dictionary(got.schema.field("connection_id").type)
    assert plain_table(got).select(want.column_names).equals(want)
    assert want.num_rows == sum(k % 7 != 3 for k in range(n))
    hot = pc.is_in(want.column("method_name"), pa.array(["publish", "deliver", "ack"])).to_numpy(zero_copy_only=False)
    args = want.column("arguments_json").to_numpy(zero_copy_only=False)
    assert hot.any() and all(a is None for a in args[hot]) and all(a is not None for a in args[~hot])
    empty = read_sorted(data, columns, ds.field("row") < 0, single="only", each=lean)
    assert empty.num_rows == 0 and "connection_id" in empty.column_names


def test_a_chunk_in_order_is_not_copied_and_one_out_of_order_is_sorted():
    """The chunked connection's sort of each chunk (``chunks.sorted_rows``): a chunk whose rows are in the
    lifecycle's order already (every chunk of the 2 GB load capture's connections was) comes back as the same rows,
    sharing the read's buffers (no copy); one with rows out of order comes back as Arrow's sort gives it, from a
    table of several chunks either way."""
    import numpy as np
    import pyarrow.compute as pc

    from amqplens.lifecycle.chunks import sorted_rows as _sorted
    from amqplens.lifecycle.fused import sort_options

    n = 300
    rows = pa.table({"connection_id": pa.array(["c"] * n), "ts": pa.array(np.arange(n) // 3, pa.int64()),
                     "stream_offset": pa.array(np.arange(n), pa.int64()),
                     "direction": pa.array(["to_client", "to_server", "to_server"] * (n // 3)),
                     "row": pa.array(np.arange(n))})
    rows = rows.take(pc.sort_indices(rows, options=sort_options()))
    chunked = pa.Table.from_batches(rows.to_batches(max_chunksize=70))
    got = _sorted(chunked)
    assert got.equals(rows)
    address = {c.buffers()[1].address for c in chunked.column("row").chunks}
    assert {c.buffers()[1].address for c in got.column("row").chunks} <= address
    shuffled = pa.Table.from_batches(rows.take(pa.array(np.random.default_rng(1).permutation(n))).to_batches(max_chunksize=70))
    assert _sorted(shuffled).equals(rows)
