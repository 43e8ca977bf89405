"""The AMQP 1.0 lifecycle of whole connections from arrays: one compiled pass per batch, Python per rare frame only.

Issue 32 step 3 for 1.0, as ``array091.py`` is for 0-9-1. ``Connection10`` (amqp10.py) is the reference and takes
every connection this module does not: ``kernels10.lifecycle_pass`` follows it frame by frame in the runner's order
and gives up on a connection the moment it meets something it does not model, whose rows are then the machine's.

What it models:

- sessions begun by a begin (the peer's begin naming it in remote-channel), a channel never mapped to a second
  session while the first is mapped; the windows of §2.5.6 at begin, flow and transfer frames;
- links attached by an attach (a handle not taken again without a detach), their credit at the receiver's and the
  sender's flows and at each transfer; detach, end, close and the capture's end ending what is unsettled;
- transfers of one frame each (not more, not aborted) with a delivery-id not live already, sent the way the link
  sends; dispositions of either role, any range, any state the transfer machine steps without a flag
  (``machines.TRANSFER`` as arrays, so a changed rule there changes both paths);
- nothing but a close after the first close.

Anything else (a session or link adopted without its begin or attach, messages over several transfers, aborts,
a delivery-id reused, a flagged step such as a state set but never settled when the link ends) leaves the
connection to the machine. The request/response pairs of the rare frames (open, begin, attach, detach, end,
close) come from ``Connection10`` fed those frames only (Python per rare frame): the hot frames never change
which session or link a rare frame names in the modelled connections. ``tests/lifecycle/test_array10.py``
compares every row with the machine's on every 1.0 fixture, generated loads and mutated frame tables.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.lifecycle import machines
from amqplens.lifecycle.array091 import Result, _codes, _col, _frame_id_at, _labels, _null_where, as_text, connection_keys
from amqplens.lifecycle.props import columns as props_columns
from amqplens.lifecycle.fold import column_in, column_valid, column_values, kernels
from amqplens.lifecycle.records import DELIVERY_KEYS, FLOW_EVENT_KEYS, FROM_BROKER, TO_BROKER, Output, frame_arg
from amqplens.lifecycle.runner import REFERS_BACK

NONE = -(1 << 63)  # a null value in the pass's columns
# performatives
P_NONE, P_OPEN, P_BEGIN, P_ATTACH, P_FLOW, P_TRANSFER, P_DISPOSITION, P_DETACH, P_END, P_CLOSE = range(10)
PERFORMATIVES = ("open", "begin", "attach", "flow", "transfer", "disposition", "detach", "end", "close")
_RARE = (P_OPEN, P_BEGIN, P_ATTACH, P_DETACH, P_END, P_CLOSE)
# the pass's input columns (``cols``: a tuple of int64 arrays, one value a row)
(F_PERF, F_DIR, F_CH, F_H, F_REMOTE, F_ROLE, F_NAME, F_SND, F_RCV, F_SRC, F_TGT, F_DC, F_CREDIT, F_DRAIN, F_IW, F_OW,
 F_NII, F_NOI, F_DID, F_SETTLED, F_FIRST, F_LAST, F_STATE, F_SEQ, F_TS, F_MORE) = range(26)
# the flow events it gives: one row of these a flow_events row
(E_ROW, E_ENTITY, E_EVENT, E_CHANNEL, E_HANDLE, E_SIDE, E_CREDIT, E_DC, E_DRAIN, E_IW, E_OW, E_RIW, E_REASON) = range(13)
FLOW_EVENTS = ("window", "transfer", "settle", "credit", "flow", "close")
EV_WINDOW, EV_TRANSFER, EV_SETTLE, EV_CREDIT, EV_FLOW, EV_CLOSE = range(6)
REASONS = (None, "credit_exceeded", "disposition_of_unknown_id")
R_CREDIT_EXCEEDED, R_UNKNOWN_ID = 1, 2

_TR = machines.TRANSFER
_STATES = machines.STATES_1_0  # a disposition's state codes; the next one: none
_UINT32 = 1 << 32

def kernels10():
    """``amqplens.lifecycle.kernels10`` (numba, the decoder's disk cache), or None without numba."""
    from amqplens.decode.v0_9_1.hotpath import compiled_module

    return compiled_module("amqplens.lifecycle.kernels10")


def _transfer_tables() -> tuple:
    states = list(_TR.states)
    names = states + sorted(_TR.outcomes)
    shape = (len(_TR.states), len(_TR.events))
    nxt, effect, flagged = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.bool_)
    for i, s in enumerate(_TR.states):
        for j, e in enumerate(_TR.events):
            t = _TR.step(s, e)
            nxt[i, j], effect[i, j], flagged[i, j] = names.index(t.next_state), machines.EFFECTS.index(t.effect), t.flag is not None
    return names, nxt, effect, flagged


