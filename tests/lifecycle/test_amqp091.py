"""0-9-1 lifecycles from hand-made frame rows: publishes, deliveries, flow events, request/response pairs."""

from __future__ import annotations

import json

import pytest

from .conversation import Conversation, by_tag, run


def _conv(dialect="0-9-1") -> Conversation:
    c = Conversation(dialect)
    c.open_channel(1)
    return c


# ---------------------------------------------------------------------------- publishes


def test_confirm_mode_numbers_publishes_and_multiple_acks_settle_every_outstanding_tag_up_to_it():
    c = _conv()
    c.c(1, "confirm.select", args={"nowait": False})
    c.s(1, "confirm.select-ok")
    pubs = [c.publish(1, body=b"m%d" % i) for i in range(5)]
    ack3 = c.s(1, "basic.ack", delivery_tag=3, multiple=True)
    nack5 = c.s(1, "basic.nack", delivery_tag=5, multiple=False, requeue=False)
    d, f, r, _ = run(c)
    rows = by_tag(d, "publish")
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert [rows[t]["outcome"] for t in (1, 2, 3)] == ["confirmed"] * 3
    assert {rows[t]["settled_by_frame_id"] for t in (1, 2, 3)} == {ack3["frame_id"]}
    assert rows[5]["outcome"] == "nacked_by_broker" and rows[5]["settled_by_frame_id"] == nack5["frame_id"]
    assert rows[4]["outcome"] == "open_at_capture_end" and rows[4]["settled_ts_us"] is None
    for t, frames in zip((1, 2, 3, 4, 5), pubs):
        assert rows[t]["frame_ids"] == [x["frame_id"] for x in frames]
        assert rows[t]["settle_mode"] == "confirm"
        assert rows[t]["direction"] == "to_broker"
    assert rows[1]["settle_latency_us"] == ack3["ts_us"] - pubs[0][0]["ts_us"]


def test_ack_with_tag_zero_and_multiple_confirms_everything_outstanding():
    c = _conv()
    c.c(1, "confirm.select")
    for _ in range(3):
        c.publish(1)
    c.s(1, "basic.ack", delivery_tag=0, multiple=True)
    d, *_ = run(c)
    assert [x["outcome"] for x in d] == ["confirmed"] * 3


def test_unconfirmed_publishes_at_channel_close_ok():
    c = _conv()
    c.c(1, "confirm.select")
    c.publish(1)
    c.c(1, "channel.close", reply_code=200)
    ok = c.s(1, "channel.close-ok")
    (pub,), *_ = run(c)
    assert pub["outcome"] == "unconfirmed_at_close" and pub["settled_by_frame_id"] == ok["frame_id"]


def test_return_in_confirm_mode_comes_before_its_ack():
    c = _conv()
    c.c(1, "confirm.select")
    c.publish(1, routing_key="a", mandatory=True)
    ret = c.basic_return(1, routing_key="a")
    c.s(1, "basic.ack", delivery_tag=1, multiple=False)
    c.publish(1, routing_key="b", mandatory=True)
    c.s(1, "basic.ack", delivery_tag=2, multiple=False)
    d, f, *_ = run(c)
    rows = by_tag(d)
    assert rows[1]["outcome"] == "returned" and rows[1]["settled_by_frame_id"] == ret[0]["frame_id"]
    assert rows[2]["outcome"] == "confirmed"
    assert not f  # nothing unknown
    # the returned message's own frames belong to no delivery
    assert not {x["frame_id"] for x in ret} & {fid for x in d for fid in x["frame_ids"]}


