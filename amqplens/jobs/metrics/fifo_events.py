"""The events of the end-to-end FIFO matching (``e2e.fifo_pass``, ``e2e.fifo_columns``, ``fifo_rare``): their kinds,
the null time, how far requeues are followed, and where each key's events begin. Read by both passes; imports
neither."""

from __future__ import annotations

import numpy as np

# Requeues of one message followed back to its first delivery (one equi-join each); a redelivery
# further down a chain counts in missing. Requeue chains are short: a consumer that requeues a
# message for ever shows in the redelivered rate.
HOPS = 4

PUBLISH, REQUEUE, FIRST, AGAIN = 0, 1, 2, 3  # the events of a key; the first two supply, the others take
NULL_US = -(2**63)  # a null time: sorts first, as Spark sorts nulls


def key_starts(t, names=("capture_id", "_key")) -> np.ndarray:
    """Whether each row of ``t`` (sorted by ``names``) starts a key: one of ``names`` unlike the row before's (a null
    like a null, as Spark's partition keys), compared in Arrow, not as a Python string per row. The first row starts
    one."""
    import pyarrow.compute as pc

    n = t.num_rows
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for name in names:
            col = t.column(name)
            a, b = col.slice(1), col.slice(0, n - 1)
            same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
            new[1:] |= ~same.to_numpy(zero_copy_only=False)
    return new
