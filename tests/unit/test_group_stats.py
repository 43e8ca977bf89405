"""amqplens.jobs.metrics.group_stats: the exact latency statistics of sorted groups, whose equal values may come counted
(``_n``, the map-side count of repeats) and whose rows may span Arrow batches. Checked against numpy over the
values written out one by one (no JVM)."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

from amqplens.jobs.metrics import group_stats

STATS = ("count", "missing", "mean_us", "max_us", "p50_us", "p90_us", "p99_us")


def _groups(seed: int) -> dict[tuple[int, int], list]:
    """Groups of every shape: one value, all null, heavy repeats (a hot queue's latencies), all distinct, huge values."""
    rng = np.random.default_rng(seed)
    groups = {(0, 0): [7], (1, 5): [None, None], (2, -3): [None, 4, 4, 4], (3, 9): [10**12, 10**12 + 1, 0]}
    for g in range(4, 120):
        size = int(rng.integers(1, 300))
        high = int(rng.choice([3, 50, 10**6]))
        groups[(g, int(rng.integers(-2**31, 2**31)))] = [int(v) for v in rng.integers(0, high, size)] + [None] * int(rng.integers(0, 3))
    return groups


def _batches(rows: list[tuple], size: int, weighted: bool) -> list[pa.RecordBatch]:
    cols = {"_g": pa.int64(), "_h": pa.int32(), "value_us": pa.int64(), "_n": pa.int64()}
    names = list(cols)[: 4 if weighted else 3]
    return [pa.RecordBatch.from_arrays([pa.array([r[i] for r in rows[a:a + size]], cols[n]) for i, n in enumerate(names)],
                                       names=names) for a in range(0, len(rows), size)]


def _sorted_rows(groups, weighted: bool) -> list[tuple]:
    """Spark's order: by group, then value with nulls first; weighted: one row per distinct value with its count."""
    rows = []
    for (g, h), values in sorted(groups.items()):
        order = lambda v: (v is not None, v or 0)  # noqa: E731
        if weighted:
            rows += [(g, h, v, n) for v, n in sorted(collections.Counter(values).items(), key=lambda x: order(x[0]))]
        else:
            rows += [(g, h, v) for v in sorted(values, key=order)]
    return rows


def _stats(batches) -> dict:
    out = {}
    for b in group_stats(iter(batches)):
        d = b.to_pydict()
        for i in range(b.num_rows):
            out[d["_g"][i], d["_h"][i]] = tuple(d[k][i] for k in STATS)
    return out


@pytest.mark.parametrize("batch_rows", [1, 3, 7, 100_000])
@pytest.mark.parametrize("weighted", [True, False])
def test_group_stats_against_numpy(batch_rows, weighted):
    groups = _groups(seed=batch_rows)
    got = _stats(_batches(_sorted_rows(groups, weighted), batch_rows, weighted))
    assert set(got) == set(groups)
    for key, values in groups.items():
        v = np.array([x for x in values if x is not None], np.int64)
        count, missing, mean, top, *pcts = got[key]
        assert (count, missing) == (len(v), len(values) - len(v)), key
        if not len(v):
            assert mean is top is None and pcts == [None, None, None]
            continue
        assert top == v.max() and mean == pytest.approx(v.mean(), rel=1e-12)
        for q, p in zip((50, 90, 99), pcts):
            assert p == pytest.approx(np.percentile(v, q), rel=1e-12), (key, q)


def test_counted_repeats_give_the_rows_of_the_values_one_by_one():
    """The map-side count changes how many rows Spark sorts, not one bit of any statistic."""
    groups = _groups(seed=11)
    one_by_one = _stats(_batches(_sorted_rows(groups, weighted=False), 5, weighted=False))
    counted = _stats(_batches(_sorted_rows(groups, weighted=True), 5, weighted=True))
    assert counted == one_by_one