def test_mandatory_returns_match_by_exchange_and_routing_key_in_publish_order():
    c = _conv()
    p1 = c.publish(1, exchange="amq.direct", routing_key="nowhere-1", mandatory=True)
    p2 = c.publish(1, exchange="amq.direct", routing_key="routable", mandatory=True)
    r1 = c.basic_return(1, exchange="amq.direct", routing_key="nowhere-1")
    p3 = c.publish(1, exchange="amq.direct", routing_key="nowhere-2", mandatory=True)
    p4 = c.publish(1, exchange="amq.direct", routing_key="later", mandatory=True)
    r2 = c.basic_return(1, exchange="amq.direct", routing_key="nowhere-2")
    d, *_ = run(c)
    rows = {x["frame_ids"][0]: x for x in d}
    assert rows[p1[0]["frame_id"]]["outcome"] == "returned"
    assert rows[p1[0]["frame_id"]]["settled_by_frame_id"] == r1[0]["frame_id"]
    # a later publish was returned, so the routable one before it was routed
    assert rows[p2[0]["frame_id"]]["outcome"] == "sent"
    assert rows[p2[0]["frame_id"]]["settled_ts_us"] == rows[p2[0]["frame_id"]]["sent_ts_us"]
    assert rows[p3[0]["frame_id"]]["outcome"] == "returned"
    assert rows[p3[0]["frame_id"]]["settled_by_frame_id"] == r2[0]["frame_id"]
    assert rows[p4[0]["frame_id"]]["outcome"] == "sent"  # the capture ended without its return
    assert {x["settle_mode"] for x in d} == {"no_confirm"}


def test_pending_returns_are_bounded():
    c = _conv()
    for i in range(5):
        c.publish(1, routing_key=f"k{i}", mandatory=True)
    d, *_ = run(c, max_pending_returns=2)
    flagged = [x for x in d if x["flags"] and "return_window_exceeded" in x["flags"]]
    assert len(flagged) == 3 and all(x["outcome"] == "sent" for x in d)


def test_publishes_without_confirms_are_sent_and_settled_on_send():
    c = _conv()
    frames = c.publish(1, body=b"x" * 10000, props={"message_id": "id-1", "correlation_id": "c-1", "content_type": "text/plain",
                                                  "delivery_mode": 2, "priority": 5}, frame_max=4096)
    (row,), *_ = run(c)
    assert row["outcome"] == "sent" and row["settle_mode"] == "no_confirm"
    assert row["settled_by_frame_id"] == frames[0]["frame_id"] and row["settle_latency_us"] == 0
    assert row["frame_ids"] == [f["frame_id"] for f in frames] and len(frames) == 5  # method, header, 3 bodies
    assert (row["message_id"], row["correlation_id"], row["content_type"], row["delivery_mode"], row["priority"]) == (
        "id-1", "c-1", "text/plain", 2, 5)
    assert row["body_size"] == 10000 and row["body_sha256"] == frames[-1]["body_sha256"]
    assert row["exchange"] == "" and row["routing_key"] == "q"


def test_transactional_publishes_commit_and_roll_back():
    c = _conv()
    c.c(1, "tx.select")
    c.s(1, "tx.select-ok")
    c.publish(1)
    c.publish(1)
    c.c(1, "tx.commit")
    commit_ok = c.s(1, "tx.commit-ok")
    c.publish(1)
    c.c(1, "tx.rollback")
    rollback_ok = c.s(1, "tx.rollback-ok")
    c.publish(1)  # in a transaction the channel closes with
    c.c(1, "channel.close")
    c.s(1, "channel.close-ok")
    d, *_ = run(c)
    assert [x["outcome"] for x in d] == ["committed", "committed", "rolled_back", "rolled_back"]
    assert d[0]["settled_by_frame_id"] == commit_ok["frame_id"] and d[2]["settled_by_frame_id"] == rollback_ok["frame_id"]
    assert {x["settle_mode"] for x in d} == {"tx"}


def test_header_without_its_publish_is_a_flagged_publish():
    c = _conv()
    c.c(1, "confirm.select")
    frames = c.publish(1)
    c.rows.remove(frames[0])  # the capture starts after the method frame
    (row,), *_ = run(c)
    assert row["flags"] == ["method_not_seen"] and row["frame_ids"] == [f["frame_id"] for f in frames[1:]]


