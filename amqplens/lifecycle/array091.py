"""The 0-9-1 lifecycle of whole connections from arrays: one compiled pass per batch, Python per rare frame only.

Issue 32 step 3. ``Connection091`` (amqp091.py) is the reference: it takes a frame at a time and is what every
connection this module does not take goes to. This module takes, from a batch of whole connections whose content
frames ``fold.py`` folded onto their messages' method rows, the connections whose every frame it models, and gives
the rows the machine would: deliveries, flow_events and request_responses.

What it models (anything else leaves the whole connection to the machine: ``kernels.lifecycle_pass`` gives up on a
connection the moment it meets something else, and its rows are then the machine's):

- channels opened once and closed at most once, every step of the endpoint machine unflagged; nothing on a
  channel after its close or after connection.close-ok;
- basic.publish with confirm.select or without, mandatory / immediate ones included while no basic.return
  comes (they are ``sent`` when their channel ends) and no more than ``max_pending_returns`` wait on a channel;
  the broker's basic.ack / nack settling confirm-mode publishes by number, ``multiple`` included;
- basic.deliver to a consumer started by basic.consume (+ consume-ok, or no-wait), delivery tags rising on the
  channel while outstanding; with no-ack settled on send (``auto_ack``), else by the client's basic.ack / nack /
  reject, ``multiple`` included, each naming something outstanding;
- basic.cancel-ok: the consumer leaves its channel, its deliveries stay outstanding (a consumer started again
  with the same tag is not modelled);
- basic.get answered by get-ok (the oldest pending get's queue and no-ack) or get-empty;
- basic.qos (the channel's and the consumers' prefetch) and the flow rows of qos, deliver, settle and close;
- every message folded (no header or body frame left), message numbers rising per channel and direction;
- channel close-ok, connection.close, close-ok and the capture's end: outstanding deliveries and publishes
  ended as the machine ends them;
- every other method (connection.*, channel open/close, declares, bindings, ...) only as far as the endpoint
  machine and the request matcher see it: a connection whose rare methods alternate request, answer has its
  request_responses made as columns (``_plain_pairs``); ``RequestMatcher`` (requests.py) runs on the others'
  rare frames in Python.

The delivery and publish outcomes come from the machines' own tables (``machines.PUBLISH``, ``DELIVER``,
``ENDPOINT`` as arrays), so a changed rule there changes both paths. The frames are handled in the order
``runner.LifecycleRunner`` handles them (``kernels.runner_orders``). ``tests/lifecycle/test_fold.py`` compares
every row with the machine's on every fixture and on mutated frame tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.decode.common.arrow import repeated
from amqplens.decode.detect import FAMILY_0_9_1
from amqplens.lifecycle import machines
from amqplens.lifecycle.amqp091 import ENDPOINT_EVENT
from amqplens.lifecycle.props import columns as props_columns
from amqplens.lifecycle.fold import Kept, column_in, column_valid, column_values, frame_ids_at, kernels, stream_order, take_span
from amqplens.lifecycle.records import (DELIVERY_KEYS, FLOW_EVENT_KEYS, FROM_BROKER, REQUEST_RESPONSE_KEYS, TO_BROKER,
                                       Output, frame_arg)
from amqplens.lifecycle.requests import RequestMatcher, sync_tables
from amqplens.lifecycle.runner import REFERS_BACK

# actions of a row
(A_NONE, A_BAD, A_PUBLISH, A_DELIVER, A_SETTLE, A_CONFIRM, A_QOS, A_CONSUME, A_CONSUME_NOWAIT, A_CONSUME_OK,
 A_CONFIRM_SELECT, A_CONN_CLOSE, A_CONN_CLOSE_OK, A_CANCEL_OK, A_GET, A_GET_EMPTY, A_GET_OK) = range(17)
_ACTIONS = {("basic", "publish"): A_PUBLISH, ("basic", "deliver"): A_DELIVER, ("basic", "qos"): A_QOS,
            ("basic", "consume"): A_CONSUME, ("basic", "consume-ok"): A_CONSUME_OK,
            ("confirm", "select"): A_CONFIRM_SELECT, ("connection", "close"): A_CONN_CLOSE,
            ("connection", "close-ok"): A_CONN_CLOSE_OK, ("basic", "cancel-ok"): A_CANCEL_OK, ("basic", "get"): A_GET,
            ("basic", "get-empty"): A_GET_EMPTY, ("basic", "get-ok"): A_GET_OK}
_LEFT_TO_MACHINES = [("basic", m) for m in ("return", "recover", "recover-async")] + [
    ("tx", "select"), ("tx", "commit-ok"), ("tx", "rollback-ok"), ("channel", "flow-ok"), ("connection", "blocked"),
    ("connection", "unblocked")]
_HOT = (("basic", "publish"), ("basic", "deliver"), ("basic", "ack"), ("basic", "nack"), ("basic", "reject"))
FLOW_EVENTS = ("qos", "deliver", "settle", "close")

_EP_EVENTS = machines.ENDPOINT.events
_P_EVENTS = machines.PUBLISH.events
_D_EVENTS = machines.DELIVER.events
_EFFECTS = machines.EFFECTS
_SETTLE_EVENTS = {("ack", False): "ack", ("ack", True): "ack", ("nack", True): "nack_requeue",
                  ("nack", False): "nack_drop", ("reject", True): "reject_requeue", ("reject", False): "reject_drop"}


def _tables(machine) -> tuple:
    """(state names incl. outcomes, next state, effect, flagged): a machine's table as arrays."""
    names = list(machine.states) + sorted(machine.outcomes)
    shape = (len(machine.states), len(machine.events))
    nxt, effect, flagged = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.bool_)
    for i, s in enumerate(machine.states):
        for j, e in enumerate(machine.events):
            t = machine.step(s, e)
            nxt[i, j], effect[i, j], flagged[i, j] = names.index(t.next_state), _EFFECTS.index(t.effect), t.flag is not None
    return names, nxt, effect, flagged


_P = _tables(machines.PUBLISH)
_D = _tables(machines.DELIVER)
_E = _tables(machines.ENDPOINT)
EFF = {name: i for i, name in enumerate(_EFFECTS)}
_EFF_SETTLE = np.zeros(len(_EFFECTS), np.bool_)
_EFF_SETTLE[[EFF["settle"], EFF["settle_held"], EFF["close"], EFF["mark"]]] = True
# the pass's arguments from the machines' tables: the tables, the events it uses, the effects
_TABLE_ARGS = (
    _P[1], _P[2], _P[3], len(machines.PUBLISH.states), _D[1], _D[2], _D[3], len(machines.DELIVER.states), _E[1], _E[2], _E[3],
    np.array([_P_EVENTS.index(e) for e in ("publish_confirm", "publish_plain", "broker_ack", "broker_nack",
                                          "channel_close", "connection_close", "capture_end", "publish_mandatory")], np.int64),
    np.array([_D_EVENTS.index(e) for e in ("deliver_manual", "channel_close", "connection_close", "capture_end",
                                          "deliver_auto_ack")], np.int64),
    np.array([_EP_EVENTS.index("open"), _EP_EVENTS.index("close_reply"), machines.ENDPOINT.states.index("closed"),
              machines.ENDPOINT.states.index("unseen")], np.int64),
    _EFF_SETTLE, EFF["fire"], EFF["revert"], EFF["open"], EFF["close"])
