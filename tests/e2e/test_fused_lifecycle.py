"""The fused lifecycle (``lifecycle.fused``, the default) against the lifecycle job's two passes, on real Delta lakes.

Inputs: every capture fixture (the e2e FIXTURES: public, real broker, demo, capture formats, 0-10), the TLS
fixtures decrypted with their key logs, the broker-logs capture, the hostile files of the hostile test (every
fixture cut short, bit flips, duplicated and reordered records, the synthetic ones) and the wild run's mutants.
The fused lake of the fixtures is the one the e2e tests share (``lifecycled``); the other inputs get a fused lake
here; one two-pass lake (``lifecycle.fused=false``, then the lifecycle job) holds them all. Every row of
deliveries, flow_events and request_responses must be the same in both, all columns.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from deltalake import DeltaTable

from amqplens.jobs import ingest_captures
from amqplens.lake import isolation
from amqplens.jobs import lifecycle
from amqplens.lake.store import TableStore
from amqplens.contracts import table as table_def
from tests.conftest import DATA
from tests.e2e import hostile_captures as H
from tests.e2e import mutations as M
from tests.e2e.conftest import FIXTURES

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

LIFECYCLE = ("deliveries", "flow_events", "request_responses")
KEYLOGS = sorted(str(p) for p in (DATA / "tls").glob("*.keylog"))
OTHERS = sorted(str(p) for p in (DATA / "tls").glob("*.pcap")) + [str(DATA / "logs" / "broker_logs.pcap")]


def rows(lake, name: str) -> dict[str, list]:
    """The table's rows per capture, each capture's sorted by the table's key (all columns)."""
    path = lake / name
    if not (path / "_delta_log").exists():
        return {}
    key = table_def(name).key
    out: dict[str, list] = {}
    for r in sorted(DeltaTable(str(path)).to_pyarrow_table().to_pylist(), key=lambda r: tuple(r[k] for k in key)):
        out.setdefault(r["capture_id"], []).append(r)
    return out


def versions(store: TableStore) -> dict:
    return {t: store.version(t) for t in LIFECYCLE}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fused-inputs")
    H.write_cases(H.cases(FIXTURES), d / "hostile")
    (d / "wild").mkdir()
    for name, (_, data) in M.capture_mutants().items():
        (d / "wild" / f"{name}{'.pcapng' if name.endswith('pcapng') else '.pcap'}").write_bytes(data)
    return [str(d), *OTHERS]


@pytest.fixture(scope="module")
def fused(spark, conf, inputs, tmp_path_factory):
    """The other inputs ingested fused, then the lifecycle job on every capture that did not fail (as ``run`` does)."""
    lake = tmp_path_factory.mktemp("fused") / "lake"
    c = conf.with_overrides(lake__root=str(lake), capture__keylog=json.dumps(KEYLOGS))
    result = ingest_captures.run(spark, c, inputs, run_id="fused")
    ok = [r["capture_id"] for r in result.captures if r["status"] != "failed"]
    store = TableStore(spark, str(lake))
    before = versions(store)
    after = lifecycle.run(spark, c, ok, run_id="after")
    return lake, result, ok, after, before, versions(store)


@pytest.fixture(scope="module")
def two_pass(spark, conf, inputs, tmp_path_factory):
    lake = tmp_path_factory.mktemp("two-pass") / "lake"
    c = conf.with_overrides(lake__root=str(lake), capture__keylog=json.dumps(KEYLOGS), lifecycle__fused="false")
    result = ingest_captures.run(spark, c, FIXTURES + inputs, run_id="two")
    assert result.lifecycle == [] and not (lake / "deliveries").exists()  # fused off: the ingest wrote no lifecycle table
    done = lifecycle.run(spark, c, run_id="two")
    return lake, done