def test_an_unfinished_message_is_flagged_when_the_channel_moves_on():
    c = _conv()
    frames = c.publish(1, body=b"x" * 9000, frame_max=4096)
    c.rows.remove(frames[-1])  # its last body frame never came
    c.c(1, "basic.qos", prefetch_count=1)
    (row,), *_ = run(c)
    assert row["flags"] == ["content_incomplete"] and row["body_sha256"] is None
    assert row["frame_ids"] == [f["frame_id"] for f in frames[:-1]]


# ---------------------------------------------------------------------------- deliveries


def test_consumer_acks_single_and_multiple():
    c = _conv()
    c.consume(1, "ct")
    for t in range(1, 6):
        c.deliver(1, t)
    a2 = c.c(1, "basic.ack", delivery_tag=2, multiple=False)
    a4 = c.c(1, "basic.ack", delivery_tag=4, multiple=True)
    d, f, r, _ = run(c)
    rows = by_tag(d)
    assert {t: rows[t]["outcome"] for t in rows} == {1: "acked", 2: "acked", 3: "acked", 4: "acked", 5: "open_at_capture_end"}
    assert rows[2]["settled_by_frame_id"] == a2["frame_id"] and rows[1]["settled_by_frame_id"] == a4["frame_id"]
    assert rows[1]["consumer_tag"] == "ct" and rows[1]["queue"] == "q" and rows[1]["settle_mode"] == "manual_ack"
    chan = [x for x in f if x["entity"] == "channel"]
    assert [x["in_flight"] for x in chan] == [1, 2, 3, 4, 5, 4, 1]
    assert [x["event"] for x in chan] == ["deliver"] * 5 + ["settle"] * 2
    cons = [x for x in f if x["entity"] == "consumer"]
    assert [x["in_flight"] for x in cons] == [1, 2, 3, 4, 5, 4, 1] and {x["consumer_tag"] for x in cons} == {"ct"}
    assert len({x["event_id"] for x in f}) == len(f)


@pytest.mark.parametrize(
    "method,requeue,outcome",
    [("basic.nack", True, "nacked_requeue"), ("basic.nack", False, "nacked_drop"),
     ("basic.reject", True, "rejected_requeue"), ("basic.reject", False, "rejected_drop")],
)
def test_nack_and_reject(method, requeue, outcome):
    c = _conv()
    c.consume(1)
    c.deliver(1, 1)
    c.deliver(1, 2)
    c.c(1, method, delivery_tag=2, multiple=method == "basic.nack", requeue=requeue)
    d, *_ = run(c)
    rows = by_tag(d)
    assert rows[2]["outcome"] == outcome
    assert rows[1]["outcome"] == (outcome if method == "basic.nack" else "open_at_capture_end")


def test_redelivered_flag_is_kept():
    c = _conv()
    c.consume(1)
    c.deliver(1, 1, redelivered=True)
    c.c(1, "basic.ack", delivery_tag=1)
    (row,), *_ = run(c)
    assert row["redelivered"] is True and row["outcome"] == "acked"


def test_no_ack_consumers_and_gets_are_settled_on_send():
    c = _conv()
    c.consume(1, "auto", no_ack=True)
    dframes = c.deliver(1, 1, consumer_tag="auto")
    c.c(1, "basic.get", queue="g", no_ack=True)
    c.get_ok(1, 2)
    c.c(1, "basic.get", queue="g", no_ack=False)
    c.get_ok(1, 3)
    c.c(1, "basic.get", queue="g", no_ack=False)
    c.s(1, "basic.get-empty")
    d, f, r, _ = run(c)
    rows = by_tag(d)
    assert rows[1]["outcome"] == "auto_ack" and rows[1]["settled_by_frame_id"] == dframes[0]["frame_id"]
    assert rows[2]["outcome"] == "auto_ack" and rows[2]["queue"] == "g" and rows[2]["method"] == "get-ok"
    assert rows[3]["outcome"] == "open_at_capture_end" and rows[3]["settle_mode"] == "manual_ack"
    assert [x["in_flight"] for x in f] == [1]  # only the manual get changed the count
    gets = [x for x in r if x["request"] == "basic.get"]
    assert [x["response"] for x in gets] == ["basic.get-ok", "basic.get-ok", "basic.get-empty"]


