"""0-9-1 settlement as an array pass (a measured prototype; the machines in ``amqp091.py`` stay the lifecycle).

Issue 32 step 2: deliveries and their outcomes from sorted arrays instead of a machine call per
frame. ``settle(frames)`` takes frames-table columns of whole connections (any order) and, in one
numba pass over them in the runner's order, settles

- basic.deliver / get-ok (to the client) by the client's basic.ack / nack / reject of its channel,
  ``multiple`` meaning every outstanding tag up to it (0: all);
- basic.publish on a channel after confirm.select, numbered from 1, by the broker's basic.ack /
  nack of its channel, ``multiple`` alike;

giving per frame row the outcome (the machines' names), the settling row and the settled time. It
does not know consumers (no-ack deliveries), transactions, recover, returns, channel or connection
ends: a channel that sees any of those (tx.select, basic.recover*, basic.return, basic.consume with
no-ack, basic.get, a channel.open after the first) is marked ``unsupported`` and its rows are left to the
machines. ``tools/bench_task.py --settle`` measures it and compares every row it settles with the
machines' deliveries rows; tests/lifecycle/test_settle091.py does the same on every fixture.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from amqplens.lifecycle.records import FROM_BROKER, TO_BROKER

# event codes of a frame row
EV_OTHER, EV_PUBLISH, EV_DELIVER, EV_ACK, EV_NACK, EV_REJECT, EV_CONFIRM_SELECT, EV_UNSUPPORTED, EV_END, EV_CONN_END = range(10)
_EVENTS = {"publish": EV_PUBLISH, "deliver": EV_DELIVER, "get-ok": EV_DELIVER, "ack": EV_ACK, "nack": EV_NACK,
           "reject": EV_REJECT, "select": EV_CONFIRM_SELECT}
_UNSUPPORTED_METHODS = {("tx", "select"), ("basic", "recover"), ("basic", "recover-async"), ("basic", "return"),
                        ("basic", "get")}
_ENDS = {("channel", "close"), ("channel", "close-ok")}
_CONNECTION_ENDS = {("connection", "close"), ("connection", "close-ok")}
# outcome codes (OUTCOMES[code])
OUTCOMES = (None, "acked", "nacked_requeue", "nacked_drop", "rejected_requeue", "rejected_drop", "confirmed", "nacked_by_broker")
_REFERS_BACK = ("ack", "nack", "reject", "get-empty")


@njit(cache=True, nogil=True)
def _pass(order, conn, chan, event, direction, tag, multiple, requeue, ts, outcome, settled_by, settled_ts, unsupported):
    """Rows in ``order``; ``chan``: a dense id per (connection, channel). Per channel the outstanding deliveries and
    confirm-mode publishes are kept in lists in arrival order (tags ascending), with a head past the settled ones."""
    n = len(order)
    nch = 0
    for i in range(n):
        nch = max(nch, chan[i] + 1)
    confirm = np.zeros(nch, np.bool_)
    ended = np.zeros(nch, np.bool_)
    conn_ended = np.zeros(len(chan) + 1, np.bool_)
    next_seq = np.ones(nch, np.int64)
    # per channel: outstanding rows as singly linked lists in arrival order (head, tail, next)
    d_head = np.full(nch, -1, np.int64)
    d_tail = np.full(nch, -1, np.int64)
    p_head = np.full(nch, -1, np.int64)
    p_tail = np.full(nch, -1, np.int64)
    nxt = np.full(len(chan), -1, np.int64)
    pub_seq = np.zeros(len(chan), np.int64)
    for k in range(n):
        i = order[k]
        c = chan[i]
        e = event[i]
        if e == EV_UNSUPPORTED:
            unsupported[c] = True
        elif e == EV_END:
            ended[c] = True  # what is outstanding ends with the channel: the machines' (requeued, unconfirmed at close)
        elif e == EV_CONN_END:
            conn_ended[conn[i]] = True
        elif (ended[c] or conn_ended[conn[i]]) and e != EV_OTHER:
            unsupported[c] = True  # a channel used again after its end
        elif e == EV_CONFIRM_SELECT:
            if not confirm[c]:
                confirm[c] = True
                next_seq[c] = 1
        elif e == EV_PUBLISH and direction[i] == 0:
            if confirm[c]:
                pub_seq[i] = next_seq[c]
                next_seq[c] += 1
                if p_tail[c] >= 0:
                    nxt[p_tail[c]] = i
                else:
                    p_head[c] = i
                p_tail[c] = i
        elif e == EV_DELIVER and direction[i] == 1:
            if d_tail[c] >= 0:
                if tag[i] <= tag[d_tail[c]]:
                    unsupported[c] = True  # tags restarted: the machines know why
                nxt[d_tail[c]] = i
            else:
                d_head[c] = i
            d_tail[c] = i
        elif e == EV_ACK or e == EV_NACK or e == EV_REJECT:
            t = tag[i]
            if direction[i] == 0:  # the client settles deliveries
                code = 1 if e == EV_ACK else (2 if requeue[i] else 3) if e == EV_NACK else (4 if requeue[i] else 5)
                head, key_is_seq = d_head, False
            else:  # the broker confirms publishes
                code = 6 if e == EV_ACK else 7
                head, key_is_seq = p_head, True
            found = False
            prev = -1
            r = head[c]
            while r >= 0:
                key = pub_seq[r] if key_is_seq else tag[r]
                if multiple[i] and t and key > t:
                    break
                if multiple[i] or key == t:
                    outcome[r], settled_by[r], settled_ts[r] = code, i, ts[i]
                    found = True
                    r2 = nxt[r]
                    if prev >= 0:
                        nxt[prev] = r2
                    else:
                        head[c] = r2
                    if key_is_seq:
                        if p_tail[c] == r:
                            p_tail[c] = prev
                    elif d_tail[c] == r:
                        d_tail[c] = prev
                    r = r2
                    if not multiple[i]:
                        break
                    continue
                if not multiple[i] and key > t:
                    break
                prev = r
                r = nxt[r]
            if not found:
                unsupported[c] = True  # a settlement of nothing outstanding: the machines flag it
    return nxt


def _codes(table: pa.Table) -> dict[str, np.ndarray]:
    def col(name, fill=0):
        values = table.column(name) if name in table.column_names else pa.nulls(table.num_rows)
        if pa.types.is_null(values.type):
            return np.full(table.num_rows, fill, np.int64)
        return pc.fill_null(values, fill).to_numpy()

    cls = table.column("class_name").cast(pa.string())
    method = table.column("method_name").cast(pa.string())
    event = np.zeros(table.num_rows, np.int64)
    for name, code in _EVENTS.items():
        hit = pc.fill_null(pc.equal(method, name), False).to_numpy(zero_copy_only=False)
        if name == "select":
            hit &= pc.fill_null(pc.equal(cls, "confirm"), False).to_numpy(zero_copy_only=False)
        elif code != EV_OTHER:
            hit &= pc.fill_null(pc.equal(cls, "basic"), False).to_numpy(zero_copy_only=False)
        event[hit] = code
    for names, code in ((_UNSUPPORTED_METHODS, EV_UNSUPPORTED), (_ENDS, EV_END), (_CONNECTION_ENDS, EV_CONN_END)):
        for c, m in names:
            hit = pc.fill_null(pc.and_(pc.equal(cls, c), pc.equal(method, m)), False).to_numpy(zero_copy_only=False)
            event[hit] = code
    no_ack = col("no_ack", False).astype(np.bool_)
    event[no_ack & pc.fill_null(pc.equal(method, "consume"), False).to_numpy(zero_copy_only=False)] = EV_UNSUPPORTED
    conn = pc.dictionary_encode(table.column("connection_id")).combine_chunks()
    chan = conn.indices.to_numpy().astype(np.int64) * 65536 + col("channel")
    _, dense = np.unique(chan, return_inverse=True)
    rank = np.isin(method.to_numpy(zero_copy_only=False), _REFERS_BACK) | pc.fill_null(
        pc.ends_with(method, "-ok"), False).to_numpy(zero_copy_only=False)
    direction = pc.fill_null(pc.not_equal(table.column("direction"), "to_server"), True).to_numpy(zero_copy_only=False)
    return {"chan": dense.astype(np.int64), "event": event, "direction": direction.astype(np.int64),
            "tag": col("delivery_tag"), "multiple": col("multiple", False), "requeue": col("requeue", False),
            "ts": col("ts_us"), "rank": rank, "conn": conn.indices.to_numpy(), "offset": col("stream_offset")}


def settle(table: pa.Table) -> dict[str, np.ndarray]:
    """Per row of ``table`` (frames-table columns with ``ts_us``): ``outcome`` (an OUTCOMES index, 0: not settled
    here), ``settled_by`` (the settling row), ``settled_ts``, and ``supported`` (False: the row's channel saw
    something this pass leaves to the machines)."""
    a = _codes(table)
    n = table.num_rows
    # the runner's order: per connection by time; on equal time what refers back after, then to_server first
    order = np.lexsort((a["offset"], a["direction"], a["rank"], a["ts"], a["conn"]))
    outcome = np.zeros(n, np.int64)
    settled_by = np.full(n, -1, np.int64)
    settled_ts = np.zeros(n, np.int64)
    unsupported = np.zeros(int(a["chan"].max()) + 1 if n else 0, np.bool_)
    _pass(order, a["conn"].astype(np.int64), a["chan"], a["event"], a["direction"], a["tag"], a["multiple"].astype(np.bool_), a["requeue"].astype(np.bool_),
          a["ts"], outcome, settled_by, settled_ts, unsupported)  # fmt: skip
    return {"outcome": outcome, "settled_by": settled_by, "settled_ts": settled_ts, "supported": ~unsupported[a["chan"]]}


def with_ts_us(table: pa.Table) -> pa.Table:
    """The frames table's ``ts`` as ``ts_us`` (the machines' column), when it has no ``ts_us``."""
    if "ts_us" in table.column_names:
        return table
    ts = table.column("ts")
    if pa.types.is_timestamp(ts.type) and ts.type.unit != "us":
        ts = ts.cast(pa.timestamp("us", tz=ts.type.tz))
    return table.append_column("ts_us", ts.cast(pa.int64()))


def compare(table: pa.Table, result: dict[str, np.ndarray], deliveries: list[dict]) -> dict[str, list]:
    """The pass's settlements against the machines' deliveries rows: ``same`` (outcome, settled time and frame
    equal), ``different`` (the pass settled it otherwise), ``missed`` (the machines settled a supported publish or
    delivery with an outcome the pass knows, the pass did not), ``left`` (rows of unsupported channels)."""
    rows = {r["delivery_id"]: r for r in deliveries}
    cid = table.column("connection_id").to_pylist()
    direction = table.column("direction").to_pylist()
    channel = table.column("channel").to_pylist()
    seq = table.column("message_seq").to_pylist()
    offset = table.column("stream_offset").to_pylist()
    method = table.column("method_name").to_pylist()
    frame_type = table.column("frame_type").to_pylist()
    out: dict[str, list] = {"same": [], "different": [], "missed": [], "left": []}
    known = set(OUTCOMES[1:])
    for i in range(table.num_rows):
        if frame_type[i] != "method" or method[i] not in ("publish", "deliver", "get-ok"):
            continue
        key = f"{cid[i]}-{TO_BROKER if direction[i] == 'to_server' else FROM_BROKER}-{channel[i]}-{seq[i]}"
        row = rows.get(key)
        if row is None:
            continue
        if not result["supported"][i]:
            out["left"].append(key)
            continue
        code = int(result["outcome"][i])
        if code == 0:
            if row["outcome"] in known:
                out["missed"].append((key, row["outcome"]))
            continue
        by = int(result["settled_by"][i])
        frame_id = f"{cid[by]}-{'s' if direction[by] == 'to_server' else 'c'}-{offset[by]}"
        got = (OUTCOMES[code], int(result["settled_ts"][i]), frame_id)
        want = (row["outcome"], row["settled_ts_us"], row["settled_by_frame_id"])
        out["same" if got == want else "different"].append((key, got, want))
    return out