_T = _transfer_tables()
_EP = machines.ENDPOINT
_EP_NEXT = np.array([[_EP.states.index(_EP.step(s, e).next_state) for e in _EP.events] for s in _EP.states], np.int64)
_EFF_SETTLE = np.zeros(len(machines.EFFECTS), np.bool_)
_EFF_SETTLE[[machines.EFFECTS.index(e) for e in ("settle", "settle_held", "close", "mark")]] = True


def _nullable(table: pa.Table, name: str) -> np.ndarray:
    return column_values(table, name, NONE)


def _bool_code(table: pa.Table, name: str) -> np.ndarray:
    """-1 null, 0 false, 1 true."""
    return np.where(column_valid(table, name), column_values(table, name, False, bool), -1).astype(np.int64)


def _code_of(table: pa.Table, name: str, values: tuple) -> np.ndarray:
    """The index of each row's value in ``values`` (-1: null, len(values): another value)."""
    out = np.full(table.num_rows, -1, np.int64)
    if name not in table.column_names or pa.types.is_null(table.column(name).type):
        return out
    out[column_valid(table, name)] = len(values)
    for k, v in enumerate(values):
        out[column_in(table, name, [v])] = k
    return out


def _text_codes(table: pa.Table, name: str) -> tuple[np.ndarray, list]:
    if name not in table.column_names or pa.types.is_null(table.column(name).type):
        return np.full(table.num_rows, -1, np.int64), []
    return _codes(table.column(name))


