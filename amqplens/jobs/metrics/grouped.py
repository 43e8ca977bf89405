"""metrics_latency's groups in one columnar pass per partition: the measured things spread over their entities and
buckets, grouped and their exact statistics taken with numpy, no Python per value.

Spark sends each measured thing once per *route* (``ROUTES``): the capture, its connection (connection, channel,
consumer and link entities), its queue or address, its exchange; a route's rows are shuffled by (capture, route,
route key, metric), so every group (capture, bucket, entity, metric, direction, method) is whole in one partition.
``route_stats`` then, per partition and in arrays:

1. spreads each route row over the entities of its route whose name is not null, and each of those over its time
   bucket and the whole capture (rows: route rows x <= 4 entities x 2);
2. numbers each group (its key columns factorised once per route row, then combined in mixed radix);
3. sorts by (group, value missing, value) and reads, per run of a group: count, missing, mean, max, and p50, p90,
   p99 exact (a route row may stand for ``_n`` alike things, counted before the shuffle: each row weighs ``_n``, a
   rank is found in the running sum of the weights), linear between the closest ranks in Spark's ``percentile`` arithmetic (``percentiles._percentile``
   does the same for one group; the Spark pipeline it replaced, ``percentiles.latency_reference``, stays as the
   reference the tests compare with row for row).

Memory: the partition's route rows (the job sizes partitions by rows: about a million each) and 4 int64 per spread
row. A group is never split, so a hot queue's values are in one task, as in any exact percentile.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from amqplens.contracts.metrics import METRICS_LATENCY

KINDS = ("capture", "connection", "channel", "consumer", "link", "queue", "address", "exchange")
# route -> the entities it holds: (kind, entity column, connection_id column or None, channel column or None)
ROUTES = {
    0: (("capture", "_ci", None, None),),
    1: (("connection", "_c", "_c", None), ("channel", "_a", "_c", "_ch"), ("consumer", "_b", "_c", "_ch"),
        ("link", "_d", "_c", "_ch")),
    2: (("queue", "_a", None, None), ("address", "_b", None, None)),
    3: (("exchange", "_a", None, None),),
}
ENTITY_COLUMNS = ("_ci", "_c", "_a", "_b", "_d")
# the route row's own group columns besides the entity's (_ci: the capture's number, _m: the metric's, 1-based in
# METRICS; strings cost about 0.6 us each on their way from the JVM, numbers a fraction of that)
ROW_KEYS = ("_ci", "dialect", "_m", "direction", "method")
METRICS = METRICS_LATENCY.column("metric").values

OUT_SCHEMA = pa.schema([
    ("_ci", pa.int32()), ("bucket_us", pa.int64()), ("bucket_seconds", pa.int32()),
    ("entity_kind", pa.string()), ("entity", pa.string()), ("connection_id", pa.string()), ("channel", pa.int32()),
    ("dialect", pa.string()), ("metric", pa.string()), ("direction", pa.string()), ("method", pa.string()),
    ("count", pa.int64()), ("missing", pa.int64()), ("mean_us", pa.float64()), ("max_us", pa.int64()),
    ("p50_us", pa.float64()), ("p90_us", pa.float64()), ("p99_us", pa.float64()),
])


def factorise(arr: pa.Array) -> tuple[np.ndarray, int]:
    """Codes 1..k-1 for the distinct values, 0 for null, and k: equal values get equal codes (any order)."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        d = arr.dictionary_encode()
        return d.indices.fill_null(-1).to_numpy().astype(np.int64) + 1, len(d.dictionary) + 1
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    _, inv = np.unique(arr.fill_null(0).to_numpy(zero_copy_only=False), return_inverse=True)
    codes = np.where(valid, inv.reshape(-1).astype(np.int64) + 1, 0)
    return codes, int(codes.max(initial=0)) + 1


