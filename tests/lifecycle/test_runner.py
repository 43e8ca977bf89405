"""The streaming driver and the Arrow batch function: order, bounded state, contracts, any input order of frames."""

from __future__ import annotations


import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from amqplens.lifecycle import (
    DELIVERY_KEYS,
    FLOW_EVENT_KEYS,
    REQUEST_RESPONSE_KEYS,
    LifecycleOptions,
    LifecycleRunner,
    lifecycle_batches,
)
from amqplens.lifecycle.machines import DELIVER, PUBLISH, TRANSFER
from amqplens.contracts.tables import DELIVERIES, FLOW_EVENTS, REQUEST_RESPONSES

from .conversation import CLIENT, SERVER, Conversation, run
from .conversation010 import Conversation010

TS_RENAMES = {"sent_ts": "sent_ts_us", "settled_ts": "settled_ts_us", "ts": "ts_us", "request_ts": "request_ts_us",
              "response_ts": "response_ts_us"}
JOB_COLUMNS = ("capture_id", "capture_date", "source", "trace_json")  # amqplens/jobs/lifecycle.py JOB_COLUMNS
OUTCOMES = PUBLISH.outcomes | DELIVER.outcomes | TRANSFER.outcomes


def contract_struct(table) -> pa.StructType:
    """What the job derives from a contract: its columns without the job's, timestamps as int64 *_us."""
    fields = []
    for c in table.columns:
        if c.name in JOB_COLUMNS:
            continue
        if c.type == "timestamp":
            fields.append(pa.field(TS_RENAMES[c.name], pa.int64()))
        else:
            fields.append(pa.field(c.name, c.arrow_type))
    return pa.struct(fields)


STRUCTS = tuple(contract_struct(t) for t in (DELIVERIES, FLOW_EVENTS, REQUEST_RESPONSES))


def test_row_keys_are_the_contract_columns():
    for keys, struct in zip((DELIVERY_KEYS, FLOW_EVENT_KEYS, REQUEST_RESPONSE_KEYS), STRUCTS):
        assert list(keys) == [f.name for f in struct]


def test_outcome_vocabulary_is_documented_in_the_contract():
    """Every outcome the machines can produce should appear in the deliveries contract's outcome doc."""
    import re

    documented = set(re.split(r"[\s,;:]+", DELIVERIES.column("outcome").doc))
    # the lifecycle adds these; the contract's doc list is to be extended by the schema owner
    added = {"aborted", "committed", "declared", "recovered", "rolled_back", "sent", "settled", "transactional"}
    assert OUTCOMES - documented <= added


# ---------------------------------------------------------------------------- order


def _out_of_order_deliver() -> Conversation:
    c = Conversation()
    c.open_channel(1)
    c.consume(1)
    method, header, body = c.deliver(1, 1)
    header["ts_us"] = method["ts_us"] - 5  # its segment arrived before the one holding the method (a retransmission)
    c.c(1, "basic.ack", delivery_tag=1)
    c.rows.sort(key=lambda r: (r["ts_us"], r["stream_offset"]))  # as the job sorts
    return c


def test_each_direction_is_handled_in_stream_order_within_the_window():
    c = _out_of_order_deliver()
    (row,), f, _, runner = run(c)
    assert row["outcome"] == "acked" and len(row["frame_ids"]) == 3 and row["flags"] is None
    assert runner.stats["late_frames"] == 0


def test_without_a_window_the_inversion_is_counted():
    c = _out_of_order_deliver()
    (row,), _, _, runner = run(c, reorder_window=0)
    assert runner.stats["late_frames"] == 1 and len(row["frame_ids"]) == 2  # the header went by before its method


def _publish_after_its_content() -> Conversation:
    """Issue 38 case 6 in small: publish 1's header and body, and all of publish 2, handled before publish 1's
    method (frames of a segment captured ahead of a hole, beyond the window)."""
    c = Conversation()
    c.open_channel(1)
    c.publish(1)
    late = c.publish(1)
    c.publish(1)
    c.rows.remove(late[0])
    c.rows.append(late[0])
    return c