def test_fused_and_two_pass_lifecycle_tables_are_identical_row_for_row(lifecycled, fused, two_pass):
    shared, _, _ = lifecycled
    compared = {}
    for name in LIFECYCLE:
        mine = rows(pathlib.Path(shared["lake.root"]), name) | rows(fused[0], name)
        theirs = rows(two_pass[0], name)
        assert sorted(mine) == sorted(theirs), name
        for cid in theirs:
            assert mine[cid] == theirs[cid], (name, cid[:12])
        compared[name] = (len(theirs), sum(map(len, theirs.values())))
    # what was compared: captures with rows, rows (the fixtures, TLS, hostile and wild inputs)
    assert compared["deliveries"][0] >= 60 and compared["deliveries"][1] > 1500, compared
    assert compared["flow_events"][1] > 1000 and compared["request_responses"][1] > 1000, compared


def test_the_tls_fixtures_were_decrypted_and_have_lifecycle_rows(fused):
    lake, result, *_ = fused
    tls = {r["capture_id"] for r in result.captures if "/tls/" in r["path"] and "plain" not in r["path"]}
    assert len(tls) == 4 and tls <= set(rows(lake, "request_responses"))


def test_the_lifecycle_job_after_a_fused_ingest_does_no_work(lifecycled, ingested, fused):
    _, _, shared_done = lifecycled
    _, _, shared_ingest = ingested
    assert shared_done == [] and len(shared_ingest.lifecycle) == len(FIXTURES)
    lake, result, ok, after, before, then = fused
    assert sorted(result.lifecycle) == sorted(ok) and after == [] and then == before


def test_rerunning_the_ingest_duplicates_no_row(spark, conf, tmp_path):
    """Same inputs again; then the state of a run that died before its captures commit (the captures table gone:
    every other table committed); then a capture that failed in a later stage (retried under a retry unit)."""
    lake = tmp_path / "lake"
    c = conf.with_overrides(lake__root=str(lake))
    picked = [p for p in FIXTURES if p.endswith(("consume_prefetch_ack.pcap", "amqp10_rich.pcap", "publish_consume.pcap"))]
    first = ingest_captures.run(spark, c, picked, run_id="one")
    assert len(first.lifecycle) == 3
    store = TableStore(spark, str(lake))
    reference, before = {t: rows(lake, t) for t in LIFECYCLE}, versions(store)

    again = ingest_captures.run(spark, c, picked, run_id="two")
    assert again.captures == [] and again.lifecycle == [] and versions(store) == before

    shutil.rmtree(lake / "captures")
    redone = ingest_captures.run(spark, c, picked, run_id="three")
    assert len(redone.captures) == 3 and sorted(redone.lifecycle) == sorted(first.lifecycle)
    assert versions(store) == before  # every lifecycle unit was committed already: nothing written again
    assert lifecycle.run(spark, c, run_id="three") == []

    cid = first.lifecycle[0]
    isolation.mark_failed(spark, store, {cid: "failed in metrics: RuntimeError: boom"}, {cid: f"amqplens/metrics/{cid}"}, "four")
    retried = ingest_captures.run(spark, c, picked, run_id="five")
    assert [r["capture_id"] for r in retried.captures] == [cid] and retried.lifecycle == [cid]
    assert {t: rows(lake, t) for t in LIFECYCLE} == reference and versions(store) == before


# the lifecycle job's paths (amqplens/jobs/lifecycle.py), each on a copy of the two-pass lake's frames, against the
# two-pass lake's rows (the job's default: direct tasks, folded and from arrays where that applies)
JOB_PATHS = {
    # the Spark path (a connection of more than 50 frames: not held, its frames to the machines as they come)
    "spark, connections streamed": {"lifecycle__direct": "auto", "lifecycle__max_connection_frames": "50"},
    # direct tasks, the machines alone, about 500 frames a task (many tasks)
    "direct, machines": {"lifecycle__compiled": "off", "lifecycle__direct_task_frames": "500"},
    # the Spark path with the machines alone: the job as it was before either
    "spark, machines": {"lifecycle__direct": "off", "lifecycle__compiled": "off"},
    # direct tasks, a connection of more than 40 frames a chunk of about 40 at a time (alone in its task: about 60
    # frames a task)
    "direct, chunked": {"lifecycle__chunk_frames": "40", "lifecycle__direct_task_frames": "60"},
}


