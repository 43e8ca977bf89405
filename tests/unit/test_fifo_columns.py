"""amqplens.jobs.metrics.e2e.fifo_columns (the FIFO matching in arrays) against fifo_pass (the same rule event by event,
the reference) on wild event streams: keys with and without requeues and redeliveries, null queues, publishes without a
time, ties in time, more deliveries than publishes, keys spanning Arrow batches of 1 and 7 rows. No JVM."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from amqplens.jobs.metrics.e2e import AGAIN, FIRST, NULL_US, PUBLISH, REQUEUE, fifo_columns, fifo_pass
from amqplens.jobs.metrics.fifo_rare import fifo_rare

PAYLOAD = ["capture_id", "delivery_id"]


def _events(seed: int, keys: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(keys):
        rare = rng.random() < 0.3
        kinds = [PUBLISH, FIRST] + ([REQUEUE, AGAIN] if rare else [])
        for i in range(int(rng.integers(1, 30))):
            ev = int(rng.choice(kinds))
            rows.append({"capture_id": f"c{k % 2}", "_key": f"k{k}", "_tsk": NULL_US if rng.random() < 0.05 else int(rng.integers(0, 20)),
                         "_ev": ev, "_id": f"d{k}-{i}", "_q": None if ev == PUBLISH or rng.random() < 0.2 else f"q{int(rng.integers(2))}",
                         "_rq": bool(ev == FIRST and rare and rng.random() < 0.5), "delivery_id": f"d{k}-{i}"})
    # Spark's order: capture, key, time, supply before demand, id
    rows.sort(key=lambda r: (r["capture_id"], r["_key"], r["_tsk"], r["_ev"] >= FIRST, r["_id"]))
    schema = pa.schema([("capture_id", pa.string()), ("_key", pa.string()), ("_tsk", pa.int64()), ("_ev", pa.int32()),
                        ("_id", pa.string()), ("_q", pa.string()), ("_rq", pa.bool_()), ("delivery_id", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


def _answers(batches) -> list:
    return sorted((r["delivery_id"], r["p_us"]) for b in batches for r in b.to_pylist())


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("seed,keys,size", [(1, 1, 1), (2, 40, 7), (3, 400, 10_000)])
def test_fifo_columns_gives_the_answers_of_fifo_pass(seed, keys, size, compiled):
    t = _events(seed, keys)
    want = _answers(fifo_pass(t.to_batches(max_chunksize=size), PAYLOAD))
    got = _answers(fifo_columns(t.to_batches(max_chunksize=size), PAYLOAD, compiled=compiled))
    assert got == want
    demand = sum(1 for e in t.column("_ev").to_pylist() if e in (FIRST, AGAIN))
    assert len(got) == demand and any(p is not None for _, p in got)


def test_no_events_give_no_rows():
    assert list(fifo_columns(iter([]), PAYLOAD)) == []
    only_pubs = pa.table({"capture_id": ["c"], "_key": ["k"], "_tsk": [1], "_ev": pa.array([PUBLISH], pa.int32()), "_id": ["p"],
                          "_q": pa.array([None], pa.string()), "_rq": [False], "delivery_id": ["p"]})
    assert _answers(fifo_columns(only_pubs.to_batches(), PAYLOAD)) == []


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pass_gives_the_answers_of_fifo_pass_on_every_key(seed):
    """Every key, requeues or not, through fifo_rare: long keys (hundreds of events: chains of requeues and
    redeliveries up to and past HOPS), null ids and queues, repeated delivery ids."""
    rng = np.random.default_rng(100 + seed)
    rows = []
    for k in range(30):
        n = int(rng.integers(1, 400 if k % 5 == 0 else 20))
        for i in range(n):
            ev = int(rng.choice([PUBLISH, FIRST, REQUEUE, AGAIN], p=[0.3, 0.3, 0.2, 0.2]))
            rid = None if rng.random() < 0.02 else f"d{k}-{int(rng.integers(0, max(2, n // 2)))}"
            rows.append({"capture_id": None if k == 7 else f"c{k % 3}", "_key": f"k{k}",
                         "_tsk": NULL_US if rng.random() < 0.05 else int(rng.integers(0, 50)), "_ev": ev, "_id": rid,
                         "_q": None if rng.random() < 0.15 else f"q{int(rng.integers(3))}",
                         "_rq": bool(rng.random() < 0.5), "delivery_id": f"d{k}-{i}"})
    rows.sort(key=lambda r: (r["capture_id"] or "", r["_key"], r["_tsk"], r["_ev"] >= FIRST, r["_id"] or ""))
    schema = pa.schema([("capture_id", pa.string()), ("_key", pa.string()), ("_tsk", pa.int64()), ("_ev", pa.int32()),
                        ("_id", pa.string()), ("_q", pa.string()), ("_rq", pa.bool_()), ("delivery_id", pa.string())])
    t = pa.Table.from_pylist(rows, schema=schema)
    want = _answers(fifo_pass(t.to_batches(max_chunksize=97), PAYLOAD))
    got = _answers(fifo_rare(t, PAYLOAD))
    assert got == want
    assert sum(p is not None for _, p in got) > 50  # matches were made, redeliveries among them