def lifecycle(table: pa.Table, window: int, debug: bool = False) -> Result:
    """``table``: whole connections' frames (the fused lifecycle's columns), sorted by (connection_id, ts,
    stream_offset, direction); ``window``: the runner's reorder window. The 1.0 connections the pass models."""
    n = table.num_rows
    result = Result(n)
    kern = kernels10()
    names = table.column_names
    if n == 0 or kern is None or any(c not in names for c in ("connection_id", "direction", "stream_offset", "ts",
                                                                 "dialect", "performative")):
        return result
    if not column_in(table, "dialect", ["1.0"]).any():
        return result
    table = as_text(table, ("performative", "direction", "dialect", "connection_id", "method_name"))
    ts, conn, dialect, dialects, direction, offset, bounds, of_conn, bad_row = connection_keys(table)
    is10 = np.array([d == "1.0" for d in dialects] + [False])[dialect]
    ours = np.ones(len(bounds) - 1, bool)
    np.logical_and.at(ours, of_conn, is10 & (conn >= 0))  # a connection of 1.0 rows only

    perf = _code_of(table, "performative", PERFORMATIVES) + 1
    perf[perf > len(PERFORMATIVES)] = P_NONE  # a performative the machine has no handler for: no step
    channel = column_values(table, "channel", -1)
    handle = column_values(table, "handle", -1)
    used = perf != P_NONE
    bad_row |= used & ((channel < 0) | (channel > 0xFFFF))
    needs_handle = np.isin(perf, [P_ATTACH, P_TRANSFER, P_DETACH]) | ((perf == P_FLOW) & column_valid(table, "handle"))
    bad_row |= needs_handle & ((handle < 0) | (handle >= _UINT32))
    did = _nullable(table, "delivery_id")
    transfer = perf == P_TRANSFER
    bad_row |= transfer & (did != NONE) & ((did < 0) | (did >= _UINT32))
    bad_row |= transfer & column_values(table, "aborted", False, bool)
    role = _code_of(table, "role", ("receiver", "sender"))
    bad_row |= role == 2
    state = _code_of(table, "state", _STATES)
    state[state == -1] = len(_STATES)  # none
    bad_row |= (perf == P_DISPOSITION) & (state > len(_STATES))
    name_code, link_names = _text_codes(table, "link_name")
    snd_code, snd_values = _text_codes(table, "snd_settle_mode")
    rcv_code, rcv_values = _text_codes(table, "rcv_settle_mode")
    src_code, src_values = _text_codes(table, "source_address")
    tgt_code, tgt_values = _text_codes(table, "target_address")
    attach = perf == P_ATTACH
    for codes, values in ((snd_code, snd_values), (rcv_code, rcv_values), (src_code, src_values), (tgt_code, tgt_values)):
        empty = [k for k, v in enumerate(values) if not v]  # "" is falsy to the machine's `or`: left to it
        if empty:
            bad_row |= attach & np.isin(codes, empty)
    remote = np.full(n, -1, np.int64)
    begins = np.flatnonzero(perf == P_BEGIN)
    if len(begins):
        args = _col(table, "arguments_json", begins, pa.string()).to_pylist()
        for i, a in zip(begins, args):
            r = frame_arg({"arguments_json": a}, "remote_channel")
            if r is None:
                continue
            if type(r) is int and 0 <= r <= 0xFFFF:
                remote[i] = r
            else:
                bad_row[i] = True
    # the runner's rank: a frame that refers back goes after the others of its time
    if "method_name" in names:
        m = table.column("method_name")
        ranked = pc.fill_null(pc.or_(pc.is_in(m, pa.array(sorted(REFERS_BACK))), pc.ends_with(m, "-ok")), False)
        rank = np.where(column_valid(table, "method_name"), ranked.to_numpy(zero_copy_only=False),
                        perf == P_DISPOSITION).astype(np.int64)
    else:
        rank = (perf == P_DISPOSITION).astype(np.int64)

    conn_bad = ~ours
    np.logical_or.at(conn_bad, of_conn, bad_row)
    if debug:
        for c in np.flatnonzero(conn_bad & ours):
            at = int(np.flatnonzero(bad_row & (of_conn == c))[0])
            result.why[int(c)] = ("row", at, table.column("performative")[at].as_py())
    if conn_bad.all():
        return result
    passes = kernels()
    if passes is None:
        return result
    order = passes.runner_orders(bounds, direction, ts, rank, window)
    cols: list[np.ndarray] = [np.zeros(0, np.int64)] * 26
    cols[F_PERF], cols[F_DIR], cols[F_CH], cols[F_H], cols[F_REMOTE], cols[F_ROLE] = perf, direction, channel, handle, remote, role
    cols[F_NAME], cols[F_SND], cols[F_RCV], cols[F_SRC], cols[F_TGT] = name_code, snd_code, rcv_code, src_code, tgt_code
    cols[F_DC], cols[F_CREDIT], cols[F_DRAIN] = _nullable(table, "delivery_count"), _nullable(table, "link_credit"), _bool_code(table, "drain")
    cols[F_IW], cols[F_OW] = _nullable(table, "incoming_window"), _nullable(table, "outgoing_window")
    cols[F_NII], cols[F_NOI] = _nullable(table, "next_incoming_id"), _nullable(table, "next_outgoing_id")
    cols[F_DID], cols[F_SETTLED] = did, column_values(table, "settled", False, bool).astype(np.int64)
    cols[F_FIRST], cols[F_LAST], cols[F_STATE] = _nullable(table, "first"), _nullable(table, "last"), state
    cols[F_SEQ], cols[F_TS] = _nullable(table, "message_seq"), ts.astype(np.int64)
    cols[F_MORE] = column_values(table, "more", False, bool).astype(np.int64)
    r_state = np.full(n, -1, np.int64)
    r_by = np.full(n, -1, np.int64)
    r_by_ts = np.zeros(n, np.int64)
    r_link = np.full(n, -1, np.int64)
    r_offkey = np.zeros(n, np.bool_)
    r_aux = np.full((n, 6), -1, np.int64)
    r_of = np.full(n, -1, np.int64)  # a transfer row's delivery: the row of its first transfer
    r_last = np.full(n, -1, np.int64)  # a delivery's last transfer
    events = np.zeros((3 * n + 16, 13), np.int64)
    tr_ev = np.array([_TR.events.index(e) for e in ("transfer", "transfer_settled", "detach", "end", "close", "capture_end")], np.int64)
    ev_state = np.array([_TR.events.index(f"state_{s}") for s in (*_STATES, "none")], np.int64)
    ev_settle = np.array([_TR.events.index(f"settle_{s}") for s in (*_STATES, "none")], np.int64)
    ep_ev = np.array([_EP.events.index(e) for e in ("open", "open_reply", "close", "close_reply")], np.int64)
    bad = conn_bad.copy()
    why = np.full(len(bad), -1, np.int64)
    ne = kern.lifecycle_pass(
        bounds, order, tuple(cols), _EP_NEXT, ep_ev, _EP.states.index("closed"), _EP.states.index("closing"),
        _EP.states.index("unseen"), _T[1], _T[2], _T[3], len(_TR.states), tr_ev, ev_state, ev_settle, _EFF_SETTLE,
        machines.EFFECTS.index("fire"), machines.EFFECTS.index("revert"),
        bad, r_state, r_by, r_by_ts, r_link, r_offkey, r_aux, r_of, r_last, events, why)
    if debug:
        for c in np.flatnonzero(bad & ~conn_bad):
            at = int(why[c])
            result.why[int(c)] = ("pass", at, table.column("performative")[at].as_py() if at >= 0 else None)
    records = transfer & (r_of == np.arange(n))
    np.logical_or.at(bad, of_conn, records & (r_state < len(_TR.states)))  # left live: the machine says what it is
    good = ~bad[of_conn]
    if not good.any():
        return result
    result.taken = good
    fids = _frame_id_at(table)
    rows = np.flatnonzero(records & good)
    labels = (link_names, snd_values, rcv_values, src_values, tgt_values)
    # each delivery's later transfers (more=true before them), in the runner's order
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    later = np.flatnonzero((r_of >= 0) & (r_of != np.arange(n)) & good)
    later = later[np.lexsort((position[later], r_of[later]))]
    result.deliveries = lambda size: (
        _deliveries(table, rows[at:at + size], direction, channel, handle, did, r_state, r_by, r_by_ts, r_offkey,
                    r_aux[rows[at:at + size]], r_last, later, r_of, offset, ts, fids, labels)
        for at in range(0, len(rows), size))
    events = events[:ne]
    kept = events[good[events[:, E_ROW]]] if ne else events
    result.flow_events = lambda size: (_flow_events(table, kept[at:at + size], fids, ts) for at in range(0, len(kept), size))
    result.request_responses = _requests(table, order, bounds, np.flatnonzero(~bad), perf, fids, ts)
    return result


