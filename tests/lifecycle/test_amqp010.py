"""0-10 lifecycles from hand-made frame rows: transfers, accept/reject/release, completion, credit, pairs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplens.lifecycle.machines import TRANSFER_0_10
from amqplens.lifecycle.records import DELIVERY_KEYS, FLOW_EVENT_KEYS, REQUEST_RESPONSE_KEYS, Delivery
from amqplens.lifecycle.seqsets import members, parse_ranges

from .conversation import run
from .conversation010 import CLIENT, SERVER, Conversation010

CH = 1


def _subscribed(c: Conversation010, dest: str = "d1", queue: str = "q1") -> None:
    c.session(CH)
    c.cmd(CLIENT, CH, "message.subscribe", destination=dest, queue=queue, accept_mode="explicit", acquire_mode="pre-acquired")


def test_every_state_event_pair_of_the_0_10_machine_does_what_its_table_says():
    """Exhaustive over TRANSFER_0_10: each pair applied to a delivery in that state (the generic walks are in test_machines)."""
    for state in TRANSFER_0_10.states:
        for event in TRANSFER_0_10.events:
            rec = Delivery("d", "c", "0-10", "from_broker", 1, "transfer", "f0", 100)
            rec.state = state
            t = TRANSFER_0_10.table[(state, event)]
            ended = rec.step(TRANSFER_0_10, event, "f1", 200)
            assert ended == (t.next_state in TRANSFER_0_10.outcomes)
            assert (rec.outcome if ended else rec.state) == t.next_state
            if state in ("unsettled", "completed") and event in ("accept", "reject", "release"):
                assert rec.outcome == {"accept": "accepted", "reject": "rejected", "release": "released"}[event]
                assert rec.settled_by_frame_id == "f1"
            if state == "new" and event.startswith("transfer_none"):
                assert rec.settled_by_frame_id == "f0" and rec.row()["settle_latency_us"] == 0
            if state == "completed" and event in ("session_detach", "connection_close", "capture_end"):
                assert rec.flags == ["completed_unsettled"]


def test_sequence_sets_wrap_and_enumerate():
    assert parse_ranges("[[4294967295, 1]]") == [(4294967295, 1)]
    assert members([(4294967295, 1)], {0: 1, 1: 1, 2: 1, 4294967295: 1}) == [4294967295, 0, 1]
    assert sorted(members([(0, 4294967295)], {i: 1 for i in range(5)})) == list(range(5))  # huge set: scanned
    assert parse_ranges("not json") == [] and parse_ranges('[[1], "x", [1, 2]]') == [(1, 2)]


@pytest.mark.parametrize("codec_ids", [True, False], ids=["codec-ids", "counted-ids"])
def test_accept_reject_release_settle_the_peers_transfers_by_command_id(codec_ids):
    c = Conversation010(codec_ids=codec_ids)
    _subscribed(c)
    sent = [c.transfer(SERVER, CH, "d1") for _ in range(5)]  # broker command ids 0..4
    acc = c.settle(CLIENT, CH, "accept", [[0, 1]])
    rej = c.settle(CLIENT, CH, "reject", [[2, 2]], reply_code=1)
    rel = c.settle(CLIENT, CH, "release", [[3, 3]])
    c.ctl(CLIENT, CH, "session.detach", session_name="s1")
    det = c.ctl(SERVER, CH, "session.detached", session_name="s1", reply_code=0)
    d, f, r, _ = run(c)
    assert all(tuple(x) == DELIVERY_KEYS for x in d)
    out = {x["transfer_id"]: x for x in d}
    assert [out[i]["outcome"] for i in range(5)] == ["accepted", "accepted", "rejected", "released", "unsettled_at_close"]
    assert [out[i]["settled_by_frame_id"] for i in range(4)] == [acc["frame_id"]] * 2 + [rej["frame_id"], rel["frame_id"]]
    assert out[2]["flags"] == ["reject_unroutable"]
    assert out[4]["settled_by_frame_id"] == c.rows[-2]["frame_id"] != det["frame_id"]  # the detach ends the session
    for i, frames in enumerate(sent):
        row = out[i]
        assert row["frame_ids"] == [x["frame_id"] for x in frames]
        assert (row["direction"], row["channel"], row["consumer_tag"], row["queue"], row["settle_mode"], row["dialect"]) == (
            "from_broker", CH, "d1", "q1", "explicit/pre-acquired", "0-10")
        assert (row["message_id"], row["content_type"], row["delivery_mode"], row["priority"], row["body_size"]) == (
            f"m{i + 1}", "text/plain", 2, 4, 4)
        assert row["body_sha256"] == frames[-1]["body_sha256"] and row["routing_key"] == "k" and row["redelivered"] is False
    assert len({x["delivery_id"] for x in d}) == 5


def test_accept_mode_none_is_settled_on_send_both_ways():
    c = Conversation010()
    _subscribed(c)
    pub = c.transfer(CLIENT, CH, "amq.direct", accept_mode="none")
    dlv = c.transfer(SERVER, CH, "d1", accept_mode="none")
    d, *_ = run(c)
    out = {x["direction"]: x for x in d}
    assert (out["to_broker"]["outcome"], out["to_broker"]["exchange"], out["to_broker"]["settled_by_frame_id"]) == (
        "sent", "amq.direct", pub[0]["frame_id"])
    assert (out["from_broker"]["outcome"], out["from_broker"]["settled_by_frame_id"]) == ("auto_ack", dlv[0]["frame_id"])
    assert out["to_broker"]["settle_latency_us"] == out["from_broker"]["settle_latency_us"] == 0


def test_completion_is_recorded_but_does_not_settle():
    c = Conversation010()
    _subscribed(c)  # client command 0
    c.transfer(CLIENT, CH, "amq.direct")  # client command 1, explicit: the broker should accept it
    c.transfer(CLIENT, CH, "amq.direct")  # client command 2
    c.completed(SERVER, CH, [[0, 2]])
    acc = c.settle(SERVER, CH, "accept", [[2, 2]])
    d, *_ = run(c)
    out = {x["transfer_id"]: x for x in d}
    assert (out[1]["outcome"], out[1]["flags"]) == ("open_at_capture_end", ["completed_unsettled"])
    assert (out[2]["outcome"], out[2]["settled_by_frame_id"], out[2]["flags"]) == ("accepted", acc["frame_id"], None)


def test_multi_frame_segments_and_interleaved_channels_keep_every_frame_in_one_delivery():
    c = Conversation010()
    _subscribed(c)
    c.session(2)
    a = c.transfer(SERVER, CH, "d1", cmd_frames=2, body=b"x" * 10, body_frames=3)
    b = c.transfer(SERVER, 2, "d2", header=False)
    c.settle(CLIENT, CH, "accept", [[0, 0]])
    d, *_ = run(c)
    ids = {x["channel"]: x["frame_ids"] for x in d}
    assert ids == {CH: [x["frame_id"] for x in a], 2: [x["frame_id"] for x in b]}
    assert len(a) == 6
    flat = [fid for x in d for fid in x["frame_ids"]]
    assert len(flat) == len(set(flat))


def test_unknown_ids_and_orphans_are_flagged_rows_not_errors():
    c = Conversation010()
    c.session(CH)
    bad = c.settle(CLIENT, CH, "accept", [[40, 41]])  # nothing was sent
    # header and body whose command the capture missed
    hdr = c.frame(SERVER, "header", CH, class_name="message", first_segment=False, last_segment=False, first_frame=True, last_frame=True)
    body = c.frame(SERVER, "body", CH, class_name="message", first_segment=False, last_segment=True, first_frame=True, last_frame=True,
                   body_size=3)
    cut = c.transfer(SERVER, CH, "d1")[:2]  # command + header, then the capture ends before the body
    del c.rows[-1]
    d, f, r, _ = run(c)
    assert [(x["event"], x["reason"], x["frame_id"]) for x in f] == [("settle", "accept_of_unknown_id", bad["frame_id"])]
    assert all(tuple(x) == FLOW_EVENT_KEYS for x in f)
    orphan = next(x for x in d if x["frame_ids"][0] == hdr["frame_id"])
    assert orphan["frame_ids"] == [hdr["frame_id"], body["frame_id"]] and orphan["flags"] == ["orphan_continuation"]
    assert orphan["outcome"] == "open_at_capture_end"
    partial = next(x for x in d if x is not orphan)
    assert partial["flags"] == ["content_incomplete"] and partial["frame_ids"] == [x["frame_id"] for x in cut]


def test_connection_close_ends_every_session():
    c = Conversation010()
    _subscribed(c)
    c.transfer(SERVER, CH, "d1")
    close = c.ctl(CLIENT, 0, "connection.close", reply_code=200)
    c.ctl(SERVER, 0, "connection.close-ok")
    d, _, r, _ = run(c)
    assert (d[0]["outcome"], d[0]["settled_by_frame_id"]) == ("unsettled_at_close", close["frame_id"])
    assert [(x["request"], x["response"], x["status"]) for x in r if x["channel"] == 0] == [
        ("connection.close", "connection.close-ok", "ok")]


def test_message_credit_per_destination():
    c = Conversation010()
    _subscribed(c)
    c.cmd(CLIENT, CH, "message.set-flow-mode", destination="d1", flow_mode="credit")
    c.cmd(CLIENT, CH, "message.flow", destination="d1", credit_unit="message", credit_value=2)
    c.cmd(CLIENT, CH, "message.flow", destination="d1", credit_unit="byte", credit_value=0xFFFFFFFF)
    c.transfer(SERVER, CH, "d1")
    last = c.transfer(SERVER, CH, "d1")
    c.transfer(CLIENT, CH, "amq.direct", accept_mode="none")  # no credit tracked for it: no row
    over = c.transfer(SERVER, CH, "d1")
    c.cmd(CLIENT, CH, "message.flush", destination="d1")
    c.cmd(CLIENT, CH, "message.stop", destination="d1")
    c.cmd(CLIENT, CH, "message.cancel", destination="d1")
    _, f, *_ = run(c)
    rows = [x for x in f if x["entity"] == "link"]
    assert [(x["event"], x["link_credit"], x["at_limit"]) for x in rows] == [
        ("flow", 0, True), ("credit", 2, False), ("credit", 2, False), ("transfer", 1, False), ("transfer", 0, True),
        ("transfer", -1, True), ("flush", -1, True), ("stop", 0, True), ("close", 0, True)]
    assert rows[0]["reason"] == "credit" and rows[1]["reason"] == "byte_credit_exhausted" and rows[5]["reason"] == "credit_exceeded"
    assert rows[6]["drain"] is True
    assert rows[4]["frame_id"] == last[-1]["frame_id"] and rows[5]["frame_id"] == over[-1]["frame_id"]
    assert {(x["consumer_tag"], x["channel"], x["link_handle"]) for x in rows} == {("d1", CH, None)}
    assert len({x["event_id"] for x in f}) == len(f)


def test_window_mode_credit_comes_back_with_completion():
    c = Conversation010()
    _subscribed(c)
    c.cmd(CLIENT, CH, "message.set-flow-mode", destination="d1", flow_mode="window")
    c.cmd(CLIENT, CH, "message.flow", destination="d1", credit_unit="message", credit_value=1)
    c.cmd(CLIENT, CH, "message.flow", destination="d1", credit_unit="byte", credit_value=100)
    c.transfer(SERVER, CH, "d1", body=b"x" * 10)
    c.completed(CLIENT, CH, [[0, 0]])
    _, f, *_ = run(c)
    rows = [(x["event"], x["link_credit"], x["reason"]) for x in f if x["entity"] == "link"]
    assert rows[-2:] == [("transfer", 0, None), ("completed", 1, None)]


def test_request_response_pairs():
    c = Conversation010()
    c.ctl(SERVER, 0, "connection.start")
    c.ctl(CLIENT, 0, "connection.start-ok")
    c.ctl(SERVER, 0, "connection.tune")
    c.ctl(CLIENT, 0, "connection.tune-ok")
    c.ctl(CLIENT, 0, "connection.open")
    c.ctl(SERVER, 0, "connection.close", reply_code=530)  # open refused
    c.ctl(CLIENT, 2, "session.attach", session_name="busy")
    c.ctl(SERVER, 2, "session.detached", session_name="busy", reply_code=1)
    c.session(CH)
    q = c.cmd(CLIENT, CH, "queue.query", queue="q")[0]  # a result
    c.cmd(CLIENT, CH, "queue.declare", queue="q")  # neither sync nor result: not a request
    s = c.cmd(CLIENT, CH, "exchange.declare", sync=True, frames=2)[0]  # sync: its request starts at its first frame
    c.cmd(CLIENT, CH, "dtx.start")  # a result that never comes
    res = c.cmd(SERVER, CH, "execution.result", referenced_command_id=0)[0]
    c.completed(SERVER, CH, [[0, 2]])
    c.cmd(SERVER, CH, "execution.exception", referenced_command_id=2, reply_code=404)  # after completion: nothing pending
    c.cmd(SERVER, CH, "execution.exception", referenced_command_id=1, reply_code=404)  # the async declare failed
    c.ctl(CLIENT, CH, "session.detach", session_name="s1")
    _, _, r, _ = run(c)
    assert all(tuple(x) == REQUEST_RESPONSE_KEYS and x["dialect"] == "0-10" for x in r)
    got = [(x["channel"], x["request"], x["response"], x["status"], x["reply_code"]) for x in r]
    assert got == [
        (0, "connection.start", "connection.start-ok", "ok", None),
        (0, "connection.tune", "connection.tune-ok", "ok", None),
        (0, "connection.open", "connection.close", "error", 530),
        (2, "session.attach", "session.detached", "error", 1),
        (CH, "session.attach", "session.attached", "ok", None),
        (CH, "queue.query", "execution.result", "ok", None),
        (CH, "exchange.declare", "session.completed", "ok", None),
        (CH, "queue.declare", "execution.exception", "error", 404),
        (CH, "dtx.start", None, "unanswered", None),
        (0, "connection.close", None, "unanswered", None),
        (CH, "session.detach", None, "unanswered", None),
    ]
    by = {x["request"]: x for x in r}
    assert by["queue.query"]["request_frame_id"] == q["frame_id"] and by["queue.query"]["response_frame_id"] == res["frame_id"]
    assert by["exchange.declare"]["request_frame_id"] == s["frame_id"]


_OPS = st.sampled_from(["transfer_explicit", "transfer_none", "multi", "accept", "reject", "release", "completed", "detach",
                        "attach", "close", "header", "body", "flow", "flush", "stop", "sync"])


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(_OPS, st.sampled_from([CLIENT, SERVER]), st.integers(0, 6)), max_size=25),
       codec_ids=st.booleans())
def test_random_orders_never_raise_and_every_transfer_frame_lands_in_one_row(ops, codec_ids):
    c = Conversation010(codec_ids=codec_ids)
    c.session(CH)
    transfer_frames = []
    for op, side, n in ops:
        if op in ("transfer_explicit", "transfer_none", "multi"):
            frames = c.transfer(side, CH, "d", accept_mode="none" if op == "transfer_none" else "explicit",
                                cmd_frames=2 if op == "multi" else 1, body_frames=1 + n % 3)
            transfer_frames += [x["frame_id"] for x in frames]
        elif op in ("accept", "reject", "release"):
            c.settle(side, CH, op, [[n, n + n % 3]])
        elif op == "completed":
            c.completed(side, CH, [[0, n]])
        elif op == "detach":
            c.ctl(side, CH, "session.detach")
        elif op == "attach":
            c.session(CH, client_point=n, server_point=n)
        elif op == "close":
            c.ctl(side, 0, "connection.close", reply_code=200 + n)
        elif op in ("header", "body"):  # stray content
            transfer_frames.append(c.frame(side, op, CH, class_name="message", first_segment=False, last_segment=op == "body",
                                           first_frame=True, last_frame=True)["frame_id"])
        elif op in ("flow", "flush", "stop"):
            c.cmd(side, CH, f"message.{op}", destination="d", credit_unit="message", credit_value=n)
        else:
            c.cmd(side, CH, "execution.sync", sync=True)
    d, f, r, runner = run(c)
    listed = [fid for x in d for fid in x["frame_ids"]]
    assert sorted(listed) == sorted(transfer_frames)
    assert all(x["outcome"] in TRANSFER_0_10.outcomes for x in d)
    assert len({x["delivery_id"] for x in d}) == len(d)
    assert len({x["event_id"] for x in f}) == len(f)
    assert runner.stats["bad_frames"] == 0