# the pass's per-channel arrays (kernels.lifecycle_pass unpacks them in this order) and per-consumer ones, with the
# value each starts at: the endpoint machine's state, confirm mode, the next confirm number, the channel's and its
# consumers' prefetch, deliveries in flight, closed for good, the heads and tails of the outstanding deliveries,
# unconfirmed publishes, pending consumes, mandatory publishes (and their count), pending gets; a consumer's
# registered, cancelled, no-ack, consume row, prefetch and deliveries in flight
_CHAN_START = (machines.ENDPOINT.states.index("unseen"), 0, 1, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1)
_CONS_START = (0, 0, 0, -1, 0, 0)


class PassState:
    """``kernels.lifecycle_pass``'s state of channels, consumers and the connection, kept between calls (a
    connection's rows a chunk at a time) and grown as channels and consumers appear."""

    def __init__(self) -> None:
        self.chan = tuple(np.zeros(0, np.int64) for _ in _CHAN_START)
        self.cons = tuple(np.zeros(0, np.int64) for _ in _CONS_START)
        self.last_seq = np.zeros(0, np.int64)
        self.chans = np.zeros(0, np.int64)
        self.cs = np.array([0, -1, 0], np.int64)  # channels seen, the connection.close row, connection closed

    def grow(self, n_chan: int, n_cons: int, n_dirchan: int) -> None:
        def grown(a: np.ndarray, n: int, start: int) -> np.ndarray:
            if len(a) >= n:
                return a
            out = np.full(n, start, np.int64)
            out[:len(a)] = a
            return out

        self.chan = tuple(grown(a, n_chan, v) for a, v in zip(self.chan, _CHAN_START))
        self.cons = tuple(grown(a, n_cons, v) for a, v in zip(self.cons, _CONS_START))
        self.last_seq = grown(self.last_seq, n_dirchan, -1)
        self.chans = grown(self.chans, n_chan, 0)

    def arrays(self) -> tuple:
        return self.chan, self.cons, self.last_seq, self.chans


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary codes (-1: null) and the dictionary's values."""
    enc = pc.dictionary_encode(column)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return pc.fill_null(enc.indices, -1).to_numpy().astype(np.int64), enc.dictionary.to_pylist()


def _dense(*keys: np.ndarray) -> np.ndarray:
    """A dense id per distinct tuple of the keys (non-negative integers), increasing with the tuples' order: the keys
    combined in mixed radix one at a time, each step made dense again, so no product passes the rows' count squared."""
    combined = np.zeros(len(keys[0]), np.int64)
    for key in keys:
        values, rank = np.unique(key, return_inverse=True)
        combined = np.unique(combined * len(values) + rank.reshape(-1), return_inverse=True)[1].reshape(-1).astype(np.int64)
    return combined


def as_text(table: pa.Table, names) -> pa.Table:
    """The all-null columns among ``names`` as text (Arrow's null type has no string kernels)."""
    for name in names:
        if name in table.column_names and pa.types.is_null(table.column(name).type):
            table = table.set_column(table.column_names.index(name), name, table.column(name).cast(pa.string()))
    return table


def connection_keys(table: pa.Table) -> tuple:
    """What both array passes read first: (ts in microseconds, connection codes, dialect codes and values, direction
    (1: to_client), stream offsets, each connection's bounds, each row's connection, the rows outside the runner's
    contract: no direction, time or offset, or an offset not above the last of its direction)."""
    n = table.num_rows
    ts_col = table.column("ts")
    if pa.types.is_timestamp(ts_col.type) and ts_col.type.unit != "us":
        ts_col = ts_col.cast(pa.timestamp("us", tz=ts_col.type.tz))
    ts = pc.fill_null(ts_col.cast(pa.int64()) if not pa.types.is_integer(ts_col.type) else ts_col, 0).to_numpy()
    conn, _ = _codes(table.column("connection_id"))
    dialect, dialects = _codes(table.column("dialect"))
    direction = column_in(table, "direction", ["to_client"]).astype(np.int64)
    offset = column_values(table, "stream_offset", 0)
    starts = np.flatnonzero(np.r_[True, conn[1:] != conn[:-1]])
    bounds = np.append(starts, n).astype(np.int64)
    of_conn = np.repeat(np.arange(len(starts)), np.diff(bounds))
    bad_row = ~(column_in(table, "direction", ["to_server", "to_client"]) & column_valid(table, "ts")
                & column_valid(table, "stream_offset"))
    bad_row |= stream_order(conn, direction, offset)[2]
    return ts, conn, dialect, dialects, direction, offset, bounds, of_conn, bad_row


class Result:
    """What ``lifecycle`` gives: ``taken`` (the rows of the connections it did; the others go to the machines), and
    per kind the rows: ``deliveries`` and ``flow_events`` as Arrow tables of the structs' fields (with
    ``capture_id``) built a slice at a time, ``request_responses`` as ``RequestRows`` (a chunk's: ``(capture_id, row)`` dicts)."""

    def __init__(self, n: int) -> None:
        self.taken = np.zeros(n, bool)
        # slice size -> the rows as Arrow tables of the structs' fields (with capture_id), a slice at a time
        self.deliveries: Callable[[int], Iterator[pa.Table]] = lambda size: iter(())
        self.flow_events: Callable[[int], Iterator[pa.Table]] = lambda size: iter(())
        self.request_responses: "list[tuple[str | None, dict]] | RequestRows" = []
        self.why: dict[int, tuple] = {}  # debug: connection number -> why it went to the machine