def _label(values: list, codes: np.ndarray) -> pa.Array:
    """``values[code]``, null where the code is -1."""
    return _labels(list(values) + [None], np.where(codes >= 0, codes, len(values)))


def _deliveries(table, rows, direction, channel, handle, did, r_state, r_by, r_by_ts, r_offkey, aux, r_last, later, r_of,
                offset, ts, fids, labels) -> pa.Table:
    n = len(rows)
    link_names, snd_values, rcv_values, src_values, tgt_values = labels
    cid = _col(table, "connection_id", rows, pa.string())
    side = _labels((TO_BROKER, FROM_BROKER), direction[rows])
    offkey = r_offkey[rows]
    number = _col(table, "message_seq", rows, pa.int64()).cast(pa.string())
    if offkey.any():
        number = pc.if_else(pa.array(offkey), pa.array(["f%d" % o for o in offset[rows]]), number)
    key = pc.binary_join_element_wise(cid, side, pa.array(channel[rows]).cast(pa.string()),
                                      pa.array(handle[rows]).cast(pa.string()), number, "-")
    settled = r_by[rows] >= 0
    sent_np = ts[rows]
    settling = r_by[rows]
    settled_by = _null_where(fids(np.where(settled, settling, settling[settled].min() if settled.any() else 0)), ~settled)
    queue = pc.coalesce(_label(src_values, aux[:, 0]), _label(tgt_values, aux[:, 1]))
    # f"{snd}/{rcv}" if either: per distinct pair
    pairs = (aux[:, 2] + 1) * (len(rcv_values) + 1) + aux[:, 3] + 1
    mode_of = [None if s < 0 and r < 0 else f"{snd_values[s] if s >= 0 else None}/{rcv_values[r] if r >= 0 else None}"
               for s in range(-1, len(snd_values)) for r in range(-1, len(rcv_values))]
    ends = r_last[rows]  # the message's sections, size and hash: its last transfer's
    props = _col(table, "properties_json", ends, pa.string())
    message_id, correlation_id, content_type, delivery_mode, priority, redelivered = props_columns(props, "1.0")
    columns = {
        "delivery_id": key, "connection_id": cid, "dialect": _col(table, "dialect", rows, pa.string()),
        "direction": side, "channel": pa.array(aux[:, 5], pa.int32()),
        "consumer_tag": pa.nulls(n, pa.string()), "link_handle": pa.array(handle[rows], pa.int64()),
        "link_name": _label(link_names, aux[:, 4]),
        "delivery_tag": pa.nulls(n, pa.int64()), "transfer_id": pa.array(did[rows], pa.int64()),
        "delivery_tag_bin": _col(table, "delivery_tag_bin", rows, pa.binary()),
        "method": _labels(("transfer",), np.zeros(n, np.int64)),
        "exchange": pa.nulls(n, pa.string()), "routing_key": pa.nulls(n, pa.string()), "queue": queue,
        "message_id": message_id, "correlation_id": correlation_id, "content_type": content_type,
        "delivery_mode": delivery_mode, "priority": priority, "properties_json": props,
        "body_size": _col(table, "body_size", ends, pa.int64()), "body_sha256": _col(table, "body_sha256", ends, pa.string()),
        "redelivered": redelivered, "settle_mode": pa.array(mode_of, pa.string()).take(pa.array(pairs)),
        "sent_ts_us": pa.array(sent_np, pa.int64()),
        "settled_ts_us": pa.array(np.where(settled, r_by_ts[rows], 0), pa.int64(), mask=~settled),
        "settle_latency_us": pa.array(np.where(settled, r_by_ts[rows] - sent_np, 0), pa.int64(), mask=~settled),
        "outcome": _labels(_T[0], r_state[rows]), "settled_by_frame_id": settled_by,
        "frame_ids": _frame_lists(rows, later, r_of, fids),
        "flags": pa.nulls(n, pa.list_(pa.string())),
    }
    assert tuple(columns) == DELIVERY_KEYS
    return pa.table({"capture_id": _col(table, "capture_id", rows, pa.string()), **columns})


