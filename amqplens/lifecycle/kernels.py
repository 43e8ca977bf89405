"""The lifecycle's compiled passes (numba), loaded through ``hotpath.load_compiled`` so that they share the decoder's
on-disk cache and a missing numba leaves every connection to the machines: ``fold.py`` (the runner's order) and
``array091.py`` (the 0-9-1 pass). Their Python reference is the machines' path (``runner.py``, ``amqp091.py``),
which the tests compare them with.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from amqplens.lifecycle.array091 import (
    A_BAD, A_CANCEL_OK, A_CONFIRM, A_CONFIRM_SELECT, A_CONN_CLOSE, A_CONN_CLOSE_OK, A_CONSUME, A_CONSUME_NOWAIT,
    A_CONSUME_OK, A_DELIVER, A_GET, A_GET_EMPTY, A_GET_OK, A_NONE, A_PUBLISH, A_QOS, A_SETTLE,
)


@njit(cache=True, nogil=True)
def _runner_order(lo: int, hi: int, direction, ts, rank, use, window: int, out) -> int:
    """The order ``runner.LifecycleRunner`` handles rows lo..hi-1 of one connection in (those with ``use``), when each
    direction's rows come in stream order (so its heaps are queues): into ``out``; returns how many."""
    queue = np.empty((2, hi - lo), np.int64)
    head = np.zeros(2, np.int64)
    tail = np.zeros(2, np.int64)
    held = 0
    k = 0
    for i in range(lo, hi + window + 1):
        if i < hi:
            if not use[i]:
                continue
            d = direction[i]
            queue[d, tail[d]] = i
            tail[d] += 1
            held += 1
            if held <= window:
                continue
        elif held == 0:
            break
        if head[0] < tail[0] and head[1] < tail[1]:
            a, b = queue[0, head[0]], queue[1, head[1]]
            d = 0 if ts[a] < ts[b] or (ts[a] == ts[b] and rank[a] <= rank[b]) else 1
        else:
            d = 0 if head[0] < tail[0] else 1
        out[k] = queue[d, head[d]]
        head[d] += 1
        k += 1
        held -= 1
    return k


@njit(cache=True, nogil=True)
def same_order(bounds, direction, ts, rank, drop, window: int, same) -> None:
    """Per connection (rows ``bounds[c]``..``bounds[c+1]``): does the runner handle the rows not dropped in the same
    order with the dropped rows fed as without them? ``same[c]`` False where not."""
    n = len(direction)
    every = np.ones(n, np.bool_)
    kept = ~drop
    for c in range(len(bounds) - 1):
        lo, hi = bounds[c], bounds[c + 1]
        dropped = False
        for i in range(lo, hi):
            dropped |= drop[i]
        if not dropped:
            continue
        full = np.empty(hi - lo, np.int64)
        part = np.empty(hi - lo, np.int64)
        nf = _runner_order(lo, hi, direction, ts, rank, every, window, full)
        npart = _runner_order(lo, hi, direction, ts, rank, kept, window, part)
        j = 0
        for i in range(nf):
            if drop[full[i]]:
                continue
            if j >= npart or part[j] != full[i]:
                same[c] = False
                break
            j += 1


@njit(cache=True, nogil=True)
def runner_orders(bounds, direction, ts, rank, window: int):
    """Every connection's rows (``bounds[c]``..``bounds[c+1]``) in the order the runner handles them, one after another."""
    n = len(direction)
    out = np.empty(n, np.int64)
    use = np.ones(n, np.bool_)
    for c in range(len(bounds) - 1):
        lo, hi = bounds[c], bounds[c + 1]
        _runner_order(lo, hi, direction, ts, rank, use, window, out[lo:hi])
    return out


