"""AMQP 1.0's lifecycle pass (numba), loaded through ``hotpath.load_compiled`` as ``kernels.py`` is: ``array10.py``
prepares the columns and reads what this gives. ``Connection10`` (amqp10.py) is the reference; this pass follows it
step by step for the connections it models and gives up on a connection (``bad``) the moment it meets anything
else, whose rows are then the machine's.

The arrays the pass keeps, indexed by session slot ``s``, link slot ``k`` or record row ``r``. Sessions: ``s_ch``
(the begin's channel), ``s_state`` (endpoint), ``win[s, d, j]`` (j: next-outgoing-id, initial-outgoing-id,
outgoing-window, incoming-window, remote-incoming-window of direction d; NONE for None), ``s_next[s, d]`` (the next
delivery-id direction d's sender uses), ``s_first_link`` (its links in creation order, ``l_next``). Links: ``l_*``.
Records (a delivery, at its first transfer's row): ``r_*``, the live ones kept per link in a doubly linked list
(``link.unsettled``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from amqplens.lifecycle.kernels import _step as _machine_step
from amqplens.lifecycle.array10 import (
    F_CH, F_CREDIT, F_DC, F_DID, F_DIR, F_DRAIN, F_FIRST, F_H, F_IW, F_LAST, F_MORE, F_NAME, F_NII, F_NOI, F_OW, F_PERF, F_RCV,
    F_REMOTE, F_ROLE, F_SEQ, F_SETTLED, F_SND, F_SRC, F_STATE, F_TGT, F_TS,
    E_CHANNEL, E_CREDIT, E_DC, E_DRAIN, E_ENTITY, E_EVENT, E_HANDLE, E_IW, E_OW, E_REASON, E_RIW, E_ROW, E_SIDE,
    EV_CLOSE, EV_CREDIT, EV_FLOW, EV_SETTLE, EV_TRANSFER, EV_WINDOW, NONE,
    P_ATTACH, P_BEGIN, P_CLOSE, P_OPEN, P_DETACH, P_DISPOSITION, P_END, P_FLOW, P_TRANSFER,
    R_CREDIT_EXCEEDED, R_UNKNOWN_ID,
)

M32 = 1 << 32


@njit(cache=True, nogil=True)
def _serial(a, b):
    """a - b in RFC 1982 serial-number arithmetic (32 bits): ``amqp10.serial_diff``."""
    return (a - b + (1 << 31)) % M32 - (1 << 31)


@njit(cache=True, nogil=True)
def _event(events, k, row, entity, event, channel):
    events[k, :] = 0
    events[k, E_ROW], events[k, E_ENTITY], events[k, E_EVENT], events[k, E_CHANNEL] = row, entity, event, channel
    events[k, E_HANDLE] = -1
    events[k, E_DC] = NONE
    events[k, E_DRAIN] = -1
    events[k, E_IW] = NONE
    events[k, E_OW] = NONE
    events[k, E_RIW] = NONE


@njit(cache=True, nogil=True)
def _session_row(events, k, row, s, toward, event, s_ch, win):
    """``Connection10._session_row``: the windows of the transfers toward ``toward``."""
    _event(events, k, row, 0, event, s_ch[s])
    events[k, E_IW] = win[s, toward, 3]
    events[k, E_OW] = win[s, 1 - toward, 2]
    events[k, E_RIW] = win[s, 1 - toward, 4]
    return k + 1


@njit(cache=True, nogil=True)
def _link_row(events, k, row, s, link, event, s_ch, l_sender, l_handle, l_credit, l_dc, l_drain):
    """``Connection10._link_row``: the link's credit, in the receiver's handle numbering when it attached."""
    side = 1 - l_sender[link]
    if l_handle[link, side] < 0:
        side = l_sender[link]
    _event(events, k, row, 1, event, s_ch[s])
    events[k, E_HANDLE] = l_handle[link, side]
    events[k, E_SIDE] = side
    events[k, E_CREDIT] = l_credit[link]
    events[k, E_DC] = l_dc[link]
    events[k, E_DRAIN] = l_drain[link]
    events[k, E_REASON] = R_CREDIT_EXCEEDED if l_credit[link] < 0 else 0
    return k + 1


@njit(cache=True, nogil=True)
def _unlink(r, link, sender_key, r_prev, r_next, l_head, l_tail, outstanding, r_did, l_count):
    """A record that ended leaves its link's unsettled list and its session's outstanding ids."""
    p, q = r_prev[r], r_next[r]
    if p >= 0:
        r_next[p] = q
    else:
        l_head[link] = q
    if q >= 0:
        r_prev[q] = p
    else:
        l_tail[link] = p
    r_prev[r] = r_next[r] = -1
    l_count[link] -= 1
    key = sender_key + r_did[r]
    if key in outstanding and outstanding[key] == r:
        del outstanding[key]


@njit(cache=True, nogil=True)
def lifecycle_pass(bounds, order, cols, ep_next, ep_ev, ep_closed, ep_closing, ep_unseen,
                   tr_next, tr_effect, tr_flagged, n_tr_states, tr_ev, ev_state, ev_settle, eff_settle, eff_fire,
                   eff_revert, bad, r_state, r_by, r_by_ts, r_link, r_offkey, r_aux, r_of, r_last, events, why):
    """Every connection ``c`` (rows ``order[bounds[c]:bounds[c+1]]``, the runner's order): ``bad[c]`` set where the
    pass gives it up; else each transfer row's record (``r_*``: machine state, settling row and time, link
    slot, what the row says of its link, whether its key is its offset) and the flow events (``events``' rows, returned: how many).

    ``ep_ev``: the endpoint machine's open, open_reply, close, close_reply; ``tr_ev``: the transfer machine's
    transfer, transfer_settled, detach, end, close, capture_end; ``ev_state``/``ev_settle``: per disposition state
    code (the seventh: none) its state_/settle_ event."""
    n = len(order)
    perf, direction, channel, handle, remote = cols[F_PERF], cols[F_DIR], cols[F_CH], cols[F_H], cols[F_REMOTE]
    role, name, snd, rcv, src, tgt = cols[F_ROLE], cols[F_NAME], cols[F_SND], cols[F_RCV], cols[F_SRC], cols[F_TGT]
    dcount, credit, drain = cols[F_DC], cols[F_CREDIT], cols[F_DRAIN]
    iw, ow, nii, noi = cols[F_IW], cols[F_OW], cols[F_NII], cols[F_NOI]
    did, settled, first, last, dstate, seq, ts = (cols[F_DID], cols[F_SETTLED], cols[F_FIRST], cols[F_LAST],
                                                   cols[F_STATE], cols[F_SEQ], cols[F_TS])
    more = cols[F_MORE]
    cap = n + 2
    s_ch = np.zeros(cap, np.int64)
    s_state = np.zeros(cap, np.int64)
    win = np.full((cap, 2, 5), NONE, np.int64)
    s_next = np.full((cap, 2), NONE, np.int64)
    s_first_link = np.full(cap, -1, np.int64)
    s_last_link = np.full(cap, -1, np.int64)
    l_next = np.full(cap, -1, np.int64)  # the session's next link, in creation order
    l_sender = np.zeros(cap, np.int64)
    l_name = np.full(cap, -1, np.int64)
    l_handle = np.full((cap, 2), -1, np.int64)
    l_state = np.zeros(cap, np.int64)
    l_snd = np.full(cap, -1, np.int64)
    l_rcv = np.full(cap, -1, np.int64)
    l_src = np.full(cap, -1, np.int64)
    l_tgt = np.full(cap, -1, np.int64)
    l_initial = np.full(cap, NONE, np.int64)
    l_dc = np.full(cap, NONE, np.int64)
    l_credit = np.zeros(cap, np.int64)
    l_drain = np.full(cap, -1, np.int64)
    l_head = np.full(cap, -1, np.int64)
    l_tail = np.full(cap, -1, np.int64)
    l_count = np.zeros(cap, np.int64)
    l_open = np.full(cap, -1, np.int64)  # the delivery whose transfers are still coming
    r_prev = np.full(n, -1, np.int64)
    r_next = np.full(n, -1, np.int64)
    n_names = name.max() + 2 if n else 2
    ne = 0
    ns = 0
    nl = 0
    ev_transfer, ev_transfer_settled, ev_detach, ev_end, ev_close, ev_capture_end = (
        tr_ev[0], tr_ev[1], tr_ev[2], tr_ev[3], tr_ev[4], tr_ev[5])
    for c in range(len(bounds) - 1):
        if bad[c]:
            continue
        e0 = ne
        sessions = Dict.empty(key_type=types.int64, value_type=types.int64)  # direction * 2^32 + channel -> slot
        links = Dict.empty(key_type=types.int64, value_type=types.int64)  # (slot, name, sender) -> link
        handles = Dict.empty(key_type=types.int64, value_type=types.int64)  # ((slot * 2 + d) << 32) + handle -> link
        outstanding = Dict.empty(key_type=types.int64, value_type=types.int64)  # ((slot * 2 + sender) << 32) + id -> row
        last_seq = Dict.empty(key_type=types.int64, value_type=types.int64)  # ((d << 16 | channel) << 32) + handle
        closing = -1
        ok = True
        i = -1
        for j in range(bounds[c], bounds[c + 1]):
            i = order[j]
            p = perf[i]
            if p == 0 or p == P_OPEN:  # (an open: its request pair only)
                continue
            d = direction[i]
            ch = channel[i]
            t = ts[i]
            if p == P_BEGIN:
                s = -1
                if remote[i] >= 0:
                    key = (1 - d) * M32 + remote[i]
                    if key in sessions:
                        s = sessions[key]
                if s < 0:
                    for key in sessions:  # a live session of this channel number: their rows' keys would meet
                        if s_ch[sessions[key]] == ch:
                            ok = False
                    if not ok:
                        break
                    s = ns
                    ns += 1
                    s_ch[s] = ch
                    s_state[s] = ep_unseen
                own = d * M32 + ch
                if own in sessions and sessions[own] != s:  # a channel mapped again: the old session's end
                    ok = False
                    break
                sessions[own] = s
                s_state[s] = ep_next[s_state[s], ep_ev[0] if remote[i] < 0 else ep_ev[1]]
                win[s, d, 0] = noi[i]
                win[s, d, 1] = noi[i]
            elif p == P_CLOSE:
                if closing < 0:  # every session still mapped ends at the close, its link rows at this frame
                    closing = i
                    ne, ok = _end_sessions(sessions, ev_close, i, t, True, s_first_link, l_next, events, ne, r_state,
                                           r_by, r_by_ts, ts, tr_next, tr_effect, tr_flagged, n_tr_states, eff_settle,
                                           eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did,
                                           l_count, l_sender, s_ch, l_handle, l_credit, l_dc, l_drain, l_open)
                    if not ok:
                        break
                continue
            own = d * M32 + ch
            if own not in sessions:  # no begin seen: the machine adopts a session
                ok = False
                break
            s = sessions[own]
            if p == P_BEGIN or p == P_FLOW:
                # _windows: a begin/flow from d states d's windows; the peer's remote-incoming-window follows
                win[s, d, 3] = iw[i]
                win[s, d, 2] = ow[i]
                if noi[i] != NONE:
                    win[s, d, 0] = noi[i]
                if iw[i] != NONE:
                    base = nii[i]
                    if base == NONE:
                        base = win[s, 1 - d, 1]
                    if base == NONE or win[s, 1 - d, 0] == NONE:
                        win[s, 1 - d, 4] = iw[i]
                    else:
                        win[s, 1 - d, 4] = iw[i] - _serial(win[s, 1 - d, 0], base)
                ne = _session_row(events, ne, i, s, d, EV_WINDOW, s_ch, win)
                if p == P_BEGIN or handle[i] < 0:
                    continue
                hk = ((s * 2 + d) << 32) + handle[i]
                if hk not in handles:  # attach not seen
                    ok = False
                    break
                link = handles[hk]
                if d == l_sender[link]:  # the sender states its own delivery-count and credit
                    if dcount[i] != NONE:
                        l_dc[link] = dcount[i]
                    l_credit[link] = 0 if credit[i] == NONE else credit[i]
                    l_drain[link] = drain[i]
                    ne = _link_row(events, ne, i, s, link, EV_FLOW, s_ch, l_sender, l_handle, l_credit, l_dc, l_drain)
                    continue
                base = dcount[i]
                if base == NONE:
                    base = l_initial[link] if l_initial[link] != NONE else 0
                if l_dc[link] == NONE:
                    l_dc[link] = base
                l_credit[link] = (0 if credit[i] == NONE else credit[i]) - _serial(l_dc[link], base)
                l_drain[link] = drain[i]
                ne = _link_row(events, ne, i, s, link, EV_CREDIT, s_ch, l_sender, l_handle, l_credit, l_dc, l_drain)
            elif p == P_ATTACH:
                sender = d if role[i] == 1 else 1 - d
                lk = (s * n_names + name[i] + 1) * 2 + sender
                link = -1
                if lk in links:
                    link = links[lk]
                    if l_state[link] == ep_closed:
                        link = -1
                if link < 0:
                    link = nl
                    nl += 1
                    links[lk] = link
                    l_sender[link], l_name[link] = sender, name[i]
                    l_state[link] = ep_unseen
                    if s_last_link[s] >= 0:
                        l_next[s_last_link[s]] = link
                    else:
                        s_first_link[s] = link
                    s_last_link[s] = link
                hk = ((s * 2 + d) << 32) + handle[i]
                if hk in handles and handles[hk] != link:  # a handle taken again without a detach
                    ok = False
                    break
                l_handle[link, d] = handle[i]
                handles[hk] = link
                fresh = l_state[link] == ep_unseen or l_state[link] == ep_closed
                l_state[link] = ep_next[l_state[link], ep_ev[0] if fresh else ep_ev[1]]
                if d == sender:
                    l_snd[link], l_initial[link] = snd[i], dcount[i]
                    if l_dc[link] == NONE:
                        l_dc[link] = l_initial[link]
                else:
                    l_rcv[link] = rcv[i]
                if l_src[link] < 0:
                    l_src[link] = src[i]
                if l_tgt[link] < 0:
                    l_tgt[link] = tgt[i]
            elif p == P_TRANSFER:
                hk = ((s * 2 + d) << 32) + handle[i]
                if hk not in handles:
                    ok = False
                    break
                link = handles[hk]
                if l_sender[link] != d:  # a transfer against the link's role
                    ok = False
                    break
                rec = l_open[link]
                if rec >= 0:  # the next transfer of the delivery still open (more=true)
                    if did[i] != NONE and did[i] != did[rec]:  # a new delivery cuts it short: flagged
                        ok = False
                        break
                    r_of[i] = rec
                    if settled[i]:  # the sender may settle on any frame of the delivery
                        st = _step(rec, i, t, ev_transfer_settled, r_state, r_by, r_by_ts, ts, tr_next, tr_effect,
                                   tr_flagged, n_tr_states, eff_settle, eff_fire, eff_revert)
                        if st < 0:
                            ok = False
                            break
                        if st == 1:
                            _unlink(rec, link, (s * 2 + d) << 32, r_prev, r_next, l_head, l_tail, outstanding, did,
                                    l_count)
                else:
                    if did[i] == NONE:  # a continuation whose first transfer the capture missed: flagged
                        ok = False
                        break
                    rec = i
                    r_of[i] = i
                    sk = (1 << 48 if d else 0) + (ch << 32) + handle[i]
                    q = seq[i]
                    prev = last_seq[sk] if sk in last_seq else -1
                    if q == NONE or q <= prev:
                        r_offkey[i] = True
                    else:
                        last_seq[sk] = q
                    r_link[i] = link
                    # what the row says of its link, as it is now (a later attach may fill in an address)
                    # (the queue: toward the broker the target, else the source; from it the source, else the target)
                    if (d == 0 and l_tgt[link] < 0) or (d == 1 and l_src[link] >= 0):
                        r_aux[i, 0] = l_src[link]
                    else:
                        r_aux[i, 1] = l_tgt[link]
                    r_aux[i, 2], r_aux[i, 3], r_aux[i, 4], r_aux[i, 5] = l_snd[link], l_rcv[link], l_name[link], s_ch[s]
                    r_state[i] = 0
                    ev = ev_transfer_settled if settled[i] else ev_transfer
                    okey = ((s * 2 + d) << 32) + did[i]
                    if okey in outstanding:  # a delivery-id still live: the machine flags it
                        ok = False
                        break
                    st = _step(i, i, t, ev, r_state, r_by, r_by_ts, ts, tr_next, tr_effect, tr_flagged, n_tr_states,
                               eff_settle, eff_fire, eff_revert)
                    if st < 0:
                        ok = False
                        break
                    s_next[s, d] = (did[i] + 1) % M32
                    if st == 0:  # live: outstanding and the link's unsettled
                        outstanding[okey] = i
                        r_prev[i] = l_tail[link]
                        if l_tail[link] >= 0:
                            r_next[l_tail[link]] = i
                        else:
                            l_head[link] = i
                        l_tail[link] = i
                        l_count[link] += 1
                    l_dc[link] = ((0 if l_dc[link] == NONE else l_dc[link]) + 1) % M32
                    l_credit[link] -= 1
                    ne = _link_row(events, ne, i, s, link, EV_TRANSFER, s_ch, l_sender, l_handle, l_credit, l_dc, l_drain)
                if more[i]:
                    l_open[link] = rec
                else:
                    l_open[link] = -1
                    r_last[rec] = i
                if win[s, d, 0] != NONE:
                    win[s, d, 0] = (win[s, d, 0] + 1) % M32
                if win[s, d, 4] != NONE:
                    win[s, d, 4] -= 1
                ne = _session_row(events, ne, i, s, 1 - d, EV_TRANSFER, s_ch, win)
            elif p == P_DISPOSITION:
                sender = 1 - d if role[i] == 0 else d  # (a disposition without a role: the sender's)
                f = first[i]
                if f == NONE:
                    continue
                l = f if last[i] == NONE else last[i]
                code = dstate[i]
                ev = ev_settle[code] if settled[i] else ev_state[code]
                span = _serial(l, f) + 1
                if span < 1:
                    span = 1
                base_key = (s * 2 + sender) << 32
                hits = 0
                if span <= 4 * len(outstanding) + 64:
                    for x in range(span):
                        okey = base_key + (f + x) % M32
                        if okey in outstanding:
                            r = outstanding[okey]
                            hits += 1
                            if not _dispose(r, r_link[r], i, t, ev, base_key, r_state, r_by, r_by_ts, ts, tr_next,
                                            tr_effect, tr_flagged, n_tr_states, eff_settle, eff_fire, eff_revert,
                                            r_prev, r_next, l_head, l_tail, outstanding, did, l_count):
                                ok = False
                                break
                else:  # a span past every id outstanding: each of them, in the session's links' order
                    k = s_first_link[s]
                    while k >= 0 and ok:
                        if l_sender[k] == sender:
                            r = l_head[k]
                            while r >= 0:
                                nr = r_next[r]
                                if 0 <= _serial(did[r], f) < span:
                                    hits += 1
                                    if not _dispose(r, k, i, t, ev, base_key, r_state, r_by, r_by_ts, ts, tr_next,
                                                    tr_effect, tr_flagged, n_tr_states, eff_settle, eff_fire,
                                                    eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did,
                                                    l_count):
                                        ok = False
                                        break
                                r = nr
                        k = l_next[k]
                if not ok:
                    break
                nxt = s_next[s, sender]
                if hits == 0 and (nxt == NONE or _serial(l, nxt) >= 0):
                    _event(events, ne, i, 0, EV_SETTLE, s_ch[s])
                    events[ne, E_REASON] = R_UNKNOWN_ID
                    ne += 1
            elif p == P_DETACH:
                hk = ((s * 2 + d) << 32) + handle[i]
                if hk not in handles:
                    ok = False
                    break
                link = handles[hk]
                l_state[link] = ep_next[l_state[link], ep_ev[3] if l_state[link] == ep_closing else ep_ev[2]]
                ne, ok = _end_link(s, link, ev_detach, i, t, True, events, ne, r_state, r_by, r_by_ts, ts, tr_next,
                                   tr_effect, tr_flagged, n_tr_states, eff_settle, eff_fire, eff_revert, r_prev, r_next,
                                   l_head, l_tail, outstanding, did, l_count, l_sender, s_ch, l_handle, l_credit, l_dc,
                                   l_drain, l_open)
                if not ok:
                    break
                if l_state[link] == ep_closed:
                    for x in range(2):
                        if l_handle[link, x] >= 0:
                            key = ((s * 2 + x) << 32) + l_handle[link, x]
                            if key in handles and handles[key] == link:
                                del handles[key]
            elif p == P_END:
                s_state[s] = ep_next[s_state[s], ep_ev[3] if s_state[s] == ep_closing else ep_ev[2]]
                k = s_first_link[s]
                while k >= 0 and ok:
                    ne, ok = _end_link(s, k, ev_end, i, t, True, events, ne, r_state, r_by, r_by_ts, ts, tr_next,
                                       tr_effect, tr_flagged, n_tr_states, eff_settle, eff_fire, eff_revert, r_prev,
                                       r_next, l_head, l_tail, outstanding, did, l_count, l_sender, s_ch, l_handle,
                                       l_credit, l_dc, l_drain, l_open)
                    k = l_next[k]
                if not ok:
                    break
                if s_state[s] == ep_closed:
                    gone = [key for key in sessions if sessions[key] == s]
                    for key in gone:
                        del sessions[key]
        if ok:  # the close's (what came after it) or the capture's end: no link rows
            ev_last = ev_close if closing >= 0 else ev_capture_end
            t_last = ts[closing] if closing >= 0 else 0
            ne, ok = _end_sessions(sessions, ev_last, closing, t_last, False, s_first_link, l_next, events, ne, r_state,
                                   r_by, r_by_ts, ts, tr_next, tr_effect, tr_flagged, n_tr_states, eff_settle,
                                   eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did, l_count,
                                   l_sender, s_ch, l_handle, l_credit, l_dc, l_drain, l_open)
        if not ok:
            bad[c] = True
            why[c] = i
            ne = e0
    return ne


@njit(cache=True, nogil=True)
def _step(r, row, t, ev, r_state, r_by, r_by_ts, ts, nxt, effect, flagged, n_states, eff_settle, eff_fire, eff_revert):
    """``Delivery.step`` of record ``r`` by the frame of ``row`` at ``t`` (``kernels._step``): -1 flagged, 1 ended."""
    return _machine_step(r, ev, nxt, effect, flagged, n_states, r_state, r_by, r_by_ts, row, t, eff_settle, eff_fire,
                         eff_revert, ts)


@njit(cache=True, nogil=True)
def _dispose(r, link, row, t, ev, base_key, r_state, r_by, r_by_ts, ts, nxt, effect, flagged, n_states, eff_settle,
             eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did, l_count) -> bool:
    """A disposition's step of record ``r`` (on ``link``); an ended record leaves its lists. False: flagged."""
    st = _step(r, row, t, ev, r_state, r_by, r_by_ts, ts, nxt, effect, flagged, n_states, eff_settle, eff_fire,
               eff_revert)
    if st == 1:
        _unlink(r, link, base_key, r_prev, r_next, l_head, l_tail, outstanding, did, l_count)
    return st >= 0


@njit(cache=True, nogil=True)
def _end_link(s, link, ev, row, t, rows, events, ne, r_state, r_by, r_by_ts, ts, nxt, effect, flagged, n_states,
              eff_settle, eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did, l_count, l_sender, s_ch,
              l_handle, l_credit, l_dc, l_drain, l_open):
    """``Connection10._end_link``: every delivery still unsettled on the link ends by ``ev``; a ``close`` row for the
    link when ``rows`` and it had some. Returns (events, ok)."""
    if l_open[link] >= 0:  # a delivery cut short by the link's end: flagged content_incomplete
        return ne, False
    had = l_count[link] > 0
    base_key = (s * 2 + l_sender[link]) << 32
    r = l_head[link]
    while r >= 0:
        nr = r_next[r]
        st = _step(r, row, t, ev, r_state, r_by, r_by_ts, ts, nxt, effect, flagged, n_states, eff_settle, eff_fire,
                   eff_revert)
        if st < 0:
            return ne, False
        if st == 1:
            _unlink(r, link, base_key, r_prev, r_next, l_head, l_tail, outstanding, did, l_count)
        r = nr
    if rows and had and row >= 0:
        ne = _link_row(events, ne, row, s, link, EV_CLOSE, s_ch, l_sender, l_handle, l_credit, l_dc, l_drain)
    return ne, True


@njit(cache=True, nogil=True)
def _end_sessions(sessions, ev, row, t, rows, s_first_link, l_next, events, ne, r_state, r_by, r_by_ts, ts, nxt, effect,
                  flagged, n_states, eff_settle, eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding, did,
                  l_count, l_sender, s_ch, l_handle, l_credit, l_dc, l_drain, l_open):
    """Every session a channel still maps to, once, ends its links by ``ev`` (the close, or the capture's end)."""
    seen = Dict.empty(key_type=types.int64, value_type=types.int64)
    for key in sessions:
        s = sessions[key]
        if s in seen:
            continue
        seen[s] = 1
        k = s_first_link[s]
        while k >= 0:
            ne, ok = _end_link(s, k, ev, row, t, rows, events, ne, r_state, r_by, r_by_ts, ts, nxt, effect, flagged,
                               n_states, eff_settle, eff_fire, eff_revert, r_prev, r_next, l_head, l_tail, outstanding,
                               did, l_count, l_sender, s_ch, l_handle, l_credit, l_dc, l_drain, l_open)
            if not ok:
                return ne, False
            k = l_next[k]
    return ne, True