def _frame_lists(rows: np.ndarray, later: np.ndarray, r_of: np.ndarray, fids: Callable) -> pa.Array:
    """Each delivery's frame ids: its first transfer's, then its later transfers' (``later``: sorted by delivery)."""
    lo, hi = np.searchsorted(r_of[later], rows, "left"), np.searchsorted(r_of[later], rows, "right")
    counts = 1 + hi - lo
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    picks = np.empty(int(offsets[-1]), np.int64)
    first = np.zeros(len(picks), bool)
    first[offsets[:-1]] = True
    picks[first] = rows
    # the rows' later transfers are one run of ``later`` (both in delivery order), each delivery's after its first
    picks[~first] = later[lo[0]:hi[-1]] if len(rows) else later[:0]
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), fids(picks).cast(pa.string()))


def _flow_events(table, ev: np.ndarray, fids: Callable, ts: np.ndarray) -> pa.Table:
    rows = ev[:, E_ROW]
    n = len(ev)
    link = ev[:, E_ENTITY] == 1
    fid = fids(rows).cast(pa.string())
    channel = pa.array(ev[:, E_CHANNEL].astype(np.int32))
    handle = pa.array(ev[:, E_HANDLE], pa.int64(), mask=~link)
    entity = _labels(("session", "link"), ev[:, E_ENTITY])
    side = _labels(("c", "s"), ev[:, E_SIDE])
    key = pc.if_else(pa.array(link), pc.binary_join_element_wise(channel.cast(pa.string()), pc.binary_join_element_wise(
        side, pc.fill_null(handle, 0).cast(pa.string()), ""), "-"), channel.cast(pa.string()))

    def nullable(j: int, mask: np.ndarray) -> pa.Array:
        values = ev[:, j]
        return pa.array(np.where(values == NONE, 0, values), pa.int64(), mask=(values == NONE) | mask)

    riw = ev[:, E_RIW]
    at_limit = np.where(link, ev[:, E_CREDIT] <= 0, riw <= 0)
    drain = ev[:, E_DRAIN]
    columns = {
        "event_id": pc.binary_join_element_wise(fid, entity, key, "-"),
        "connection_id": _col(table, "connection_id", rows, pa.string()), "ts_us": pa.array(ts[rows], pa.int64()),
        "frame_id": fid, "entity": entity, "channel": channel, "consumer_tag": pa.nulls(n, pa.string()),
        "link_handle": handle, "event": _labels(FLOW_EVENTS, ev[:, E_EVENT]),
        "prefetch_count": pa.nulls(n, pa.int64()), "in_flight": pa.nulls(n, pa.int64()),
        "at_limit": pa.array(at_limit, pa.bool_(), mask=~link & (riw == NONE)),
        "flow_active": pa.nulls(n, pa.bool_()), "blocked": pa.nulls(n, pa.bool_()),
        "reason": _label(list(REASONS[1:]), ev[:, E_REASON] - 1),
        "link_credit": pa.array(ev[:, E_CREDIT], pa.int64(), mask=~link), "delivery_count": nullable(E_DC, ~link),
        "drain": pa.array(drain == 1, pa.bool_(), mask=(drain < 0) | ~link),
        "incoming_window": nullable(E_IW, link), "outgoing_window": nullable(E_OW, link),
        "remote_incoming_window": nullable(E_RIW, link),
    }
    assert tuple(columns) == FLOW_EVENT_KEYS
    return pa.table({"capture_id": _col(table, "capture_id", rows, pa.string()), **columns})