def test_unacked_at_channel_close_are_requeued_and_the_count_drops():
    c = _conv()
    c.consume(1)
    c.deliver(1, 1)
    c.deliver(1, 2)
    c.c(1, "channel.close", reply_code=200)
    late = c.deliver(1, 3)  # in flight when the client closed
    ok = c.s(1, "channel.close-ok")
    d, f, *_ = run(c)
    assert [x["outcome"] for x in d] == ["requeued_on_close"] * 3
    assert {x["settled_by_frame_id"] for x in d} == {ok["frame_id"]}
    assert f[-1]["event"] == "close" and f[-1]["in_flight"] == 0 and late[0]["frame_id"] in d[2]["frame_ids"]


def test_connection_close_without_close_ok_ends_what_is_open():
    c = _conv()
    c.consume(1)
    c.deliver(1, 1)
    close = c.s(0, "connection.close", reply_code=320)
    d, f, r, _ = run(c)
    assert d[0]["outcome"] == "requeued_on_close" and d[0]["settled_by_frame_id"] == close["frame_id"]
    assert [x["status"] for x in r if x["request"] == "connection.close"] == ["unanswered"]


def test_recover_requeues_every_unacked_message():
    c = _conv()
    c.consume(1)
    c.deliver(1, 1)
    c.deliver(1, 2)
    rec = c.c(1, "basic.recover", requeue=True)
    c.s(1, "basic.recover-ok")
    d, f, r, _ = run(c)
    assert [x["outcome"] for x in d] == ["recovered", "recovered"] and d[0]["settled_by_frame_id"] == rec["frame_id"]
    assert f[-1]["in_flight"] == 0
    assert [(x["request"], x["response"]) for x in r if x["request"] == "basic.recover"] == [("basic.recover", "basic.recover-ok")]


def test_acks_in_a_transaction_apply_at_commit_and_roll_back():
    c = _conv()
    c.c(1, "tx.select")
    c.s(1, "tx.select-ok")
    c.consume(1)
    c.deliver(1, 1)
    c.deliver(1, 2)
    c.c(1, "basic.ack", delivery_tag=1)
    c.c(1, "tx.rollback")
    c.s(1, "tx.rollback-ok")
    c.c(1, "basic.ack", delivery_tag=2, multiple=True)
    c.c(1, "tx.commit")
    ok = c.s(1, "tx.commit-ok")
    d, f, *_ = run(c)
    assert [x["outcome"] for x in d] == ["acked", "acked"] and {x["settled_by_frame_id"] for x in d} == {ok["frame_id"]}
    assert d[0]["flags"] == ["settle_rolled_back"] and d[0]["settle_mode"] == "tx"
    chan = [x for x in f if x["entity"] == "channel"]
    assert [x["in_flight"] for x in chan] == [1, 2, 0]  # still unacked until the commit


def test_unknown_orders_are_flagged_not_raised():
    c = _conv()
    c.consume(1)
    c.c(1, "basic.ack", delivery_tag=7)  # never delivered
    c.s(1, "basic.ack", delivery_tag=1)  # a confirm on a channel without confirms
    c.basic_return(1, routing_key="nothing-published")
    c.deliver(1, 1)
    c.deliver(1, 1)  # duplicate tag
    c.c(1, "channel.close")
    c.s(1, "channel.close-ok")
    c.c(1, "basic.ack", delivery_tag=1)  # on a closed channel
    c.s(7, "basic.deliver", delivery_tag=1, consumer_tag="ghost")  # a channel never opened, a consumer never seen
    d, f, *_ = run(c)
    reasons = [x["reason"] for x in f if x["reason"]]
    assert reasons == ["ack_of_unknown_tag", "confirm_ack_of_unknown_tag", "return_of_unknown_publish",
                       "ack_of_unknown_tag,frame_on_closed_channel"]
    dup = [x for x in d if x["delivery_tag"] == 1 and x["channel"] == 1]
    assert len(dup) == 2 and all("duplicate_tag" in x["flags"] for x in dup)
    ghost = [x for x in d if x["channel"] == 7]
    assert ghost[0]["flags"] == ["consumer_not_seen", "content_incomplete"]