def test_two_rows_never_share_a_delivery_id_whatever_order_the_frames_come_in():
    d, _, _, runner = run(_publish_after_its_content(), reorder_window=0)
    assert runner.stats["late_frames"] == 1
    ids = [r["delivery_id"] for r in d]
    assert len(ids) == 4 and len(set(ids)) == 4  # the old key gave the late publish the id of its orphaned content
    assert sorted(str(r["flags"]) for r in d) == ["None", "None", "['content_incomplete']", "['method_not_seen']"]
    assert ids == [r["delivery_id"] for r in run(_publish_after_its_content(), reorder_window=0)[0]]  # deterministic
    (d_window,) = [run(_publish_after_its_content())[0]]  # within the window: one row per publish, no flag
    assert len(d_window) == 3 and not [r for r in d_window if r["flags"]]


def test_two_transfer_rows_never_share_a_delivery_id_whatever_order_the_frames_come_in():
    c = Conversation("1.0")
    c.perf(CLIENT, 0, "attach", handle=0, role=False, link_name="l", snd_settle_mode=0, rcv_settle_mode=0)
    c.transfer(CLIENT, 0, 0, 0)
    first = c.transfer(CLIENT, 0, 0, 1, more=True)
    c.transfer(CLIENT, 0, 0, 1)
    c.transfer(CLIENT, 0, 0, 2)
    c.rows.remove(first)
    c.rows.append(first)  # its continuation and the next transfer go first
    d, _, _, runner = run(c, reorder_window=0)
    assert runner.stats["late_frames"] == 1
    ids = [r["delivery_id"] for r in d]
    assert len(ids) == len(set(ids)) == 4


def test_two_0_10_transfer_rows_never_share_a_delivery_id_whatever_order_the_frames_come_in():
    c = Conversation010()
    transfers = [c.transfer(CLIENT, 1, "amq.direct") for _ in range(3)]
    late = transfers[1][0]
    c.rows.remove(late)
    c.rows.append(late)  # the second transfer's command after its content and the third transfer
    d, _, _, runner = run(c, reorder_window=0)
    assert runner.stats["late_frames"] == 1
    ids = [r["delivery_id"] for r in d]
    assert len(ids) == len(set(ids)) == 4  # the old name took message_seq 2 again


def test_equal_times_across_directions_put_the_referring_frame_last():
    c = Conversation()
    c.open_channel(1)
    c.c(1, "confirm.select")
    pub = c.publish(1)
    ack = c.s(1, "basic.ack", delivery_tag=1)
    for r in pub:
        r["ts_us"] = ack["ts_us"]  # one coarse clock tick
    c.rows.remove(ack)
    c.rows.insert(c.rows.index(pub[0]), ack)  # and the ack sorted first
    (row,), f, *_ = run(c)
    assert row["outcome"] == "confirmed" and not f


def test_a_new_connection_id_finishes_the_previous_connection():
    a, b = Conversation(connection_id="A"), Conversation(connection_id="B")
    for conv in (a, b):
        conv.open_channel(1)
        conv.c(1, "confirm.select")
        conv.publish(1)
    runner = LifecycleRunner(LifecycleOptions(reorder_window=4))
    runner.feed(a.rows)
    assert runner.drain_deliveries() == []
    runner.feed(b.rows[:1])
    (row,) = runner.drain_deliveries()
    assert (row["connection_id"], row["outcome"]) == ("A", "open_at_capture_end")
    assert runner.capture_id_of("A") == "cap"
    runner.forget_finished()
    assert runner.capture_id_of("A") is None and runner.capture_id_of("B") == "cap"
    runner.feed(b.rows[1:])
    runner.finish()
    assert [r["connection_id"] for r in runner.drain_deliveries()] == ["B"]
    assert runner.stats["connections"] == 2


def test_dialects_without_a_machine_are_counted_and_skipped():
    c = Conversation("0-9-draft")  # 0-10 has its machine now (test_amqp010.py)
    c.frame(CLIENT, "protocol_header", None)
    d, f, r, runner = run(c)
    assert (d, f, r) == ([], [], []) and runner.stats["unsupported_frames"] == 1


# ---------------------------------------------------------------------------- the batch function