_REQUEST_FIELDS = ("connection_id", "capture_id", "dialect", "direction", "channel", "performative", "arguments_json",
                   "error_condition", "role", "link_name", "handle", "snd_settle_mode", "rcv_settle_mode",
                   "delivery_count", "source_address", "target_address", "next_outgoing_id", "incoming_window",
                   "outgoing_window", "next_incoming_id")


def _requests(table, order, bounds, conns, perf, fids, ts) -> list[tuple]:
    """The request/response pairs: ``Connection10`` fed each connection's rare frames in the runner's order."""
    from amqplens.lifecycle.amqp10 import Connection10

    picked = [order[bounds[c]:bounds[c + 1]] for c in conns]
    rows = np.concatenate(picked) if picked else np.zeros(0, np.int64)
    keep = np.isin(perf[rows], _RARE)
    ends = np.cumsum([int(keep[e - len(p):e].sum()) for p, e in zip(picked, np.cumsum([len(p) for p in picked]))])
    rows = rows[keep]
    fields = [f for f in _REQUEST_FIELDS if f in table.column_names]
    values = [_col(table, f, rows, table.schema.field(f).type).to_pylist() for f in fields]
    fid_list = fids(rows).to_pylist()
    firsts = np.asarray(bounds, np.int64)[np.asarray(conns, np.int64)]
    cids = _col(table, "connection_id", firsts, pa.string()).to_pylist()
    captures = _col(table, "capture_id", firsts, pa.string()).to_pylist()
    out: list[tuple] = []
    start = 0
    records = [dict(zip(fields, row)) for row in zip(*values)] if fields else []
    for k, end in enumerate(ends):
        sink = Output()
        machine = Connection10(cids[k], sink)
        for j in range(start, end):
            machine.on_frame(records[j], fid_list[j], int(ts[rows[j]]))
        machine.finish()
        out += [(captures[k], r) for r in sink.request_responses]
        start = end
    return out