# ---------------------------------------------------------------------------- flow events


def test_prefetch_in_flight_and_at_limit():
    c = _conv()
    q = c.c(1, "basic.qos", prefetch_count=2, prefetch_size=0, global_qos=False)
    c.s(1, "basic.qos-ok")
    c.consume(1, "a")
    c.c(1, "basic.qos", prefetch_count=5, global_qos=True)
    c.s(1, "basic.qos-ok")
    c.deliver(1, 1, consumer_tag="a")
    c.deliver(1, 2, consumer_tag="a")
    _, f, *_ = run(c)
    assert f[0]["event"] == "qos" and f[0]["frame_id"] == q["frame_id"] and f[0]["prefetch_count"] == 2
    last_chan = [x for x in f if x["entity"] == "channel"][-1]
    last_cons = [x for x in f if x["entity"] == "consumer"][-1]
    assert (last_chan["prefetch_count"], last_chan["in_flight"], last_chan["at_limit"]) == (5, 2, False)
    assert (last_cons["prefetch_count"], last_cons["in_flight"], last_cons["at_limit"]) == (2, 2, True)


def test_channel_flow_and_connection_blocked():
    c = _conv()
    c.s(1, "channel.flow", active=False)
    ok = c.c(1, "channel.flow-ok", active=False)
    c.s(1, "channel.flow", active=True)
    b = c.s(0, "connection.blocked", reason="low on memory")
    c.s(0, "connection.unblocked")
    _, f, r, _ = run(c)
    # the state changes at the flow-ok that confirms it (0-9-1 spec, channel.flow-ok active: "1 means the peer will
    # start sending or continue to send content frames; 0 means it will not"): the last request, never answered,
    # changes nothing (RabbitMQ refuses active=false with connection.close 540: tests/data/broker/channel_flow.pcap)
    assert [(x["entity"], x["event"], x["flow_active"], x["blocked"]) for x in f] == [
        ("channel", "flow", False, None),
        ("connection", "blocked", None, True), ("connection", "unblocked", None, False)]
    assert f[0]["event_id"].startswith(ok["frame_id"])
    assert f[1]["reason"] == "low on memory" and f[1]["event_id"] == f"{b['frame_id']}-connection"
    assert [(x["request"], x["status"]) for x in r if x["request"] == "channel.flow"] == [("channel.flow", "ok"), ("channel.flow", "unanswered")]


# ---------------------------------------------------------------------------- request / response


def test_request_response_pairs_per_channel_with_latency():
    c = Conversation()
    start = c.s(0, "connection.start")
    start_ok = c.c(0, "connection.start-ok")
    c.s(0, "connection.tune")
    c.c(0, "connection.tune-ok")
    c.c(0, "connection.open")
    c.s(0, "connection.open-ok")
    c.open_channel(1)
    c.open_channel(2)
    d1 = c.c(1, "queue.declare", args={"queue": "a", "no_wait": False})
    d2 = c.c(2, "queue.declare", args={"queue": "b", "no_wait": False})
    c.c(2, "queue.declare", args={"queue": "c", "no_wait": True})  # nowait: no answer expected, not recorded
    ok2 = c.s(2, "queue.declare-ok")
    ok1 = c.s(1, "queue.declare-ok")
    c.c(1, "exchange.declare", args={"exchange": "x", "no_wait": False})
    _, _, r, _ = run(c)
    by = {x["request_frame_id"]: x for x in r}
    assert by[start["frame_id"]]["response_frame_id"] == start_ok["frame_id"]
    assert by[start["frame_id"]]["latency_us"] == start_ok["ts_us"] - start["ts_us"]
    assert by[d1["frame_id"]]["response_frame_id"] == ok1["frame_id"] and by[d1["frame_id"]]["channel"] == 1
    assert by[d2["frame_id"]]["response_frame_id"] == ok2["frame_id"] and by[d2["frame_id"]]["channel"] == 2
    assert [x["request"] for x in r if x["status"] == "unanswered"] == ["exchange.declare"]
    assert len(r) == 8  # start, tune, open, 2 channel.open, 2 declares, exchange.declare