def combine(parts: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """One code per distinct tuple of the parts' codes (mixed radix; densified when the radix would pass 2**62)."""
    gid = np.zeros(len(parts[0][0]) if parts else 0, np.int64)
    span = 1
    for codes, k in parts:
        if span * k >= 2**62:
            _, inv = np.unique(gid, return_inverse=True)
            gid = inv.reshape(-1).astype(np.int64)
            span = int(gid.max(initial=0)) + 1
        gid = gid * k + codes
        span *= k
    return gid


def _percentiles(at, n: np.ndarray, q: float) -> np.ndarray:
    """Spark's ``percentile`` of each group's n sorted values (n >= 1; ``at(ranks)``: each group's value of a 0-based
    rank), in float64 as Python does it."""
    pos = (n - 1) * q
    lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
    a, b = at(lo).astype(np.float64), at(hi).astype(np.float64)
    return np.where(lo == hi, a, (hi - pos) * a + (pos - lo) * b)


def _spread(t: pa.Table, codes: dict) -> tuple[np.ndarray, ...]:
    """(route row, kind, entity code) of every (route row, entity) whose entity name is not null (a kind has one
    entity column, so (kind, code) names the entity)."""
    route = t.column("_r").to_numpy()
    src, kind, ent = [], [], []
    for r, entities in ROUTES.items():
        rows = np.flatnonzero(route == r)
        for k, e, _, _ in entities:
            c = codes[e][0][rows]
            keep = rows[c != 0]
            src.append(keep)
            kind.append(np.full(len(keep), KINDS.index(k), np.int64))
            ent.append(c[c != 0])
    return tuple(np.concatenate(x) for x in (src, kind, ent))


def _by_kind(kinds: np.ndarray, src: np.ndarray, t: pa.Table, which: int) -> pa.Array:
    """Per output row, the column its kind names at position ``which`` of its ROUTES entry (null where none), at src."""
    out_type = pa.int32() if which == 3 else pa.string()
    spec = {KINDS.index(k): s[which] for entities in ROUTES.values() for s in entities for k in [s[0]]}
    pieces, at = [], []
    for k, name in spec.items():
        rows = np.flatnonzero(kinds == k)
        if not len(rows):
            continue
        at.append(rows)
        # the capture's entity is its capture_id, which Spark joins back (null here)
        pieces.append(t.column(name).take(pa.array(src[rows])).combine_chunks().cast(out_type) if name and name != "_ci"
                      else pa.nulls(len(rows), out_type))
    if not pieces:
        return pa.nulls(0, out_type)
    order = np.argsort(np.concatenate(at), kind="stable")
    return pa.concat_arrays(pieces).take(pa.array(order))


def group_table(t: pa.Table, bucket_s: int) -> pa.RecordBatch:
    """Route rows -> one row per group with its statistics (OUT_SCHEMA)."""
    if not t.num_rows:
        return pa.RecordBatch.from_pylist([], schema=OUT_SCHEMA)
    t = t.combine_chunks()
    codes = {c: factorise(t.column(c).chunk(0)) for c in {*ENTITY_COLUMNS, *ROW_KEYS, "_ch", "bucket_us"}}
    src, kind, ent = _spread(t, codes)
    if not len(src):  # no route row names an entity
        return pa.RecordBatch.from_pylist([], schema=OUT_SCHEMA)
    specs = [s for entities in ROUTES.values() for s in entities]
    conn_kind = np.isin(kind, [KINDS.index(k) for k, _, c, _ in specs if c])
    ch_kind = np.isin(kind, [KINDS.index(k) for k, _, _, ch in specs if ch])
    # x 2: the time bucket (whole = 0), the whole capture (whole = 1)
    n1 = len(src)
    src, kind, ent, conn_kind, ch_kind = (np.concatenate([x, x]) for x in (src, kind, ent, conn_kind, ch_kind))
    whole = np.repeat(np.array([0, 1], np.int64), n1)
    bucket = np.where(whole == 1, 0, codes["bucket_us"][0][src])
    ent_span = max(codes[c][1] for c in ENTITY_COLUMNS)
    row_gid = combine([codes[c] for c in ROW_KEYS])
    gid = combine([(row_gid[src], int(row_gid.max(initial=0)) + 1), (whole, 2),
                   (bucket, codes["bucket_us"][1]), (kind, len(KINDS)),
                   (ent, ent_span), (np.where(conn_kind, codes["_c"][0][src], 0), codes["_c"][1]),
                   (np.where(ch_kind, codes["_ch"][0][src], 0), codes["_ch"][1])])
    value = t.column("value_us").chunk(0)
    null = ~value.is_valid().to_numpy(zero_copy_only=False)[src]
    vals = value.fill_null(0).to_numpy(zero_copy_only=False)[src]
    # each row stands for _n equal things (counted before the shuffle), 1 without the column
    weight = (t.column("_n").chunk(0).fill_null(1).to_numpy(zero_copy_only=False).astype(np.int64)[src]
              if "_n" in t.column_names else np.ones(len(src), np.int64))
    # rows of a group together, its values ascending, the missing ones last
    order = np.lexsort((vals, null, gid))
    g, vals, null, weight = gid[order], vals[order], null[order], weight[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.add.reduceat(weight, starts)
    count = np.add.reduceat(np.where(null, 0, weight), starts)
    has = count > 0
    total = np.add.reduceat(np.where(null, 0, vals * weight), starts)
    safe = np.maximum(count, 1)
    mean = total.astype(np.float64) / safe
    # a group's 0-based rank r is in the row whose weights up to it first pass (the weight before the group) + r
    upto = np.cumsum(weight)
    before = upto[starts] - weight[starts]
    at = lambda rank: vals[np.searchsorted(upto, before + rank, side="right")]  # noqa: E731
    top = at(safe - 1)
    first = order[starts]
    s, k, w = src[first], kind[first], whole[first]
    # the whole capture's bucket start is the capture's first_ts, which Spark joins back (null here)
    bucket_us = pa.array(t.column("bucket_us").chunk(0).fill_null(0).to_numpy(zero_copy_only=False)[s],
                         mask=(w == 1) | ~t.column("bucket_us").chunk(0).is_valid().to_numpy(zero_copy_only=False)[s])
    take = lambda c: t.column(c).chunk(0).take(pa.array(s))  # noqa: E731
    stat = lambda x: pa.array(x, mask=~has)  # noqa: E731
    cols = {
        "_ci": take("_ci"), "bucket_us": bucket_us,
        "bucket_seconds": pa.array(np.where(w == 1, 0, bucket_s).astype(np.int32)),
        "entity_kind": pa.array(np.asarray(KINDS, object)[k], pa.string()),
        "entity": _by_kind(k, s, t, 1), "connection_id": _by_kind(k, s, t, 2), "channel": _by_kind(k, s, t, 3),
        "dialect": take("dialect"), "metric": pa.array(np.asarray(("",) + METRICS, object)[take("_m").fill_null(0).to_numpy()], pa.string()),
        "direction": take("direction"), "method": take("method"),
        "count": pa.array(count), "missing": pa.array(sizes - count), "mean_us": stat(mean), "max_us": stat(top),
        **{f"p{int(q * 100)}_us": stat(_percentiles(at, safe, q)) for q in (0.5, 0.9, 0.99)},
    }
    return pa.RecordBatch.from_arrays([cols[f.name].cast(f.type) for f in OUT_SCHEMA], schema=OUT_SCHEMA)


def route_stats(batches, bucket_s: int):
    """mapInArrow: a partition's route rows -> its groups' rows (the partition held whole; see the module doc)."""
    tables = [b for b in batches if b.num_rows]
    if tables:
        yield group_table(pa.Table.from_batches(tables), bucket_s)
