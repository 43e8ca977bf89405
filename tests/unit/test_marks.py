"""``streaming.Marks`` against the deque of (offset, time) tuples it replaced, written out here as the reference:
the same times and the same marks left after any mix of adds, runs, clears and lookups, offsets in order or not."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest

from amqplens.decode.streaming import Marks


def _deque_time_at(marks: collections.deque, offset: int) -> int:
    while len(marks) > 1 and marks[1][0] <= offset:
        marks.popleft()
    return marks[0][1] if marks else 0


@pytest.mark.parametrize("seed", range(40))
def test_marks_match_the_deque(seed: int) -> None:
    rng = random.Random(seed)
    ordered = seed % 2 == 0  # half the runs with offsets that only rise, half with any offsets
    ref: collections.deque = collections.deque()
    marks = Marks()
    at = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.3:
            at = at + rng.randrange(0, 300) if ordered else rng.randrange(0, 5000)
            ts = rng.randrange(0, 10**6)
            ref.append((at, ts))
            marks.add(at, ts)
        elif op < 0.5:
            k = rng.randrange(0, 40)
            offs = np.cumsum([rng.randrange(0, 300) for _ in range(k)]).astype(np.int64) + at if ordered else \
                np.array([rng.randrange(0, 5000) for _ in range(k)], np.int64)
            times = np.array([rng.randrange(0, 10**6) for _ in range(k)], np.int64)
            if k:
                at = int(offs[-1]) if ordered else at
            ref.extend(zip(offs.tolist(), times.tolist()))
            marks.extend(offs, times)
        elif op < 0.53:
            ref.clear()
            marks.clear()
        elif op < 0.8:
            off = rng.randrange(0, at + 400) if ordered else rng.randrange(0, 5000)
            assert marks.time_at(off) == _deque_time_at(ref, off)
        else:
            off = rng.randrange(0, at + 400) if ordered else rng.randrange(0, 5000)
            marks.spend(off)
            _deque_time_at(ref, off)
        assert len(marks) == len(ref)
        live_at, live_ts = marks.live()
        assert list(zip(live_at.tolist(), live_ts.tolist())) == list(ref)


def test_an_empty_marks_gives_zero() -> None:
    marks = Marks()
    assert marks.time_at(100) == 0 and len(marks) == 0
    marks.spend(100)
    assert marks.live()[0].tolist() == []