@njit(cache=True, nogil=True)
def _step(r, ev, nxt, effect, flagged, n_states, state, by, by_ts, row, ts, eff_settle, eff_fire, eff_revert, sent):
    """``Delivery.step`` on record ``r`` (its first frame's row; ``sent``: the rows' times) by the frame of ``row`` at
    ``ts``: -1 flagged (the connection goes to the machine), 1 ended, 0 not."""
    s = state[r]
    if s >= n_states:
        return 0
    if flagged[s, ev]:
        return -1
    e = effect[s, ev]
    if eff_settle[e]:
        by[r], by_ts[r] = row, ts
    elif e == eff_fire:
        by[r], by_ts[r] = r, sent[r]
    elif e == eff_revert:
        by[r] = -1
    state[r] = nxt[s, ev]
    return 1 if state[r] >= n_states else 0


@njit(cache=True, nogil=True)
def _push(head, tail, nxt, ch, i) -> None:
    """Row ``i`` to the end of channel ``ch``'s list (``head``/``tail`` per channel, ``nxt`` per row)."""
    if tail[ch] >= 0:
        nxt[tail[ch]] = i
    else:
        head[ch] = i
    tail[ch] = i


@njit(cache=True, nogil=True)
def _pop(head, tail, nxt, ch) -> int:
    """The first row of channel ``ch``'s list, taken off it (-1: empty)."""
    i = head[ch]
    if i >= 0:
        head[ch] = nxt[i]
        if head[ch] < 0:
            tail[ch] = -1
    return i


@njit(cache=True, nogil=True)
def _emit(events, k, row, entity, consumer, event, prefetch, in_flight, chan):
    if k >= events.shape[0]:
        bigger = np.empty((events.shape[0] * 2, events.shape[1]), np.int32)
        bigger[:k] = events[:k]
        events = bigger
    events[k, 0], events[k, 1], events[k, 2], events[k, 3] = row, entity, consumer, event
    events[k, 4], events[k, 5], events[k, 6] = prefetch, in_flight, 1 if in_flight >= prefetch > 0 else 0
    events[k, 7] = chan
    return events, k + 1


