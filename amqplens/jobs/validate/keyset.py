"""A set of text keys in one compiled hash table (numba): the validate counts' uniqueness and reference checks.

columnar.py counts a key column's repeats (its non-null values less the distinct ones) and, for each column naming
another table's keys, the values that table lacks. With Arrow's kernels that is a memo table per call: the distinct
count builds one over every key, the lookup another (the 2 GB load capture's 12.4M frame ids: 5.6 s and 5.5 s, each
holding a copy of the keys). Here the keys' own buffers (Arrow's offsets and bytes) are hashed into one open-addressing
table that answers both: it is built once (counting the distinct keys as it goes: a key is new unless a slot of the
same hash holds the same bytes) and probed with the values of every referencing column. Exact: a hash only finds
candidates, the bytes decide. Memory: two to four 8-byte slots per key (the key's place beside a 4-byte hash tag: one cache line read per look);
the keys stay in the chunks they were read in (a copy of fresh memory costs about 3 s per GB on this machine's page
faults).

columnar.py's Arrow kernels (``pc.count_distinct``, ``pc.is_in``) stay the reference and the path without numba; a
test gives both the same keys (repeats, nulls, forced hash collisions) and compares every answer, and count_tables
both ways on the validate lakes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ALL_BITS = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, nogil=True)
def _hash(data, lo, hi, keep):
    """FNV-1a over the bytes lo..hi-1 taken eight at a time (a little-endian word, the last one short), then the
    64-bit finaliser of splitmix: the table's slot is its low bits, its tag the high 32."""
    h = np.uint64(14695981039346656037)
    i = lo
    while i < hi:
        w = np.uint64(0)
        n = min(8, hi - i)
        for k in range(n):
            w |= np.uint64(data[i + k]) << np.uint64(8 * k)
        h = (h ^ w) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
        i += 8
    h = (h ^ np.uint64(hi - lo) ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (h ^ (h >> np.uint64(31))) & keep


FREE = np.uint64(0xFFFFFFFF)  # a slot's low 32 bits: where its key is (chunk, row), this when the slot is free
ROW_BITS = 17  # a key's place: its chunk << ROW_BITS | its row (a chunk holds at most 2**ROW_BITS keys)


@njit(cache=True, nogil=True)
def _same(ao, ad, i, bo, bd, j) -> bool:
    a, b = ao[i], bo[j]
    n = ao[i + 1] - a
    if bo[j + 1] - b != n:
        return False
    for k in range(n):
        if ad[a + k] != bd[b + k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _seek(slots, h, k_offsets, k_data, offsets, data, i):
    """(the slot of the key equal to value i, True), or (the free slot where it would go, False)."""
    mask = np.uint64(len(slots) - 1)
    low = np.uint64(0xFFFFFFFF)
    rows = np.uint64((1 << ROW_BITS) - 1)
    tag = h >> np.uint64(32)
    at = h & mask
    while True:
        slot = slots[at]
        j = slot & low
        if j == low:
            return at, False
        if (slot >> np.uint64(32)) == tag:
            c = np.int64(j >> np.uint64(ROW_BITS))
            if _same(offsets, data, i, k_offsets[c], k_data[c], np.int64(j & rows)):
                return at, True
        at = (at + np.uint64(1)) & mask


@njit(cache=True, nogil=True)
def build(offsets, data, valid, slots, keep) -> int:
    """Insert every valid key (chunk c's row i: bytes ``data[c][offsets[c][i]:offsets[c][i+1]]``) into ``slots``
    (each the hash's high 32 bits over the key's place, ``FREE`` in the low 32 bits when free); returns the distinct
    keys. ``len(slots)`` is a power of two above the keys."""
    distinct = 0
    for c in range(len(valid)):
        co, cd, cv = offsets[c], data[c], valid[c]
        for i in range(len(cv)):
            if not cv[i]:
                continue
            h = _hash(cd, co[i], co[i + 1], keep)
            at, known = _seek(slots, h, offsets, data, co, cd, i)
            if not known:
                slots[at] = ((h >> np.uint64(32)) << np.uint64(32)) | np.uint64((c << ROW_BITS) | i)
                distinct += 1
    return distinct


@njit(cache=True, nogil=True)
def probe(k_offsets, k_data, slots, keep, offsets, data, valid, found) -> None:
    """``found[i]``: value i (valid; bytes ``data[offsets[i]:offsets[i+1]]``) equals a key of the table ``build``
    filled from the chunks ``k_offsets``, ``k_data``; a null value is found nowhere."""
    for i in range(len(valid)):
        found[i] = valid[i] and _seek(slots, _hash(data, offsets[i], offsets[i + 1], keep), k_offsets, k_data,
                                      offsets, data, i)[1]