def lifecycle(table: "pa.Table | Kept", window: int, debug: bool = False, max_pending_returns: int = 10_000,
              chunk: "ConnectionPass | None" = None) -> Result:
    """``table``: whole connections' frames (the fused lifecycle's columns and ``FOLD_COLUMNS``), sorted by
    (connection_id, ts, stream_offset, direction); ``window``: the runner's reorder window; ``max_pending_returns``:
    the machine's bound on mandatory publishes a return may name (``LifecycleOptions``). ``chunk``: ``table`` is one
    connection's rows that ``chunk`` carried from its last chunk, then its next chunk (``ConnectionPass.feed``)."""
    n = table.num_rows
    result = Result(n)
    kern = kernels()
    if n == 0 or kern is None or "fold_frame_ids" not in table.column_names or any(
            c not in table.column_names for c in ("connection_id", "direction", "stream_offset", "ts", "dialect",
                                                  "frame_type", "class_name", "method_name")):
        return result
    table = as_text(table, ("class_name", "method_name", "consumer_tag", "frame_type", "direction", "dialect", "connection_id"))
    ts, conn, dialect, dialects, direction, offset, bounds, of_conn, bad_row = connection_keys(table)
    starts = bounds[:-1]
    sizes = np.diff(bounds)
    family = np.array([d in FAMILY_0_9_1 for d in dialects] + [False])[dialect]
    bad_row |= ~(family & (dialect == dialect[starts][of_conn]) & (conn >= 0))

    # what each row does
    method = pc.fill_null(table.column("method_name"), "")
    name_col = pc.binary_join_element_wise(pc.fill_null(table.column("class_name"), ""), method, "\x00")
    name_code, names = _codes(name_col)
    pairs = [tuple(x.split("\x00", 1)) for x in names]
    is_method = pc.fill_null(pc.equal(table.column("frame_type"), "method"), False).to_numpy(zero_copy_only=False)
    content = pc.fill_null(pc.is_in(table.column("frame_type"), pa.array(["header", "body"])), False).to_numpy(zero_copy_only=False)
    channel = column_values(table, "channel", 0)
    left = set(_LEFT_TO_MACHINES)
    act_of = np.array([A_BAD if p in left else _ACTIONS.get(p, A_NONE) for p in pairs] + [A_NONE], np.int64)
    ep_of = np.array([_EP_EVENTS.index(ENDPOINT_EVENT.get(p, "use")) for p in pairs] + [-1], np.int64)
    action = np.where(is_method, act_of[name_code], np.where(content, A_BAD, A_NONE))
    ep_event = np.where(is_method & (channel != 0), ep_of[name_code], -1)
    # the settling methods as codes (0: none), not a numpy array of their names (24 bytes a row)
    settles = ("", "ack", "nack", "reject")
    kind = np.array([settles.index(p[1]) if p[0] == "basic" and p[1] in settles else 0 for p in pairs] + [0], np.int8)[name_code]
    requeue = column_values(table, "requeue", False, bool)
    to_server = direction == 0
    settle_kind = np.zeros(n, np.int64)
    for (k, rq), ev in _SETTLE_EVENTS.items():
        settle_kind[(kind == settles.index(k)) & (requeue == rq)] = _D_EVENTS.index(ev)
    client_settle = is_method & ((kind == settles.index("reject")) | ((kind != 0) & to_server))
    confirm_row = is_method & (kind != 0) & ~client_settle
    action[client_settle] = A_SETTLE
    action[confirm_row] = A_CONFIRM
    settle_kind[confirm_row] = (kind[confirm_row] == settles.index("nack")).astype(np.int64)
    del kind, requeue, to_server, client_settle, confirm_row, method, name_col
    folded = column_valid(table, "fold_frame_ids")
    mandatory = column_values(table, "mandatory", False, bool) | column_values(table, "immediate", False, bool)
    action[(action == A_PUBLISH) & ~folded] = A_BAD
    action[np.isin(action, [A_DELIVER, A_GET_OK]) & (~folded | ~column_valid(table, "delivery_tag"))] = A_BAD
    consumes = np.flatnonzero(action == A_CONSUME)
    if len(consumes):
        args = _at(table, "arguments_json", consumes).to_pylist() if "arguments_json" in table.column_names else [None] * len(consumes)
        nowait = np.array([frame_arg({"arguments_json": a}, "no_wait") is True or frame_arg({"arguments_json": a}, "nowait") is True
                           for a in args], bool)
        action[consumes[nowait]] = A_CONSUME_NOWAIT
    for i, d in enumerate(dialects):  # the request matcher must not see a hot method (it never does: asynchronous)
        tables = sync_tables(d) if d in FAMILY_0_9_1 else None
        if tables is not None and any(h in tables.responses or h in tables.answers for h in _HOT):
            bad_row[dialect == i] = True
    bad_row |= action == A_BAD
    conn_bad = np.zeros(len(starts), bool)
    np.logical_or.at(conn_bad, of_conn, bad_row)
    if debug:
        for c in np.flatnonzero(conn_bad):
            i = np.flatnonzero(bad_row & (of_conn == c))[0]
            result.why[int(c)] = ("row", int(i), table.column("frame_type")[i].as_py(), pairs[name_code[i]] if name_code[i] >= 0 else None,
                             int(action[i]))
    if conn_bad.all():
        return result

    # the runner's order; dense channels, channel directions and consumers
    # a method that refers back (or answers) ranks after the others of its time: decided per distinct name, not per
    # row (the rows' method names as Python strings were 1.8 CPU s of the 2 GB capture's lifecycle job)
    ranked = np.array([m in REFERS_BACK or m.endswith("-ok") for _, m in pairs] + [False], np.int64)
    rank = ranked[name_code]
    # a chunk's runner order is of its new rows only (those carried were handled in an earlier chunk)
    order_bounds = bounds if chunk is None else np.array([chunk.carried, n], np.int64)
    if chunk is not None and len(bounds) != 2:
        return result
    order = kern.runner_orders(order_bounds, direction, ts, rank, window)
    del rank, name_code, is_method, content, folded, offset, dialect, family
    tag_col = table.column("consumer_tag") if "consumer_tag" in table.column_names else pa.nulls(n, pa.string())
    # consume and consume-ok name a consumer by its tag or "" (amqp091._consume); deliver and cancel-ok by the tag
    tag_filled = pc.if_else(pa.array(np.isin(action, [A_DELIVER, A_CANCEL_OK])), tag_col, pc.fill_null(tag_col, ""))
    consumer_rows = np.isin(action, [A_DELIVER, A_CONSUME, A_CONSUME_NOWAIT, A_CONSUME_OK, A_CANCEL_OK])
    if chunk is not None:
        dchan, dirchan, cons = chunk.ids(channel, direction, consumer_rows, tag_filled)
        n_cons = len(chunk.cons_tags)
    else:
        dchan, dirchan, cons, n_cons = _dense_ids(conn, channel, direction, consumer_rows, tag_filled)
    # what the pass and the rows after it do not read: a row's worth each (1.5M rows of the 2 GB load capture's
    # longest connection: 12 MiB an array of int64), not held through the pass
    del conn, direction, bad_row, consumer_rows

    state = np.zeros(n, np.int64)
    state[action == A_PUBLISH] = _P[0].index("new")
    state[np.isin(action, [A_DELIVER, A_GET_OK])] = _D[0].index("new")
    by = np.full(n, -1, np.int64)
    by_ts = np.zeros(n, np.int64)
    dtag = np.zeros(n, np.int64)
    closed_here = np.zeros(n, bool)
    auto = np.zeros(n, bool)  # deliveries to a no-ack consumer, get-oks of a no-ack get
    rec_queue = np.full(n, -1, np.int64)  # per delivery: the consume or get whose queue it came from
    links = np.full((3, n), -1, np.int64)  # the pass's per row: next in its channel's list, in its return list, consumer
    emitted = None
    if chunk is not None and chunk.carried:
        m = chunk.carried
        for name, values in (("state", state), ("by", by), ("by_ts", by_ts), ("dtag", dtag), ("auto", auto),
                             ("rec_queue", rec_queue)):
            values[:m] = chunk.carry[name]
        links[:, :m] = chunk.carry["links"]
        emitted = np.zeros(n, bool)
        emitted[:m] = chunk.carry["emitted"]
    bad = conn_bad.copy()
    run = np.flatnonzero(~conn_bad)
    if chunk is None:
        sub_bounds = np.append(0, np.cumsum(sizes[run])).astype(np.int64)
        sub_order = np.concatenate([order[bounds[c]:bounds[c + 1]] for c in run])
        st = PassState()
        st.grow(int(dchan.max()) + 1 if (dchan >= 0).any() else 1, max(n_cons, 1), int(dirchan.max()) + 1)
    else:
        sub_bounds = np.array([0, n - chunk.carried], np.int64)
        sub_order = order[chunk.carried:n]
        st = chunk.state
        st.grow(max(len(chunk.chan_of), 1), max(n_cons, 1), max(len(chunk.dirchan_id), 1))
    sub_bad = np.zeros(len(run), np.bool_)
    events = kern.lifecycle_pass(
        sub_bounds, sub_order, action, ep_event, dchan, cons, column_values(table, "delivery_tag", 0),
        column_values(table, "multiple", False, bool), settle_kind, column_values(table, "message_seq", -1), dirchan, ts,
        column_values(table, "prefetch_count", 0), column_values(table, "global_qos", False, bool), column_values(table, "no_ack", False, bool),
        mandatory, max_pending_returns,
        *_TABLE_ARGS,
        sub_bad, state, by, by_ts, dtag, closed_here, auto, rec_queue,
        *st.arrays(), links[0], links[1], links[2], st.cs, chunk is None or chunk.final)
    bad[run] = sub_bad
    if debug:
        for c in run[sub_bad]:
            result.why[int(c)] = ("pass",)
    records = np.isin(action, [A_PUBLISH, A_DELIVER, A_GET_OK])
    ended = np.where(action == A_PUBLISH, state >= len(machines.PUBLISH.states), state >= len(machines.DELIVER.states))
    if chunk is None or chunk.final:  # a record the pass left live: the machine says what it is
        np.logical_or.at(bad, of_conn, records & ~ended)
    good = ~bad[of_conn]
    if not good.any():
        return result
    result.taken = good
    fids = _frame_id_at(table)
    done = records & good & ended  # (every record, where the connection ends here)
    if emitted is not None:
        done &= ~emitted
    delivery_rows = np.flatnonzero(done)
    result.deliveries = lambda size: (  # built a slice at a time: a long connection's rows are many
        _deliveries(table, delivery_rows[at:at + size], action, state, by, by_ts, dtag, rec_queue, fids, ts, auto)
        for at in range(0, len(delivery_rows), size))
    keep = good[events[:, 0]] if len(events) else np.zeros(0, bool)
    if chunk is None:
        chan_of = np.zeros(int(dchan.max()) + 1 if (dchan >= 0).any() else 1, np.int64)
        chan_of[dchan[dchan >= 0]] = channel[dchan >= 0]
        tag_of = np.zeros(max(n_cons, 1), np.int64)
        tag_of[cons[cons >= 0]] = np.flatnonzero(cons >= 0)
        tags = take_span(tag_filled, tag_of)  # each consumer's tag, taken once
    else:
        chan_of = np.array(chunk.chan_of + [0], np.int64)
        tags = pa.array(chunk.cons_tags + [""], pa.string())
    kept_events = events if keep.all() else events[keep]
    del events
    result.flow_events = lambda size: (
        _flow_events(table, kept_events[at:at + size], chan_of, tags, fids, ts)
        for at in range(0, len(kept_events), size))
    result.request_responses = _requests(table, order, order_bounds, np.flatnonzero(~bad), action, closed_here, fids, ts,
                                         chunk)
    if chunk is not None and not chunk.final:
        chunk.carry_from(table, state, by, by_ts, dtag, auto, rec_queue, links, done if emitted is None else done | emitted,
                         records & ended)
    return result