@njit(cache=True, nogil=True)
def lifecycle_pass(bounds, order, action, ep_event, dchan, cons, tag, multiple, requeue_or_kind, seq, dirchan, ts,
          prefetch_arg, global_qos, no_ack, mandatory, max_pending_returns,
          p_tab, p_eff, p_flag, p_n, d_tab, d_eff, d_flag, d_n, e_tab, e_eff, e_flag,
          ev_p, ev_d, ev_e, eff_settle, eff_fire, eff_revert, eff_open, eff_close,
          bad, state, by, by_ts, dtag, closed_here, auto, rec_queue,
          chan_st, cons_st, last_seq, chans, nxt, rnxt, rec_cons, cs, final):
    """Every connection ``bounds[c]``..``bounds[c+1]`` of ``order`` (its rows in the runner's order). ``ev_p``/``ev_d``:
    indexes of the machine events used, ``ev_e``: endpoint events (open, open_reply, close_reply, closed state,
    unseen state). Returns the flow rows (row, entity, consumer, event, prefetch, in_flight, at_limit, channel).

    The state is the caller's (``array091.PassState``), so that a connection can be passed a chunk of rows at a time
    (``array091.ConnectionPass``): ``chan_st`` the per-channel arrays, ``cons_st`` the per-consumer ones (int64, see
    the unpacking below), ``last_seq`` per channel direction, ``chans`` the channels in the order the connection
    opened them, ``nxt``/``rnxt``/``rec_cons`` per row (-1 to start), ``cs`` (channels seen, the connection.close row,
    connection closed) the first connection's to start and the last one's at the end. ``final`` False: the
    connection goes on in a later call (no capture end: its channels stay open, its records outstanding)."""
    P_CONFIRM, P_PLAIN, P_ACK, P_NACK, P_CH_CLOSE, P_CONN_CLOSE, P_END = ev_p[0], ev_p[1], ev_p[2], ev_p[3], ev_p[4], ev_p[5], ev_p[6]
    P_MANDATORY = ev_p[7]
    D_MANUAL, D_CH_CLOSE, D_CONN_CLOSE, D_END, D_AUTO = ev_d[0], ev_d[1], ev_d[2], ev_d[3], ev_d[4]
    E_OPEN, E_CLOSE_REPLY, S_CLOSED, S_UNSEEN = ev_e[0], ev_e[1], ev_e[2], ev_e[3]
    n = len(action)
    # int32: rows, consumers and channels are below 2**31, prefetch counts 16-bit, in-flight counts below the rows; sized
    # for a flow row per channel and consumer of each delivery and settlement (the 2 GB load capture's largest
    # connection: 2,992,929 rows for 1,496,483 rows in, where one row a row in to start with doubled once)
    events = np.empty((2 * n + 16, 8), np.int32)
    k = 0
    (ep_state, confirm, next_seq, prefetch, cprefetch, in_flight, gone, u_head, u_tail, c_head, c_tail, q_head, q_tail,
     r_head, r_tail, r_len, g_head, g_tail) = chan_st
    registered, cancelled, c_noack, c_queue, c_prefetch, c_in_flight = cons_st
    touched = np.empty(n + 1, np.int64)  # consumers of the records one settlement or close ends (with repeats)
    for c in range(len(bounds) - 1):
        n_seen = cs[0] if c == 0 else 0
        closing = cs[1] if c == 0 else -1
        conn_closed = cs[2] != 0 if c == 0 else False
        failed = False
        for j in range(bounds[c], bounds[c + 1] + 2):
            last = j >= bounds[c + 1]
            if last and not final:
                break
            if not last:
                i = order[j]
                a = action[i]
                ch = dchan[i]
                ev = ep_event[i]
                if a == A_BAD:
                    failed = True
                    break
                if ev >= 0:  # a method on a channel other than 0: the endpoint machine
                    if gone[ch] or conn_closed:
                        failed = True
                        break
                    s = ep_state[ch]
                    if e_flag[s, ev] or (ev == E_OPEN and (e_eff[s, ev] == eff_open or e_eff[s, ev] == eff_close) and s != S_UNSEEN):
                        failed = True
                        break
                    if s == S_UNSEEN:
                        chans[n_seen] = ch
                        n_seen += 1
                    ep_state[ch] = e_tab[s, ev]
                elif a != A_NONE and a != A_CONN_CLOSE and a != A_CONN_CLOSE_OK:
                    failed = True  # a channel's method on channel 0: not modelled
                    break
                if a == A_PUBLISH or a == A_DELIVER or a == A_GET_OK:
                    dc = dirchan[i]
                    if seq[i] <= last_seq[dc]:
                        failed = True
                        break
                    last_seq[dc] = seq[i]
                if a == A_PUBLISH:
                    if confirm[ch]:
                        dtag[i] = next_seq[ch]
                        next_seq[ch] += 1
                        _push(c_head, c_tail, nxt, ch, i)
                        pe = P_CONFIRM
                    else:
                        pe = P_MANDATORY if mandatory[i] else P_PLAIN
                    if mandatory[i]:  # a basic.return may still name it (amqp091._returnable): oldest first, bounded
                        while r_head[ch] >= 0 and state[r_head[ch]] >= p_n:
                            r_head[ch] = rnxt[r_head[ch]]
                            r_len[ch] -= 1
                        if r_head[ch] < 0:
                            r_tail[ch] = -1
                        _push(r_head, r_tail, rnxt, ch, i)
                        r_len[ch] += 1
                        if r_len[ch] > max_pending_returns:  # the machine expires the oldest with a flag
                            failed = True
                            break
                    if _step(i, pe, p_tab, p_eff, p_flag, p_n, state, by, by_ts, i, ts[i], eff_settle, eff_fire, eff_revert, ts) < 0:
                        failed = True
                        break
                elif a == A_DELIVER or a == A_GET_OK:
                    if a == A_DELIVER:
                        kk = cons[i]
                        if kk < 0 or not registered[kk]:
                            failed = True
                            break
                        noack = c_noack[kk]
                        rec_queue[i] = c_queue[kk]
                    else:  # basic.get-ok answers the channel's oldest pending basic.get: its queue and no-ack
                        kk = -1
                        src = _pop(g_head, g_tail, nxt, ch)
                        if src < 0:
                            failed = True
                            break
                        noack = no_ack[src]
                        rec_queue[i] = src
                    if u_tail[ch] >= 0 and tag[i] <= tag[u_tail[ch]]:
                        failed = True
                        break
                    rec_cons[i] = kk
                    if noack:  # settled on send: no outstanding record, no flow row
                        auto[i] = True
                        if _step(i, D_AUTO, d_tab, d_eff, d_flag, d_n, state, by, by_ts, i, ts[i], eff_settle, eff_fire, eff_revert, ts) != 1:
                            failed = True
                            break
                        continue
                    if _step(i, D_MANUAL, d_tab, d_eff, d_flag, d_n, state, by, by_ts, i, ts[i], eff_settle, eff_fire, eff_revert, ts) != 0:
                        failed = True
                        break
                    _push(u_head, u_tail, nxt, ch, i)
                    in_flight[ch] += 1
                    events, k = _emit(events, k, i, 0, -1, 1, prefetch[ch], in_flight[ch], ch)
                    if kk >= 0:
                        c_in_flight[kk] += 1
                        events, k = _emit(events, k, i, 1, kk, 1, c_prefetch[kk], c_in_flight[kk], ch)
                elif a == A_SETTLE or a == A_CONFIRM:
                    client = a == A_SETTLE
                    t = tag[i]
                    head = u_head if client else c_head
                    tail = u_tail if client else c_tail
                    n_touched = 0
                    found = False
                    prev = -1
                    r = head[ch]
                    steps = 0
                    while r >= 0:
                        steps += 1
                        if steps > 100_000:  # a scan this long: the machine's dict is the better tool
                            failed = True
                            break
                        key = tag[r] if client else dtag[r]
                        if multiple[i] and t and key > t:
                            break
                        if multiple[i] or key == t:
                            found = True
                            if client:
                                got = _step(r, requeue_or_kind[i], d_tab, d_eff, d_flag, d_n, state, by, by_ts, i, ts[i], eff_settle, eff_fire, eff_revert, ts)
                            else:
                                got = _step(r, P_ACK if requeue_or_kind[i] == 0 else P_NACK, p_tab, p_eff, p_flag, p_n,
                                            state, by, by_ts, i, ts[i], eff_settle, eff_fire, eff_revert, ts)
                            if got != 1:
                                failed = True
                                break
                            if client:
                                in_flight[ch] -= 1
                                if rec_cons[r] >= 0:
                                    c_in_flight[rec_cons[r]] -= 1
                                    touched[n_touched] = rec_cons[r]
                                    n_touched += 1
                            r2 = nxt[r]
                            if prev >= 0:
                                nxt[prev] = r2
                            else:
                                head[ch] = r2
                            if tail[ch] == r:
                                tail[ch] = prev
                            r = r2
                            if not multiple[i]:
                                break
                            continue
                        if not multiple[i] and key > t:
                            break
                        prev = r
                        r = nxt[r]
                    if failed or not found:
                        failed = True
                        break
                    if client:
                        events, k = _emit(events, k, i, 0, -1, 2, prefetch[ch], in_flight[ch], ch)
                        ids = np.unique(touched[:n_touched])
                        for kk in ids:
                            events, k = _emit(events, k, i, 1, kk, 2, c_prefetch[kk], c_in_flight[kk], ch)
                elif a == A_QOS:
                    prefetch[ch] = prefetch_arg[i]
                    if not global_qos[i]:
                        cprefetch[ch] = prefetch_arg[i]
                    events, k = _emit(events, k, i, 0, -1, 0, prefetch[ch], in_flight[ch], ch)
                elif a == A_GET:
                    _push(g_head, g_tail, nxt, ch, i)
                elif a == A_GET_EMPTY:
                    _pop(g_head, g_tail, nxt, ch)
                elif a == A_CONSUME:
                    _push(q_head, q_tail, nxt, ch, i)
                elif a == A_CONSUME_NOWAIT or a == A_CONSUME_OK:
                    kk = cons[i]
                    src = i if a == A_CONSUME_NOWAIT else _pop(q_head, q_tail, nxt, ch)
                    if kk < 0 or (a == A_CONSUME_NOWAIT and registered[kk]) or cancelled[kk]:
                        failed = True
                        break
                    if not registered[kk]:
                        c_noack[kk] = src >= 0 and no_ack[src]
                        registered[kk] = True
                        c_prefetch[kk] = cprefetch[ch]
                        c_queue[kk] = src
                elif a == A_CANCEL_OK:  # the consumer leaves the channel; its deliveries stay outstanding
                    kk = cons[i]
                    if kk >= 0 and registered[kk]:
                        registered[kk] = False
                        cancelled[kk] = True
                elif a == A_CONFIRM_SELECT:
                    if not confirm[ch]:
                        confirm[ch] = True
                        next_seq[ch] = 1
                elif a == A_CONN_CLOSE:
                    closing = i
            # channel and connection ends: at a channel's close-ok (that channel), connection.close-ok and the end
            # (every channel the connection opened, in the order it did)
            close_row = -1
            n_close = 0
            one = False
            if last:
                if j > bounds[c + 1]:
                    break
                close_row = closing
                pe_c, de_c = (P_CONN_CLOSE, D_CONN_CLOSE) if closing >= 0 else (P_END, D_END)
                n_close = n_seen
            elif a == A_CONN_CLOSE_OK:
                close_row, pe_c, de_c, n_close = i, P_CONN_CLOSE, D_CONN_CLOSE, n_seen
                conn_closed = True
                closing = -1
            elif ev == E_CLOSE_REPLY and ep_state[ch] == S_CLOSED:
                close_row, pe_c, de_c, n_close, one = i, P_CH_CLOSE, D_CH_CLOSE, 1, True
                closed_here[i] = True
            close_ts = ts[close_row] if close_row >= 0 else 0
            for x in range(n_close):
                cc = ch if one else chans[x]
                had = in_flight[cc]
                n_touched = 0
                r = u_head[cc]
                while r >= 0:
                    if rec_cons[r] >= 0:
                        touched[n_touched] = rec_cons[r]
                        n_touched += 1
                    got = _step(r, de_c, d_tab, d_eff, d_flag, d_n, state, by, by_ts, close_row, close_ts,
                                eff_settle, eff_fire, eff_revert, ts)
                    if got < 0:
                        failed = True
                    elif got == 1:
                        in_flight[cc] -= 1
                        if rec_cons[r] >= 0:
                            c_in_flight[rec_cons[r]] -= 1
                    r = nxt[r]
                # the unconfirmed publishes, then the mandatory ones no return named (an ended one is not stepped)
                for head, link in ((c_head, nxt), (r_head, rnxt)):
                    r = head[cc]
                    while r >= 0:
                        if _step(r, pe_c, p_tab, p_eff, p_flag, p_n, state, by, by_ts, close_row, close_ts,
                                 eff_settle, eff_fire, eff_revert, ts) < 0:
                            failed = True
                        r = link[r]
                u_head[cc] = u_tail[cc] = c_head[cc] = c_tail[cc] = r_head[cc] = r_tail[cc] = -1
                r_len[cc] = 0
                if had and close_row >= 0:
                    events, k = _emit(events, k, close_row, 0, -1, 3, prefetch[cc], in_flight[cc], cc)
                    for kk in np.unique(touched[:n_touched]):
                        events, k = _emit(events, k, close_row, 1, kk, 3, c_prefetch[kk], c_in_flight[kk], cc)
                if one:  # a fresh channel, closed: nothing may follow on it
                    gone[cc] = True
            if failed:
                break
        if failed:
            bad[c] = True
        cs[0], cs[1], cs[2] = n_seen, closing, 1 if conn_closed else 0
    return events[:k].copy() if k * 5 < events.shape[0] * 4 else events[:k]
