"""amqplens.jobs.metrics.grouped.group_table: metrics_latency's groups from route rows, checked against plain Python
(a dict of groups, numpy's linear percentile) on wild rows: null values, buckets, dialects, methods and channels,
values at the ends of int64's range that still sum, empty entity names, a route with every entity null; and the same
rows counted (each with its ``_n``, as the metrics job hands them on above ``metrics.count_repeats_from_rows``). No JVM."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

from amqplens.jobs.metrics.grouped import KINDS, METRICS, OUT_SCHEMA, ROUTES, group_table

ROUTE_SCHEMA = pa.schema([("_ci", pa.int32()), ("dialect", pa.string()), ("direction", pa.string()), ("method", pa.string()),
                          ("value_us", pa.int64()), ("_r", pa.int32()), ("_c", pa.string()), ("_ch", pa.int32()),
                          ("_a", pa.string()), ("_b", pa.string()), ("_d", pa.string()), ("bucket_us", pa.int64()),
                          ("_m", pa.int32())])


def _rows(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    pick = lambda *xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    rows = []
    for _ in range(n):
        r = int(rng.integers(4))
        big = pick(None, 0, 7, int(rng.integers(0, 50)), 2**40 + int(rng.integers(3)), -5)
        rows.append({
            "_ci": pick(1, 2), "dialect": pick("0-9-1", "1.0", None), "direction": pick("to_broker", "from_broker", None),
            "method": pick("publish", "deliver", None, ""), "value_us": big, "_r": r,
            "_c": pick("c1", "c2", None) if r == 1 else None, "_ch": pick(1, 2, None) if r == 1 else None,
            "_a": pick("q", "c1/1", "", None) if r in (1, 2, 3) else None, "_b": pick("b", None) if r in (1, 2) else None,
            "_d": pick("l", None) if r == 1 else None, "bucket_us": pick(0, 60_000_000, -60_000_000, None),
            "_m": int(rng.integers(1, len(METRICS) + 1)),
        })
    return rows


def _oracle(rows: list[dict], bucket_s: int) -> dict:
    groups = collections.defaultdict(list)
    for row in (r for r in rows for _ in range(r.get("_n", 1))):
        for kind, ent, conn, ch in ROUTES[row["_r"]]:
            name = row[ent]
            if name is None:
                continue
            for whole in (False, True):
                key = (row["_ci"], None if whole else row["bucket_us"], 0 if whole else bucket_s, kind,
                       None if ent == "_ci" else name, conn and row[conn], ch and row[ch], row["dialect"],
                       METRICS[row["_m"] - 1], row["direction"], row["method"])
                groups[key].append(row["value_us"])
    return groups


@pytest.mark.parametrize("seed,n,counted", [(1, 1, False), (2, 40, False), (3, 3000, False), (4, 1, True), (5, 40, True),
                                             (6, 3000, True)])
def test_group_table_against_plain_python(seed, n, counted):
    rows = _rows(seed, n)
    schema = ROUTE_SCHEMA
    if counted:
        # weights of 1 to 6, some rows alike (the same values twice, as separate counted rows in separate batches)
        rng = np.random.default_rng(seed)
        rows = [r | {"_n": int(rng.integers(1, 7))} for r in rows + rows[: n // 3]]
        schema = schema.append(pa.field("_n", pa.int64()))
    out = group_table(pa.Table.from_pylist(rows, schema=schema), 60).to_pylist()
    want = _oracle(rows, 60)
    got = {(r["_ci"], r["bucket_us"], r["bucket_seconds"], r["entity_kind"], r["entity"], r["connection_id"], r["channel"],
            r["dialect"], r["metric"], r["direction"], r["method"]): r for r in out}
    assert len(got) == len(out) and set(got) == set(want)
    assert {r["entity_kind"] for r in out} <= set(KINDS)
    for key, values in want.items():
        r, v = got[key], np.array([x for x in values if x is not None], np.int64)
        assert (r["count"], r["missing"]) == (len(v), len(values) - len(v)), key
        if not len(v):
            assert r["mean_us"] is r["max_us"] is r["p50_us"] is r["p90_us"] is r["p99_us"] is None
            continue
        assert r["max_us"] == v.max() and r["mean_us"] == float(int(v.sum())) / len(v)
        for q in (50, 90, 99):
            assert r[f"p{q}_us"] == pytest.approx(np.percentile(v, q), rel=1e-12), (key, q)


def test_no_rows_and_no_entities_give_no_groups():
    empty = pa.Table.from_pylist([], schema=ROUTE_SCHEMA)
    assert group_table(empty, 60).num_rows == 0 and group_table(empty, 60).schema == OUT_SCHEMA
    # a queue route whose queue and address are both null counts for nothing
    row = {f.name: None for f in ROUTE_SCHEMA} | {"_ci": 1, "_r": 2, "_m": 1, "value_us": 5}
    assert group_table(pa.Table.from_pylist([row], schema=ROUTE_SCHEMA), 60).num_rows == 0
