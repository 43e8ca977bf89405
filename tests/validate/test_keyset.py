"""keyset.py's compiled table (through columnar.KeySet) against Python's own set and against Arrow's kernels (its
reference): the distinct count of a key column and the lookups of other values in it.

Keys tried: repeats (a key up to five times), nulls, the empty string, non-ASCII text, keys of every length from 0
to 70 bytes (the hash reads them eight bytes at a time), more keys than one chunk holds (2**17: a key's place is
its chunk and row), chunks sliced at odd offsets, and a hash cut to 8 bits so that almost every key shares its slot
and tag with others (only the bytes tell them apart). Values tried: keys, keys with one byte changed, a key's prefix,
nulls, values in several chunks.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from amqplens.jobs.validate import columnar

pytestmark = pytest.mark.skipif(columnar.kernels() is None, reason="numba does not import")


def _keys(n: int, seed: int) -> list[str | None]:
    rnd = random.Random(seed)
    base = [f"{rnd.getrandbits(128):032x}-{'sc'[rnd.getrandbits(1)]}-{rnd.randrange(10**9)}" for _ in range(n)]
    base += ["", "é", "ключ", "a" * 70, *("x" * k for k in range(0, 20))]
    keys: list[str | None] = []
    for k in base:
        keys.extend([k] * rnd.choice((1, 1, 1, 2, 5)))
    keys += [None] * 7
    rnd.shuffle(keys)
    return keys


def _values(keys: list, seed: int) -> list[str | None]:
    rnd = random.Random(seed)
    some = [k for k in keys if k is not None]
    out: list[str | None] = []
    for _ in range(5000):
        k = rnd.choice(some)
        kind = rnd.randrange(4)
        if kind == 0 or not k:
            out.append(k)
        elif kind == 1:
            i = rnd.randrange(len(k))
            out.append(k[:i] + chr(ord(k[i]) ^ 1) + k[i + 1 :])
        elif kind == 2:
            out.append(k[:-1])
        else:
            out.append(None)
    return out


def _chunked(values: list, cuts: list[int]) -> pa.ChunkedArray:
    arr = pa.array(values, pa.string())
    edges = [0, *cuts, len(values)]
    return pa.chunked_array([arr.slice(a, b - a) for a, b in zip(edges, edges[1:])], pa.string())


@pytest.mark.parametrize("n, keep, seed", [(200_000, None, 1), (3_000, 0xFF, 2), (40, 0x1, 3)])
def test_distinct_keys_and_lookups_match_python_and_arrow(n, keep, seed):
    keys = _keys(n, seed)
    chunks = _chunked(keys, [3, len(keys) // 3, len(keys) // 3 + 1, len(keys) - 5])
    values = _values(keys, seed + 100)
    present = set(k for k in keys if k is not None)

    compiled = columnar.KeySet(chunks, keep=keep)
    arrow = columnar.KeySet(chunks, compiled=False)
    assert compiled.k is not None and arrow.k is None
    assert compiled.distinct == arrow.distinct == len(present)
    assert compiled.repeats == arrow.repeats == sum(k is not None for k in keys) - len(present) > 0

    for part in (pa.array(values, pa.string()), _chunked(values, [1, 2500])):
        want = [v is not None and v in present for v in values]
        assert compiled.found(part).to_pylist() == want
        assert arrow.found(part).to_pylist() == want
    assert any(want) and not all(want)


def test_no_keys_and_no_values():
    empty = columnar.KeySet(pa.chunked_array([], pa.string()))
    assert (empty.distinct, empty.repeats) == (0, 0)
    assert empty.found(pa.array(["a", None], pa.string())).to_pylist() == [False, False]
    nulls = columnar.KeySet(pa.array([None, None], pa.string()))
    assert (nulls.distinct, nulls.repeats) == (0, 0)
    assert nulls.found(pa.array([], pa.string())).to_pylist() == []