def _sample() -> list[dict]:
    c = Conversation(connection_id="A")
    c.open_channel(1)
    c.consume(1)
    c.deliver(1, 1)
    c.c(1, "basic.ack", delivery_tag=1)
    c.c(1, "basic.qos", prefetch_count=3)
    t = Conversation("1.0", connection_id="B")
    t.perf(CLIENT, 0, "begin", next_outgoing_id=0, incoming_window=10, outgoing_window=10)
    t.perf(CLIENT, 0, "attach", handle=0, role="sender", link_name="L", snd_settle_mode="settled")
    t.transfer(CLIENT, 0, 0, 0, settled=True)
    return c.rows + t.rows


def test_lifecycle_batches_emit_one_kind_per_batch_with_the_contract_structs():
    rows = _sample()
    runner = LifecycleRunner()
    runner.feed(rows)
    runner.finish()
    want = {"delivery": runner.drain_deliveries(), "flow_event": runner.drain_flow_events(),
            "request_response": runner.drain_request_responses()}
    table = pa.Table.from_pylist(rows)
    # the frames table has ts (timestamp) instead of ts_us
    ts = table.column("ts_us").cast(pa.timestamp("us", tz="UTC"))
    table = table.drop(["ts_us"]).append_column("ts", ts)
    got = {"delivery": [], "flow_event": [], "request_response": []}
    for batch in lifecycle_batches(table.to_batches(max_chunksize=3), *STRUCTS, batch_rows=2):
        kinds = set(batch.column("kind").to_pylist())
        assert len(kinds) == 1 and batch.num_rows <= 2
        (kind,) = kinds
        assert set(batch.column("capture_id").to_pylist()) == {"cap"}
        for other in set(got) - {kind}:
            assert batch.column(other).null_count == batch.num_rows
        got[kind] += batch.column(kind).to_pylist()
    for kind in got:
        assert got[kind] == want[kind], kind
    assert len(got["delivery"]) == 2 and got["delivery"][1]["outcome"] == "presettled"


# ---------------------------------------------------------------------------- any order of frames


_NAMES_091 = [
    ("c", "channel.open"), ("s", "channel.open-ok"), ("c", "channel.close"), ("s", "channel.close"), ("c", "channel.close-ok"),
    ("s", "channel.close-ok"), ("c", "confirm.select"), ("c", "tx.select"), ("c", "tx.commit"), ("s", "tx.commit-ok"),
    ("c", "tx.rollback"), ("s", "tx.rollback-ok"), ("c", "basic.qos"), ("c", "basic.consume"), ("s", "basic.consume-ok"),
    ("c", "basic.cancel"), ("s", "basic.cancel-ok"), ("c", "basic.get"), ("s", "basic.get-empty"), ("c", "basic.ack"),
    ("s", "basic.ack"), ("s", "basic.nack"), ("c", "basic.nack"), ("c", "basic.reject"), ("c", "basic.recover"),
    ("s", "channel.flow"), ("s", "connection.blocked"), ("c", "connection.close"), ("s", "connection.close-ok"),
    ("c", "queue.declare"), ("s", "queue.declare-ok"),
]
_step091 = st.one_of(
    st.tuples(st.just("m"), st.sampled_from(_NAMES_091), st.integers(0, 2), st.integers(0, 6), st.booleans(), st.booleans()),
    st.tuples(st.just("publish"), st.integers(1, 2), st.sampled_from(["a", "b"]), st.booleans(), st.integers(0, 3)),
    st.tuples(st.sampled_from(["deliver", "get-ok", "return"]), st.integers(1, 2), st.integers(0, 6), st.integers(0, 3)),
    st.tuples(st.just("drop")),
)


def _script_091(steps) -> Conversation:
    c = Conversation(connection_id="fuzz")
    for step in steps:
        kind = step[0]
        if kind == "m":
            _, (who, name), ch, tag, flag, flag2 = step
            (c.c if who == "c" else c.s)(ch if not name.startswith("connection") else 0, name, delivery_tag=tag, multiple=flag,
                                         requeue=flag2, no_ack=flag, consumer_tag="ct", prefetch_count=tag, global_qos=flag2,
                                         active=flag, args={"no_wait": flag2, "nowait": flag2})
        elif kind == "publish":
            _, ch, key, mandatory, bodies = step
            c.publish(ch, body=b"x" * bodies * 3, routing_key=key, mandatory=mandatory, frame_max=3)
        elif kind == "drop":
            if c.rows:
                c.rows.pop()  # lose a frame (a gap, a capture cut)
        else:
            _, ch, tag, bodies = step
            if kind == "return":
                c.basic_return(ch, routing_key="a")
            else:
                (c.deliver if kind == "deliver" else c.get_ok)(ch, tag, body=b"y" * bodies)
    return c