@pytest.mark.parametrize("path", sorted(JOB_PATHS))
def test_every_path_of_the_lifecycle_job_gives_the_same_rows(spark, conf, two_pass, tmp_path, path):
    lake, done = two_pass
    copy = tmp_path / "lake"
    copy.mkdir()
    for name in ("frames", "captures", "connections"):
        shutil.copytree(lake / name, copy / name)
    c = conf.with_overrides(lake__root=str(copy), **JOB_PATHS[path])
    store = TableStore(spark, str(copy))
    plan = lifecycle.direct_plan(store, done, 2, c["lifecycle.direct_task_frames"], c["lifecycle.max_connection_frames"])
    if path.startswith("direct"):  # every connection planned once
        assert plan is not None and len(plan) > 2
        planned = [cid for p in plan for cid in json.loads(p)["connections"]]
        framed = set(DeltaTable(str(lake / "frames")).to_pyarrow_table(columns=["connection_id"]).column(0).to_pylist())
        assert len(planned) == len(set(planned)) and set(planned) == framed
    if "streamed" in path:
        assert plan is None  # a connection of more than 50 frames: the Spark path
    if "chunked" in path:  # tasks of one connection of more frames than a chunk: those go in chunks
        alone = [p for p in map(json.loads, plan) if len(p["connections"]) == 1 and p["frames"] > 40]
        assert len(alone) >= 5, plan
    assert sorted(lifecycle.run(spark, c, run_id="path")) == sorted(done)
    for name in LIFECYCLE:
        assert rows(copy, name) == rows(lake, name), (path, name)


def test_direct_tasks_read_their_row_groups_of_frames_written_in_no_order(spark, conf, two_pass, tmp_path):
    """The two-pass lake's frames rewritten in a random order in row groups of 64 rows, so that each connection's
    frames are spread over many row groups and no task's rows come in order: each direct task reads only the row
    groups that hold its connections (fewer than all, in all tasks together about each once), sorts them, and the
    job's rows equal the two-pass lake's."""
    import numpy as np
    import pyarrow.compute as pc

    lake, done = two_pass
    copy = tmp_path / "lake"
    copy.mkdir()
    for name in ("captures", "connections"):
        shutil.copytree(lake / name, copy / name)
    frames = DeltaTable(str(lake / "frames")).to_pyarrow_table()
    frames = frames.take(np.random.default_rng(7).permutation(frames.num_rows))
    store = TableStore(spark, str(copy))
    staged = store.stage("frames", "shuffled")
    writer = staged.writer(0, group_rows=64)
    dates = {}
    for cid in pc.unique(frames.column("capture_id")).to_pylist():
        mine = frames.filter(pc.equal(frames.column("capture_id"), cid))
        dates[cid] = {"capture_date": mine.column("capture_date")[0].as_py().isoformat()}
        for batch in mine.to_batches(max_chunksize=1000):
            writer.write(cid, batch)
    store.commit_staged(staged, writer.close(), units={cid: f"test/{cid}" for cid in dates}, partitions=dates,
                        run_id="shuffled")

    c = conf.with_overrides(lake__root=str(copy), lifecycle__direct_task_frames="2000")
    plan = [json.loads(p) for p in lifecycle.direct_plan(store, done, 2, 2000, c["lifecycle.max_connection_frames"])]
    total = sum(pq_groups(copy / "frames"))
    read = [sum(len(ids) for ids in p["files"].values()) for p in plan]
    assert len(plan) > 2 and max(read) < total and sum(read) < 2 * total, (read, total)
    assert sorted(lifecycle.run(spark, c, run_id="shuffled")) == sorted(done)
    for name in LIFECYCLE:
        assert rows(copy, name) == rows(lake, name), name


