"""``e2e.fifo_pass`` compiled (numba) for the keys with a requeue or a redelivery: the same rule, event by event, in
arrays, not a Python call per event (the 300 MB load capture: about 200k such events; the 2 GB one about 1.4M).

The rule's state per key as fifo_pass keeps it, with each queue and delivery id as a number (Arrow's dictionary
codes; a null is a code of its own, as None is a key of its own in fifo_pass's dicts):

- a taker per queue (first deliveries over the key's publishes, redeliveries over the queue's requeued deliveries)
  takes rank m_j = j + min(0, min_{k<=j}(P_k - k)) when m_j > m_{j-1}; m grows by 0 or 1 a step (P never falls),
  so the rank taken is always the taker's count of takes + 1: the next publish, or the next requeued delivery of
  its queue (a linked list per queue, walked once);
- a requeued first delivery's publish time (``origin``), each redelivery's requeued delivery (``links``), each
  resolved when its key ends, following at most ``HOPS`` links.

State touched by a key is reset when the key ends (lists of what was touched): time linear in the events.
``fifo_pass`` stays the reference: ``tests/unit/test_fifo_columns.py`` compares both on wild event streams.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from amqplens.jobs.metrics.fifo_events import AGAIN, FIRST, HOPS, NULL_US, PUBLISH, REQUEUE, key_starts


@njit(cache=True, nogil=True)
def _pass(key_start, ev, ts, q, rid, rq, nq, nid, hops):
    """Each demand row's publish time (``p``; ``has``: False for null): rows in key order, ``key_start`` marks the
    first row of each key."""
    n = len(ev)
    p = np.zeros(n, np.int64)
    has = np.zeros(n, np.bool_)
    pubs = np.zeros(n + 1, np.int64)
    # per queue: the first deliveries' and the redeliveries' takers (j, lo, m; lo unset while j = 0), the requeue list
    fj = np.zeros(nq, np.int64)
    flo = np.zeros(nq, np.int64)
    fm = np.zeros(nq, np.int64)
    aj = np.zeros(nq, np.int64)
    alo = np.zeros(nq, np.int64)
    am = np.zeros(nq, np.int64)
    count = np.zeros(nq, np.int64)  # the queue's requeued deliveries so far: the redeliveries' supply
    head = np.full(nq, -1, np.int64)
    tail = np.full(nq, -1, np.int64)
    taken = np.full(nq, -1, np.int64)  # the requeue row last taken of each queue
    nxt = np.full(n, -1, np.int64)  # requeue row -> the next requeue row of its queue
    # per delivery id: origin (0 unset, 1 None, 2 a time) and the requeue it took
    ostate = np.zeros(nid, np.int8)
    otime = np.zeros(nid, np.int64)
    link = np.full(nid, -1, np.int64)
    touched_q = np.zeros(n, np.int64)
    touched_id = np.zeros(2 * n, np.int64)
    waiting = np.zeros(n, np.int64)
    nq_t = 0
    nid_t = 0
    nwait = 0
    npub = 0
    qseen = np.zeros(nq, np.bool_)
    for i in range(n + 1):
        if i == n or key_start[i]:
            # the key before ends: its redeliveries answered, its state reset
            for w in range(nwait):
                r = waiting[w]
                prev = link[rid[r]]
                if prev >= 0 and prev != nid - 1:  # fifo_pass: no link, or a link to a requeue of no id, is None
                    for _ in range(hops - 1):
                        up = link[prev]
                        if up >= 0:
                            prev = up
                    if ostate[prev] == 2:
                        p[r] = otime[prev]
                        has[r] = True
            for k in range(nq_t):
                x = touched_q[k]
                fj[x] = 0
                fm[x] = 0
                aj[x] = 0
                am[x] = 0
                count[x] = 0
                head[x] = -1
                tail[x] = -1
                taken[x] = -1
                qseen[x] = False
            for k in range(nid_t):
                x = touched_id[k]
                ostate[x] = 0
                link[x] = -1
            nq_t = 0
            nid_t = 0
            nwait = 0
            npub = 0
            if i == n:
                break
        kind = ev[i]
        if kind == PUBLISH:
            pubs[npub] = ts[i]
            npub += 1
            continue
        x = q[i]
        if not qseen[x]:
            qseen[x] = True
            touched_q[nq_t] = x
            nq_t += 1
        if kind == REQUEUE:
            if tail[x] < 0:
                head[x] = i
            else:
                nxt[tail[x]] = i
            tail[x] = i
            nxt[i] = -1
            count[x] += 1
        elif kind == FIRST:
            fj[x] += 1
            d = npub - fj[x]
            if fj[x] == 1 or d < flo[x]:
                flo[x] = d
            m = fj[x] + min(0, flo[x])
            took = m > fm[x]
            fm[x] = m
            if took and pubs[m - 1] != NULL_US:
                p[i] = pubs[m - 1]
                has[i] = True
            if rq[i]:
                y = rid[i]
                touched_id[nid_t] = y
                nid_t += 1
                ostate[y] = 2 if has[i] else 1
                otime[y] = p[i]
        else:
            aj[x] += 1
            d = count[x] - aj[x]
            if aj[x] == 1 or d < alo[x]:
                alo[x] = d
            m = aj[x] + min(0, alo[x])
            if m > am[x]:
                at = head[x] if taken[x] < 0 else nxt[taken[x]]
                taken[x] = at
                y = rid[i]
                touched_id[nid_t] = y
                nid_t += 1
                link[y] = rid[at]
            am[x] = m
            waiting[nwait] = i
            nwait += 1
    return p, has


def _numbered(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """Each value's number (Arrow's dictionary code; a null the number after the last value) and how many there are."""
    enc = col.dictionary_encode()
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks() if enc.num_chunks else pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    k = len(enc.dictionary)
    return pc.fill_null(enc.indices, k).to_numpy(zero_copy_only=False).astype(np.int64), k + 1


def fifo_rare(t: pa.Table, payload: list[str]):
    """``fifo_pass`` over ``t`` (the events of whole keys, sorted as fifo_pass reads them) in one compiled pass: each
    first delivery's and redelivery's payload and ``p_us`` (in row order, where fifo_pass answers redeliveries when
    their key ends: the same rows)."""
    n = t.num_rows
    if not n:
        return
    starts = key_starts(t)
    ev = t.column("_ev").to_numpy(zero_copy_only=False).astype(np.int64)
    ts = t.column("_tsk").to_numpy(zero_copy_only=False).astype(np.int64)
    q, nq = _numbered(t.column("_q"))
    rid, nid = _numbered(t.column("_id"))
    rq = pc.fill_null(t.column("_rq"), False).to_numpy(zero_copy_only=False).astype(np.bool_)
    p, has = _pass(starts, ev, ts, q, rid, rq, nq, nid, HOPS)
    demand = np.flatnonzero((ev == FIRST) | (ev == AGAIN))
    out = t.select(payload).take(pa.array(demand))
    p_us = pa.array(p[demand], pa.int64(), mask=~has[demand])
    yield from pa.Table.from_arrays([*out.columns, p_us], names=[*payload, "p_us"]).to_batches()