def _check_invariants(rows: list[dict], d: list, f: list, r: list) -> None:
    ids = {x["frame_id"] for x in rows}
    owner: dict[str, str] = {}
    for x in d:
        assert tuple(x) == DELIVERY_KEYS and x["outcome"] in OUTCOMES
        for fid in x["frame_ids"]:
            assert fid in ids
            assert fid not in owner, f"{fid} in {owner[fid]} and {x['delivery_id']}"
            owner[fid] = x["delivery_id"]
    messages = [x["frame_id"] for x in rows if x.get("method_name") in ("publish", "deliver", "get-ok") or x.get("performative") == "transfer"]
    for fid in messages:
        assert fid in owner, f"message frame {fid} belongs to no delivery"
    assert len({x["delivery_id"] for x in d}) == len(d)
    assert len({x["event_id"] for x in f}) == len(f)
    assert len({x["request_frame_id"] for x in r}) == len(r)
    assert all(x["status"] in ("ok", "error", "unanswered") for x in r)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_step091, max_size=40), window=st.sampled_from([0, 8, 64]))
def test_any_0_9_1_frame_order_gives_consistent_rows(steps, window):
    c = _script_091(steps)
    d, f, r, _ = run(c, reorder_window=window, max_pending_returns=3)
    _check_invariants(c.rows, d, f, r)


_step10 = st.one_of(
    st.tuples(st.just("transfer"), st.sampled_from([CLIENT, SERVER]), st.integers(0, 1), st.one_of(st.none(), st.integers(0, 5)),
              st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("disposition"), st.sampled_from([CLIENT, SERVER]), st.sampled_from(["receiver", "sender"]),
              st.integers(0, 5), st.integers(0, 3), st.booleans(), st.sampled_from([None, "accepted", "released", "received", "bogus"])),
    st.tuples(st.sampled_from(["begin", "end", "attach", "detach", "flow", "close", "open"]), st.sampled_from([CLIENT, SERVER]),
              st.integers(0, 1), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("drop")),
)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_step10, max_size=40), window=st.sampled_from([0, 8]))
# found by hypothesis: a transfer adopts a session on channel 0, a begin maps the sender's channel 0 to a new one,
# both get links of the same key; the close ended both and their close rows shared an event_id
@example(steps=[("transfer", "to_server", 0, None, False, False, False), ("begin", "to_server", 0, 0, False)]
         + [("transfer", "to_server", 0, None, False, False, False)] * 5 + [("close", "to_server", 0, 0, False)], window=0)
def test_any_1_0_frame_order_gives_consistent_rows(steps, window):
    c = Conversation("1.0", connection_id="fuzz10")
    for step in steps:
        kind = step[0]
        if kind == "transfer":
            _, who, handle, did, more, settled, aborted = step
            c.transfer(who, 0, handle, did, more=more, settled=settled, aborted=aborted)
        elif kind == "disposition":
            _, who, role, first, span, settled, state = step
            c.perf(who, 0, "disposition", role=role, first=first, last=first + span, settled=settled, state=state)
        elif kind == "drop":
            if c.rows:
                c.rows.pop()
        else:
            _, who, handle, n, flag = step
            c.perf(who, 0, kind, args={"remote_channel": 0} if flag else {}, handle=handle, role="sender" if flag else "receiver",
                   link_name="L", link_credit=n, delivery_count=n if flag else None, drain=flag, incoming_window=n,
                   next_incoming_id=None if flag else n, outgoing_window=n, next_outgoing_id=n,
                   error_condition="amqp:x" if flag and kind != "attach" else None)
    d, f, r, _ = run(c, reorder_window=window)
    _check_invariants(c.rows, d, f, r)


def test_rows_outside_the_contract_are_counted_not_raised():
    c = Conversation()
    c.open_channel(1)
    c.rows[0]["direction"] = "sideways"
    c.rows[1]["ts_us"] = None
    _, _, _, runner = run(c)
    assert runner.stats["bad_frames"] == 2