def warm() -> float:
    """Seconds to load (or compile, once: numba's disk cache) the 1.0 pass, on a small connection that takes its
    branches: sessions, links both ways, credit, windows, a message over two transfers, dispositions of a range and
    of unknown ids, a detach with a delivery unsettled, end and close."""
    import time

    t0 = time.perf_counter()
    if kernels10() is None:
        return -1.0
    rows: list[dict] = []
    offsets = {"to_server": 0, "to_client": 0}

    def frame(direction, performative, channel=0, **values):
        offsets[direction] += 1
        rows.append({"connection_id": "warm", "capture_id": "warm", "direction": direction, "dialect": "1.0",
                     "stream_offset": offsets[direction], "ts": len(rows), "frame_type": "amqp", "channel": channel,
                     "performative": performative, **values})

    frame("to_server", "open")
    frame("to_client", "open")
    frame("to_server", "begin", next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    frame("to_client", "begin", 1, arguments_json='{"remote_channel": 0}', next_outgoing_id=0, incoming_window=10,
          outgoing_window=100)
    frame("to_server", "attach", handle=0, role="sender", link_name="L", snd_settle_mode="unsettled",
          rcv_settle_mode="first", target_address="q", delivery_count=0)
    frame("to_client", "attach", 1, handle=5, role="receiver", link_name="L", target_address="q")
    frame("to_client", "flow", 1, handle=5, link_credit=10, delivery_count=0, next_incoming_id=0, incoming_window=10,
          next_outgoing_id=0, outgoing_window=100, drain=False)
    for k in range(6):
        frame("to_server", "transfer", handle=0, delivery_id=k, message_seq=k, more=k == 2, body_size=1,
              properties_json='{"properties": {"message_id": "m"}}')
        if k == 2:
            frame("to_server", "transfer", handle=0, message_seq=k, body_size=1)
    frame("to_client", "disposition", 1, role="receiver", first=0, last=3, settled=True, state="accepted")
    frame("to_client", "disposition", 1, role="receiver", first=900, last=9000, settled=True, state="released")
    frame("to_server", "detach", handle=0)
    frame("to_client", "detach", 1, handle=5)
    frame("to_server", "end")
    frame("to_client", "end", 1)
    frame("to_server", "close")
    frame("to_client", "close")
    keys = dict.fromkeys(k for r in rows for k in r)
    table = pa.Table.from_pylist([dict.fromkeys(keys) | r for r in rows])
    done = lifecycle(table.sort_by([("connection_id", "ascending"), ("ts", "ascending")]), 64)
    assert done.taken.all(), "the warm-up connection is one the pass models"
    for part in (*done.deliveries(8192), *done.flow_events(8192)):
        assert part.num_rows
    return time.perf_counter() - t0