def _dense_ids(conn, channel, direction, consumer_rows, tag_filled) -> tuple:
    """Whole connections' dense ids: (channel of each row, -1 on channel 0; channel direction; consumer, -1 where
    the row names none; the consumers' count)."""
    n = len(conn)
    dchan = np.where(channel != 0, _dense(conn, channel), -1)
    dirchan = _dense(conn, channel, direction)
    tag_code, tag_values = _codes(tag_filled)
    tag_rank = np.empty(len(tag_values) + 1, np.int64)
    tag_rank[:len(tag_values)] = np.argsort(np.argsort(np.array(tag_values, dtype=object), kind="stable"), kind="stable")
    tag_rank[-1] = -1
    cons = np.full(n, -1, np.int64)
    known = consumer_rows & (dchan >= 0) & (tag_code >= 0)
    if known.any():
        cons[known] = _dense(dchan[known], tag_rank[tag_code[known]])
    return dchan, dirchan, cons, int(cons.max()) + 1 if n else 0


class ConnectionPass:
    """One 0-9-1 connection's array pass a chunk of its rows at a time (``lifecycle`` with ``chunk``), its state
    carried from one chunk to the next, so that what a task holds is bounded by the chunk, not by the connection.

    What a chunk leaves to the next (``carry_from``): the pass's state of channels and consumers (``PassState``),
    the ids it gave them, the request matcher, and the rows something still refers to: the deliveries and publishes
    outstanding, the mandatory publishes a return may name, the pending consumes and gets, each consumer's consume
    row, the connection.close row, and the rows those settled by. They lead the next chunk's table, renumbered, with
    their per-row state; their deliveries rows are given once they end (``emitted``: those given already).

    ``feed`` takes the connection's folded rows (``fold``), sorted as ``lifecycle`` takes them, a chunk at a time;
    each chunk's rows must all be later in time than the last chunk's (the runner's order of the whole is then the
    chunks' orders one after the other) and no folded message may span two chunks. ``None`` from ``feed``: the
    connection is not one the pass models (the whole of it goes to the machine, as ``lifecycle`` would leave it)."""

    def __init__(self, window: int, max_pending_returns: int = 10_000) -> None:
        self.window, self.max_pending_returns = window, max_pending_returns
        self.state = PassState()
        self.chan_id: dict[int, int] = {}  # channel number -> dense id
        self.chan_of: list[int] = []  # dense id -> channel number
        self.dirchan_id: dict[int, int] = {}  # channel * 2 + direction -> dense id
        self.cons_id: dict[tuple[int, str], int] = {}  # (dense channel, tag) -> consumer
        self.cons_tags: list[str] = []  # consumer -> its tag
        self.matcher: RequestMatcher | None = None
        self.sink: Output | None = None
        self.carried = 0  # rows at the head of the next chunk's table that this one carried
        self.carry: dict[str, np.ndarray] = {}
        self.carry_table: pa.Table | None = None
        self.final = False
        self.bad = False

    def feed(self, rows: pa.Table, final: bool) -> Result | None:
        """The connection's next chunk of rows (``final``: its last); its rows, or None (see the class)."""
        if self.bad:
            return None
        table = rows if self.carry_table is None else pa.concat_tables([self.carry_table, rows], promote_options="default")
        self.carry_table = None
        self.final = final
        result = lifecycle(table, self.window, max_pending_returns=self.max_pending_returns, chunk=self)
        if not table.num_rows or not result.taken.all():
            self.bad = True
            return None
        return result

    def ids(self, channel: np.ndarray, direction: np.ndarray, consumer_rows: np.ndarray, tag_filled) -> tuple:
        """``_dense_ids`` of a chunk, the same ids as every chunk before gave (Python per distinct value)."""
        n = len(channel)
        dchan = np.full(n, -1, np.int64)
        on = channel != 0
        values, inverse = np.unique(channel[on], return_inverse=True)
        for v in values.tolist():
            if v not in self.chan_id:
                self.chan_id[v] = len(self.chan_of)
                self.chan_of.append(v)
        dchan[on] = np.array([self.chan_id[v] for v in values.tolist()], np.int64)[inverse.reshape(-1)]
        keys, inverse = np.unique(channel * 2 + direction, return_inverse=True)
        dirchan = np.array([self.dirchan_id.setdefault(k, len(self.dirchan_id)) for k in keys.tolist()],
                           np.int64)[inverse.reshape(-1)] if n else np.zeros(0, np.int64)
        cons = np.full(n, -1, np.int64)
        tag_code, tag_values = _codes(tag_filled)
        known = consumer_rows & (dchan >= 0) & (tag_code >= 0)
        if known.any():
            width = len(tag_values) + 1
            pairs, inverse = np.unique(dchan[known] * width + tag_code[known], return_inverse=True)
            ids = []
            for d, t in zip((pairs // width).tolist(), (pairs % width).tolist()):
                key = (d, tag_values[t])
                if key not in self.cons_id:
                    self.cons_id[key] = len(self.cons_tags)
                    self.cons_tags.append(tag_values[t])
                ids.append(self.cons_id[key])
            cons[known] = np.array(ids, np.int64)[inverse.reshape(-1)]
        return dchan, dirchan, cons

    def carry_from(self, table: pa.Table, state, by, by_ts, dtag, auto, rec_queue, links, emitted, ended) -> None:
        """What this chunk leaves the next (see the class): the rows still referred to, taken from ``table`` and
        renumbered, with their per-row state; every row number the pass keeps renumbered with them."""
        chan, cons = self.state.chan, self.state.cons
        nxt, rnxt = links[0], links[1]
        keep: list[int] = []
        # the lists per channel: outstanding deliveries (u), unconfirmed publishes (c), pending consumes (q) and gets
        # (g) through nxt, mandatory publishes a return may name (r) through rnxt
        for head, link in ((chan[7], nxt), (chan[9], nxt), (chan[11], nxt), (chan[16], nxt), (chan[13], rnxt)):
            for r in head[head >= 0].tolist():
                while r >= 0:
                    keep.append(r)
                    r = int(link[r])
        live = np.array(keep, np.int64)
        refs = [live, cons[3][cons[3] >= 0], np.array([self.state.cs[1]], np.int64)]
        if len(live):
            refs += [by[live][(by[live] >= 0) & ~ended[live]], rec_queue[live][rec_queue[live] >= 0]]
        rows = np.unique(np.concatenate(refs))
        rows = rows[rows >= 0]
        renumber = np.full(len(state) + 1, -1, np.int64)  # -1 stays -1 (the last place)
        renumber[rows] = np.arange(len(rows))

        def moved(values: np.ndarray) -> np.ndarray:
            return renumber[np.where(values >= 0, values, -1)]

        for i in (7, 8, 9, 10, 11, 12, 13, 14, 16, 17):  # heads and tails are rows
            chan[i][:] = moved(chan[i])
        cons[3][:] = moved(cons[3])
        self.state.cs[1] = moved(self.state.cs[1:2])[0]
        self.carry = {"state": state[rows], "by": moved(by[rows]), "by_ts": by_ts[rows], "dtag": dtag[rows],
                      "auto": auto[rows], "rec_queue": moved(rec_queue[rows]), "emitted": emitted[rows],
                      "links": np.stack([moved(nxt[rows]), moved(rnxt[rows]), links[2][rows]])}
        self.carried = len(rows)
        self.carry_table = table.take(pa.array(rows))


def _at(table: "pa.Table | Kept", name: str, rows: np.ndarray) -> pa.Array:
    """Column ``name`` at ``rows`` (a ``Kept``'s straight from its source where the column was not made)."""
    return table.take(name, rows) if isinstance(table, Kept) else take_span(table.column(name), rows)


def _frame_id_at(table: "pa.Table | Kept") -> Callable[[np.ndarray], pa.Array]:
    """The frame ids of rows, as a function of the rows (taken where they are read, not a column of every row)."""
    return lambda rows: frame_ids_at(table, rows)


def _labels(values: tuple | list, codes: np.ndarray) -> pa.Array:
    """``values[codes]`` as a string array, taken in Arrow (a numpy array of Python strings converted cost about a
    microsecond a row)."""
    return pa.array(list(values), pa.string()).take(pa.array(codes, pa.int64()))


def _col(table: pa.Table, name: str, rows: np.ndarray, type_: pa.DataType) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(len(rows), type_)
    return _at(table, name, rows).cast(type_)


def _null_where(values: pa.Array, mask: np.ndarray) -> pa.Array:
    return pc.if_else(pa.array(mask), pa.scalar(None, values.type), values)


def _with_first(first: pa.Array, rest: pa.Array) -> pa.Array:
    """Lists ``[first[j], *rest[j]]``."""
    rest = rest.cast(pa.list_(pa.string()))
    n = len(first)
    offsets = rest.offsets.to_numpy().astype(np.int64)
    start, lengths = offsets[:-1], np.diff(offsets)
    lengths = np.where(rest.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    new_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths + 1, out=new_offsets[1:])
    pick = np.empty(int(new_offsets[-1]), np.int64)
    pick[new_offsets[:-1]] = np.arange(n)  # the first of each list: from `first`
    inner = np.ones(len(pick), bool)
    inner[new_offsets[:-1]] = False
    pick[inner] = n + np.repeat(start, lengths) + (np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths))
    values = pa.concat_arrays([first.cast(pa.string()), rest.values.cast(pa.string())]).take(pa.array(pick))
    return pa.ListArray.from_arrays(pa.array(new_offsets.astype(np.int32)), values)


def _deliveries(table, rows, action, state, by, by_ts, dtag, rec_queue, fids, ts, auto) -> pa.Table:
    publish = action[rows] == A_PUBLISH
    n = len(rows)
    cid = _col(table, "connection_id", rows, pa.string())
    channel = _col(table, "channel", rows, pa.int32())
    seq = _col(table, "message_seq", rows, pa.int64())
    side = _labels((FROM_BROKER, TO_BROKER), publish.astype(np.int64))
    # the outcome's name: the publish machine's names, then the delivery machine's
    outcome = _labels(_P[0] + _D[0], np.where(publish, np.minimum(state[rows], len(_P[0]) - 1),
                                              len(_P[0]) + np.minimum(state[rows], len(_D[0]) - 1)))
    settled = by[rows] >= 0
    sent_np = ts[rows]
    sent = pa.array(sent_np, pa.int64())
    settled_ts = pa.array(np.where(settled, by_ts[rows], 0), pa.int64(), mask=~settled)
    latency = pa.array(np.where(settled, by_ts[rows] - sent_np, 0), pa.int64(), mask=~settled)
    settling = by[rows]
    # an unsettled row takes a settling frame's id, nulled after: the take spans the settling frames only
    settled_by = _null_where(fids(np.where(settled, settling, settling[settled].min() if settled.any() else 0)), ~settled)
    source = np.where(publish, -1, rec_queue[rows])
    queue = _null_where(_col(table, "queue", np.maximum(source, 0), pa.string()), source < 0)
    props = _col(table, "fold_properties_json", rows, pa.string())
    message_id, correlation_id, content_type, delivery_mode, priority, _ = props_columns(props, "0-9-1")
    confirm = publish & (dtag[rows] > 0)
    columns = {
        "delivery_id": pc.binary_join_element_wise(cid, side, channel.cast(pa.string()), seq.cast(pa.string()), "-"),
        "connection_id": cid, "dialect": _col(table, "dialect", rows, pa.string()), "direction": side, "channel": channel,
        "consumer_tag": _null_where(_col(table, "consumer_tag", rows, pa.string()), action[rows] != A_DELIVER),
        "link_handle": pa.nulls(n, pa.int64()), "link_name": pa.nulls(n, pa.string()),
        "delivery_tag": _delivery_tags(table, rows, publish, confirm, dtag[rows]),
        "transfer_id": pa.nulls(n, pa.int64()), "delivery_tag_bin": pa.nulls(n, pa.binary()),
        "method": _col(table, "method_name", rows, pa.string()),
        "exchange": _col(table, "exchange", rows, pa.string()), "routing_key": _col(table, "routing_key", rows, pa.string()),
        "queue": queue, "message_id": message_id, "correlation_id": correlation_id, "content_type": content_type,
        "delivery_mode": delivery_mode, "priority": priority, "properties_json": props,
        "body_size": _col(table, "fold_body_size", rows, pa.int64()), "body_sha256": _col(table, "fold_body_sha256", rows, pa.string()),
        "redelivered": _null_where(_col(table, "redelivered", rows, pa.bool_()), publish),
        "settle_mode": _labels(("confirm", "no_confirm", "auto_ack", "manual_ack"),
                               np.where(publish, np.where(confirm, 0, 1), np.where(auto[rows], 2, 3))),
        "sent_ts_us": sent, "settled_ts_us": settled_ts, "settle_latency_us": latency,
        "outcome": outcome, "settled_by_frame_id": settled_by,
        "frame_ids": _with_first(fids(rows), _col(table, "fold_frame_ids", rows, pa.list_(pa.string()))),
        "flags": pa.nulls(n, pa.list_(pa.string())),
    }
    assert tuple(columns) == DELIVERY_KEYS
    return pa.table({"capture_id": _col(table, "capture_id", rows, pa.string()), **columns})


def _delivery_tags(table, take, publish, confirm, dtag) -> pa.Array:
    tags = _col(table, "delivery_tag", take, pa.int64())
    return pc.if_else(pa.array(publish), pa.array(dtag, pa.int64(), mask=~confirm), tags)


def _flow_events(table, ev, chan_of, tags, fids, ts) -> pa.Table:
    rows = ev[:, 0]
    n = len(ev)
    consumer = ev[:, 1] == 1
    fid = fids(rows).cast(pa.string())
    channel = pa.array(chan_of[ev[:, 7]].astype(np.int32))
    tag = _null_where(tags.take(pa.array(np.maximum(ev[:, 2], 0))).cast(pa.string()), ~consumer)
    entity = _labels(("channel", "consumer"), consumer.astype(np.int64))
    key = pc.if_else(pa.array(consumer), pc.binary_join_element_wise(channel.cast(pa.string()), pc.fill_null(tag, ""), "-"),
                     channel.cast(pa.string()))
    columns = {
        "event_id": pc.binary_join_element_wise(fid, entity, key, "-"),
        "connection_id": _col(table, "connection_id", rows, pa.string()), "ts_us": pa.array(ts[ev[:, 0]], pa.int64()),
        "frame_id": fid, "entity": entity, "channel": channel, "consumer_tag": tag, "link_handle": pa.nulls(n, pa.int64()),
        "event": _labels(FLOW_EVENTS, ev[:, 3]),
        "prefetch_count": pa.array(ev[:, 4], pa.int64()), "in_flight": pa.array(ev[:, 5], pa.int64()),
        "at_limit": pa.array(ev[:, 6] == 1), "flow_active": pa.nulls(n, pa.bool_()), "blocked": pa.nulls(n, pa.bool_()),
        "reason": pa.nulls(n, pa.string()), "link_credit": pa.nulls(n, pa.int64()), "delivery_count": pa.nulls(n, pa.int64()),
        "drain": pa.nulls(n, pa.bool_()), "incoming_window": pa.nulls(n, pa.int64()), "outgoing_window": pa.nulls(n, pa.int64()),
        "remote_incoming_window": pa.nulls(n, pa.int64()),
    }
    assert tuple(columns) == FLOW_EVENT_KEYS
    return pa.table({"capture_id": _col(table, "capture_id", rows, pa.string()), **columns})


_REQUEST_FIELDS = ("connection_id", "capture_id", "dialect", "direction", "channel", "class_name", "method_name",
                   "class_id", "method_id", "arguments_json", "reply_code")


def _requests(table, order, bounds, conns, action, closed_here, fids, ts, chunk=None) -> "list[tuple] | RequestRows":
    """The request matcher over the rare methods of each connection, in the runner's order. A connection whose rare
    methods are plain pairs (``_plain_pairs``: a handshake, declares, closes, each answered before the next request)
    has its rows made as arrays; the others go through ``RequestMatcher`` (Python per rare frame). ``chunk``: one
    connection's rows a chunk at a time, its matcher kept from one chunk to the next (the matcher alone; rows as
    dicts)."""
    is_method = pc.fill_null(pc.equal(table.column("frame_type"), "method"), False).to_numpy(zero_copy_only=False)
    rare = is_method & ~np.isin(action, [A_PUBLISH, A_DELIVER, A_SETTLE, A_CONFIRM])
    picked = [order[bounds[c]:bounds[c + 1]] for c in conns]
    rows = np.concatenate(picked) if picked else np.zeros(0, np.int64)
    keep = rare[rows]
    rows_kept = rows[keep]
    sizes = np.bincount(np.repeat(np.arange(len(picked)), [len(p) for p in picked])[keep], minlength=len(picked))
    ends = np.cumsum(sizes).astype(np.int64)
    firsts = np.asarray(bounds, np.int64)[np.asarray(conns, np.int64)]  # each connection's first row: its ids, one take
    cids = _at(table, "connection_id", firsts).to_pylist()
    captures = _at(table, "capture_id", firsts).to_pylist() if "capture_id" in table.column_names else [None] * len(firsts)
    dialects = _at(table, "dialect", firsts).to_pylist()
    plain = np.zeros(len(conns), bool)
    pairs = None
    if chunk is None and len(rows_kept):
        plain, pairs = _plain_pairs(table, rows_kept, ends, dialects, action, closed_here, ts, fids, cids, captures)
    slow = ~np.repeat(plain, np.diff(np.append(0, ends)))
    rows_slow = rows_kept[slow]
    fields = [f for f in _REQUEST_FIELDS if f in table.column_names]
    values = {f: _at(table, f, rows_slow).to_pylist() for f in fields}
    fid_list = fids(rows_slow).to_pylist()
    records = [dict(zip(fields, row)) for row in zip(*(values[f] for f in fields))]
    slow_ends = np.cumsum(np.where(plain, 0, sizes))
    out: list[tuple] = []
    out_conn: list[int] = []
    start = 0
    for k, end in enumerate(slow_ends.tolist()):
        if plain[k]:
            continue
        capture = captures[k]
        if chunk is None:
            sink = Output()
            matcher = RequestMatcher(cids[k], dialects[k], sink)
        else:
            if chunk.matcher is None:
                chunk.sink = Output()
                chunk.matcher = RequestMatcher(cids[k], dialects[k], chunk.sink)
            matcher, sink = chunk.matcher, chunk.sink
        for j in range(start, end):
            f = records[j]
            i = rows_slow[j]
            n = f.get("channel") or 0
            matcher.on_method(f, (f.get("class_name"), f.get("method_name")), n, f["direction"], fid_list[j], int(ts[i]))
            if action[i] == A_CONN_CLOSE_OK:
                matcher.finish("abandoned")
            if closed_here[i]:
                matcher.channel_closed(n)
        if chunk is None or chunk.final:
            matcher.finish()
        out += [(capture, r) for r in sink.request_responses]
        out_conn += [k] * len(sink.request_responses)
        sink.request_responses.clear()
        start = end
    if chunk is not None:
        return out
    return RequestRows(out, np.array(out_conn, np.int64), pairs)


class RequestRows:
    """A batch's request_responses: the matcher's rows (``(capture_id, row)``, with each one's connection number)
    and the plain pairs' columns (``_plain_pairs``), in the matcher's order: connection by connection, a
    connection's rows in the order their requests ended."""

    def __init__(self, rows: list[tuple], rows_conn: np.ndarray, pairs: "dict | None") -> None:
        self.rows, self.rows_conn, self.pairs = rows, rows_conn, pairs

    def __len__(self) -> int:
        return len(self.rows) + (len(self.pairs["conn"]) if self.pairs else 0)

    def __iter__(self) -> Iterator[tuple]:
        """The rows as ``(capture_id, row)`` in order, the pairs' made dicts (for tests and debugging: Python per row)."""
        rows, conn = list(self.rows), self.rows_conn
        if self.pairs:
            p = self.pairs
            values = [p[key].to_pylist() for key in REQUEST_RESPONSE_KEYS]
            rows += [(c, dict(zip(REQUEST_RESPONSE_KEYS, v))) for c, *v in zip(p["capture_id"].to_pylist(), *values)]
            conn = np.concatenate([conn, p["conn"]])
        return iter([rows[i] for i in np.argsort(conn, kind="stable")])

    def parts(self, struct: pa.StructType, size: int) -> Iterator[tuple[pa.Array, pa.Array]]:
        """(capture ids, rows as ``struct``) ``size`` rows at a time."""
        from amqplens.decode.common.arrow import to_struct_array

        captures = [pa.array([c for c, _ in self.rows], pa.string())]
        values = [to_struct_array([r for _, r in self.rows], struct)]
        conn = [self.rows_conn]
        if self.pairs:
            p = self.pairs
            captures.append(p["capture_id"].cast(pa.string()))
            n = len(p["conn"])
            values.append(pa.StructArray.from_arrays(
                [p[f.name].cast(f.type) if f.name in p else pa.nulls(n, f.type) for f in struct], fields=list(struct)))
            conn.append(p["conn"])
        capture = pa.concat_arrays(captures)
        value = pa.concat_arrays(values)
        if len(conn) > 1 and len(conn[0]) and len(conn[1]):
            at = pa.array(np.argsort(np.concatenate(conn), kind="stable"))
            capture, value = capture.take(at), value.take(at)
        for start in range(0, len(value), size):
            yield capture.slice(start, size), value.slice(start, size)


def _plain_pairs(table, rows_kept, ends, dialects, action, closed_here, ts, fids, cids, captures) -> tuple:
    """Which connections' rare methods ``RequestMatcher`` would only pair, and those pairs' rows as columns.

    Plain: after the methods the matcher does nothing with (neither a request, an answer nor a close; not closing a
    channel or the connection), the connection's methods alternate request, answer: each request one the matcher
    records (listed with responses, not no-wait: a no-wait argument that might be true, anywhere in its JSON, makes
    the connection not plain), not closing its channel; each answer from the other side on the request's channel,
    one of the request's responses and not itself a request; and the last answered. Then the matcher ends each
    request by that answer and nothing else, with the status ``machines.REQUEST`` gives a response, in the same order. Every other
    connection (an unanswered request, a close cutting one off, an answer nobody asked for, ...) is the matcher's.
    ``(plain per connection, columns of the pairs or None)``."""
    from amqplens.lifecycle.requests import _CLOSES

    n = len(rows_kept)
    k_of = np.repeat(np.arange(len(ends)), np.diff(np.append(0, ends)))
    cls, meth = _at(table, "class_name", rows_kept), _at(table, "method_name", rows_kept)
    dial = pa.array([d if isinstance(d, str) else "" for d in dialects], pa.string()).take(pa.array(k_of))
    key = pc.binary_join_element_wise(dial, cls.cast(pa.string()), meth.cast(pa.string()), "\x00").dictionary_encode()
    code = pc.fill_null(key.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    names = [(v.split("\x00", 2) + ["", ""])[:3] for v in key.dictionary.to_pylist()]  # (dialect, class, method)
    m = len(names) + 1  # the last: a null name
    req, ans, close, wait = (np.zeros(m, bool) for _ in range(4))
    ok = np.zeros((m, m), bool)
    for i, (d, c, meth_name) in enumerate(names):
        tables = sync_tables(d)
        name = (c, meth_name)
        req[i], ans[i], close[i] = name in tables.responses, name in tables.answers, name in _CLOSES
        wait[i] = name in tables.nowait
        for j, (d2, c2, m2) in enumerate(names):
            ok[i, j] = d2 == d and (c2, m2) in tables.responses.get(name, ())
    code[code < 0] = m - 1
    ends_conn = action[rows_kept] == A_CONN_CLOSE_OK
    closing = closed_here[rows_kept] | ends_conn
    bad_conn = np.zeros(len(ends), bool)
    inert = ~(req[code] | ans[code] | close[code])
    bad_conn[k_of[inert & closing]] = True  # a close among the methods the matcher skips: it may cut one off
    if wait.any():
        waits = wait[code]
        json = _at(table, "arguments_json", rows_kept) if "arguments_json" in table.column_names else pa.nulls(n, pa.string())
        maybe = pc.fill_null(pc.match_substring_regex(json.cast(pa.string()), r'"no_?wait"\s*:\s*true'), False)
        bad_conn[k_of[waits & maybe.to_numpy(zero_copy_only=False)]] = True
    live = np.flatnonzero(~inert)
    lk = k_of[live]
    first_of = np.searchsorted(lk, np.arange(len(ends)))  # each connection's first live row, in live's numbering
    pos = np.arange(len(live)) - first_of[lk]
    counts = np.bincount(lk, minlength=len(ends))
    bad_conn[counts % 2 == 1] = True
    lc = code[live]
    even = pos % 2 == 0
    bad_conn[lk[even & ~(req[lc] & ~closing[live])]] = True
    odd = np.flatnonzero(~even)
    if len(odd):
        a, r = live[odd], live[odd - 1]  # the answer, the request before it (the same connection: counts are even)
        channel = (pc.fill_null(_at(table, "channel", rows_kept), 0).to_numpy(zero_copy_only=False).astype(np.int64)
                   if "channel" in table.column_names else np.zeros(n, np.int64))
        direction = _at(table, "direction", rows_kept).cast(pa.string())
        to_server = pc.equal(direction, "to_server").to_numpy(zero_copy_only=False)
        fine = (ans[code[a]] & ~req[code[a]] & ok[code[r], code[a]] & (channel[a] == channel[r])
                & (to_server[a] != to_server[r]))
        bad_conn[k_of[a[~fine]]] = True
    plain = ~bad_conn & (counts > 0)
    pick = plain[k_of[live[odd]]] if len(odd) else np.zeros(0, bool)
    if not pick.any():
        return plain, None
    a = live[odd][pick]
    r = live[odd - 1][pick]
    k = k_of[r]
    names_of = pc.binary_join_element_wise(cls.cast(pa.string()), meth.cast(pa.string()), ".")
    t_req, t_ans = ts[rows_kept[r]], ts[rows_kept[a]]
    n_pairs = len(r)
    status = machines.REQUEST.step("awaiting", "response").next_state
    pairs = {
        "conn": k, "capture_id": pa.array(captures, pa.string()).take(pa.array(k)),
        "request_frame_id": fids(rows_kept[r]), "response_frame_id": fids(rows_kept[a]),
        "connection_id": pa.array(cids, pa.string()).take(pa.array(k)),
        "dialect": pa.array(dialects, pa.string()).take(pa.array(k)),
        "channel": pa.array(channel[r]), "request": names_of.take(pa.array(r)), "response": names_of.take(pa.array(a)),
        "request_ts_us": pa.array(t_req, pa.int64()), "response_ts_us": pa.array(t_ans, pa.int64()),
        "latency_us": pa.array(t_ans - t_req, pa.int64()), "reply_code": pa.nulls(n_pairs, pa.int64()),
        "error_condition": pa.nulls(n_pairs, pa.string()), "status": repeated(status, n_pairs),
    }
    return plain, pairs


def warm() -> float:
    """Seconds to load (or compile, once: numba's disk cache) the lifecycle's passes, on a small connection that takes
    every branch: confirms, a consumer with qos, acks single and multiple, a nack, a reject, a cancel, closes."""
    import time

    from amqplens.lifecycle.fold import fold

    t0 = time.perf_counter()
    if kernels() is None:
        return -1.0
    rows: list[dict] = []

    def frame(direction, offset, ts, kind, cls=None, method=None, channel=1, **values):
        rows.append({"connection_id": "warm", "capture_id": "warm", "direction": direction, "stream_offset": offset,
                     "ts": ts, "dialect": "0-9-1", "frame_type": kind, "channel": channel, "class_name": cls,
                     "method_name": method, **values})

    def message(direction, offset, ts, method, seq, **values):
        frame(direction, offset, ts, "method", "basic", method, message_seq=seq, **values)
        frame(direction, offset + 1, ts, "header", message_seq=seq, body_size=1, properties_json='{"message_id": "m"}')
        frame(direction, offset + 2, ts, "body", message_seq=seq, body_sha256="00" * 32)

    frame("to_server", 0, 1, "method", "channel", "open")
    frame("to_client", 0, 2, "method", "channel", "open-ok")
    frame("to_server", 1, 3, "method", "confirm", "select")
    frame("to_client", 1, 4, "method", "confirm", "select-ok")
    frame("to_server", 2, 5, "method", "basic", "qos", prefetch_count=2)
    frame("to_server", 3, 6, "method", "basic", "consume", consumer_tag="c", queue="q")
    frame("to_client", 2, 7, "method", "basic", "consume-ok", consumer_tag="c")
    for k in range(4):
        message("to_server", 10 + 3 * k, 10 + k, "publish", k)
        message("to_client", 10 + 3 * k, 20 + k, "deliver", k, delivery_tag=k + 1, consumer_tag="c")
    frame("to_client", 30, 30, "method", "basic", "ack", delivery_tag=2, multiple=True)
    frame("to_server", 30, 31, "method", "basic", "ack", delivery_tag=1)
    frame("to_server", 31, 32, "method", "basic", "nack", delivery_tag=2, requeue=True)
    frame("to_server", 32, 33, "method", "basic", "reject", delivery_tag=3)
    frame("to_client", 31, 34, "method", "basic", "cancel-ok", consumer_tag="c")
    frame("to_client", 32, 35, "heartbeat", channel=0)
    frame("to_server", 33, 36, "method", "channel", "close")
    frame("to_client", 33, 37, "method", "channel", "close-ok")
    frame("to_server", 34, 38, "method", "connection", "close", channel=0)
    frame("to_client", 34, 39, "method", "connection", "close-ok", channel=0)
    names = ("body_sha256", "body_size", "properties_json", "message_seq", "delivery_tag", "multiple", "requeue",
             "prefetch_count", "consumer_tag", "queue")
    table = pa.Table.from_pylist([dict.fromkeys(names) | r for r in rows])
    done = lifecycle(fold(table.sort_by([("ts", "ascending")]), 64), 64)
    assert done.taken.all(), "the warm-up connection is one the pass models"
    for part in done.deliveries(8192):  # and the properties' scan (props_kernel)
        assert part.num_rows
    return time.perf_counter() - t0