def test_a_capture_on_course_to_pass_the_held_limit_is_left_to_the_job_early(spark, conf, two_pass, tmp_path, caplog):
    """The fixture capture of the longest connection ingested alone with ``lifecycle.fused_max_held_frames`` half
    that connection's frames and packet batches of 64 (so that its direct task reads it in many steps): the task
    sees its held frames on course to pass the limit and leaves the capture to the lifecycle job before they do
    (the driver's warning says so); the job's rows equal the two-pass lake's, every column."""
    import logging

    import pyarrow.compute as pc

    lake, done = two_pass
    frames = DeltaTable(str(lake / "frames")).to_pyarrow_table(columns=["capture_id", "connection_id"])
    counts = frames.group_by(["capture_id", "connection_id"]).aggregate([([], "count_all")]).to_pylist()
    longest = max(counts, key=lambda r: (r["count_all"], r["connection_id"]))
    assert longest["count_all"] > 1000, longest  # long enough to be read in many batches
    captures = DeltaTable(str(lake / "captures")).to_pyarrow_table(columns=["capture_id", "path"])
    path = captures.filter(pc.equal(captures.column("capture_id"), longest["capture_id"])).column("path")[0].as_py()
    copy = tmp_path / "lake"
    c = conf.with_overrides(lake__root=str(copy), lifecycle__fused_max_held_frames=str(longest["count_all"] // 2),
                            lifecycle__chunk_frames="0",  # held whole, as a connection the array pass does not model
                            capture__batch_rows="64")
    with caplog.at_level(logging.WARNING, logger="amqplens.jobs.ingest_captures"):
        result = ingest_captures.run(spark, c, [path], run_id="early")
    assert [r["capture_id"] for r in result.captures] == [longest["capture_id"]]
    assert result.lifecycle == [] and not (copy / "deliveries").exists()  # left to the job
    assert any("on course for more than" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert lifecycle.run(spark, c, run_id="early") == [longest["capture_id"]]
    compared = {}
    for name in LIFECYCLE:
        mine, theirs = rows(copy, name).get(longest["capture_id"], []), rows(lake, name).get(longest["capture_id"], [])
        assert mine == theirs, name
        compared[name] = len(theirs)
    assert sum(compared.values()) > 100, compared


def test_connections_done_a_chunk_at_a_time_by_the_ingest_give_the_same_rows(spark, conf, inputs, two_pass, tmp_path):
    """Every capture fixture, the TLS, hostile and wild inputs (cut short, bit flips, records duplicated and
    reordered, mutated headers) ingested fused with ``lifecycle.chunk_frames`` 7 and packet batches of 64: the decode
    tasks do each 0-9-1 connection of more than 7 frames a chunk at a time as its frames come; one the array pass does
    not model from its start is held whole, and a capture with one that cannot go on in chunks after its first
    (chunks this small often have no place to cut) is left to the lifecycle job, which shows the chunks ran in the
    workers. After the job on those, every row equals the two-pass lake's."""
    lake, _ = two_pass
    copy = tmp_path / "lake"
    c = conf.with_overrides(lake__root=str(copy), lifecycle__chunk_frames="7", capture__batch_rows="64",
                            capture__keylog=json.dumps(KEYLOGS))
    result = ingest_captures.run(spark, c, FIXTURES + inputs, run_id="chunked")
    ok = [r["capture_id"] for r in result.captures if r["status"] != "failed"]
    left = lifecycle.run(spark, c, ok, run_id="chunked")
    assert left and sorted(left + result.lifecycle) == sorted(ok), (len(left), len(result.lifecycle), len(ok))
    compared = 0
    for name in LIFECYCLE:
        mine, theirs = rows(copy, name), rows(lake, name)
        assert sorted(mine) == sorted(cid for cid in theirs if cid in ok), name
        for cid in mine:
            assert mine[cid] == theirs[cid], (name, cid[:12])
        compared += sum(map(len, mine.values()))
    assert compared > 3000, compared


def pq_groups(table_dir) -> list[int]:
    import pyarrow.parquet as pq

    return [pq.ParquetFile(str(f)).metadata.num_row_groups for f in table_dir.rglob("*.parquet")]