def test_a_broker_channel_close_answers_the_pending_request_with_its_reply_code():
    c = _conv()
    c.c(1, "queue.bind", args={"no_wait": False})
    decl = c.c(1, "queue.declare", args={"no_wait": False})
    c.s(1, "queue.bind-ok")
    close = c.s(1, "channel.close", reply_code=406, args={"reply_code": 406, "class_id": 50, "method_id": 10}, class_id=20, method_id=40)
    close_ok = c.c(1, "channel.close-ok")
    _, _, r, _ = run(c)
    by = {x["request_frame_id"]: x for x in r}
    assert by[decl["frame_id"]]["status"] == "error" and by[decl["frame_id"]]["reply_code"] == 406
    assert by[decl["frame_id"]]["response"] == "channel.close" and by[decl["frame_id"]]["response_frame_id"] == close["frame_id"]
    assert by[close["frame_id"]]["response_frame_id"] == close_ok["frame_id"] and by[close["frame_id"]]["status"] == "ok"


def test_a_connection_close_names_the_failing_method_across_channels():
    c = _conv()
    c.open_channel(2)
    a = c.c(1, "queue.declare", args={"no_wait": False}, class_id=50, method_id=10)
    b = c.c(2, "exchange.declare", args={"no_wait": False}, class_id=40, method_id=10)
    c.s(0, "connection.close", reply_code=503, args={"reply_code": 503, "class_id": 40, "method_id": 10})
    c.c(0, "connection.close-ok")
    _, _, r, _ = run(c)
    by = {x["request_frame_id"]: x for x in r}
    assert (by[b["frame_id"]]["status"], by[b["frame_id"]]["reply_code"]) == ("error", 503)
    assert by[a["frame_id"]]["status"] == "unanswered"


@pytest.mark.parametrize("dialect", ["0-8", "0-9", "0-9-1"])
def test_every_dialect_of_the_family_uses_its_own_tables(dialect):
    c = _conv(dialect)
    c.consume(1)
    c.deliver(1, 1)
    c.c(1, "basic.ack", delivery_tag=1)
    c.c(1, "basic.qos", prefetch_count=1)
    c.s(1, "basic.qos-ok")
    d, _, r, _ = run(c)
    assert d[0]["outcome"] == "acked" and d[0]["dialect"] == dialect
    assert {x["request"] for x in r} == {"channel.open", "basic.consume", "basic.qos"} and {x["status"] for x in r} == {"ok"}


def test_rows_have_exactly_the_contract_keys():
    from amqplens.lifecycle import DELIVERY_KEYS, FLOW_EVENT_KEYS, REQUEST_RESPONSE_KEYS

    c = _conv()
    c.c(1, "basic.qos", prefetch_count=1)
    c.publish(1)
    d, f, r, _ = run(c)
    assert all(tuple(x) == DELIVERY_KEYS for x in d)
    assert all(tuple(x) == FLOW_EVENT_KEYS for x in f)
    assert all(tuple(x) == REQUEST_RESPONSE_KEYS for x in r)
    json.dumps(d + f + r)  # plain values only


def test_no_wait_is_the_methods_own_bit_not_a_key_of_its_arguments_table():
    """A declare whose x-arguments table holds a key named no_wait (true) still waits for its answer: only the
    method's own no-wait bit says no answer comes (a text search of arguments_json once took the table's key)."""
    c = _conv()
    c.open_channel(1)
    waits = c.c(1, "queue.declare", args={"queue": "a", "no_wait": False, "arguments": {"no_wait": True}})
    c.c(1, "queue.declare", args={"queue": "b", "no_wait": True, "arguments": {"no_wait": False}})
    ok = c.s(1, "queue.declare-ok")
    _, _, r, _ = run(c)
    declares = [x for x in r if x["request"] == "queue.declare"]
    assert [(x["request_frame_id"], x["response_frame_id"]) for x in declares] == [(waits["frame_id"], ok["frame_id"])]
