"""1.0 lifecycles from hand-made frame rows: transfers, dispositions, link credit, session windows, pairs."""

from __future__ import annotations

import pytest

from amqplens.lifecycle.amqp10 import serial_diff

from .conversation import CLIENT, SERVER, Conversation, run

CLIENT_CH, SERVER_CH = 3, 7  # each side numbers its own channels


def _link(c: Conversation, role: str = "sender", snd: str = "unsettled", rcv: str = "first", handle: int = 0,
          peer_handle: int = 5, initial: int = 0) -> None:
    """A session (client channel 3, broker channel 7) and one link attached by the client."""
    c.perf(CLIENT, CLIENT_CH, "begin", args={"next_outgoing_id": 0, "incoming_window": 100, "outgoing_window": 100},
           next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    c.perf(SERVER, SERVER_CH, "begin", args={"remote_channel": CLIENT_CH, "next_outgoing_id": 0, "incoming_window": 10,
                                               "outgoing_window": 100}, next_outgoing_id=0, incoming_window=10, outgoing_window=100)
    peer_role = "receiver" if role == "sender" else "sender"
    c.perf(CLIENT, CLIENT_CH, "attach", handle=handle, role=role, link_name="L", snd_settle_mode=snd, rcv_settle_mode=rcv,
           target_address="/queue/q" if role == "sender" else None, source_address="/queue/q" if role == "receiver" else None,
           delivery_count=initial if role == "sender" else None)
    c.perf(SERVER, SERVER_CH, "attach", handle=peer_handle, role=peer_role, link_name="L", snd_settle_mode=snd, rcv_settle_mode=rcv,
           target_address="/queue/q" if role == "sender" else None, source_address="/queue/q" if role == "receiver" else None,
           delivery_count=initial if peer_role == "sender" else None)


def _grant(c: Conversation, credit: int, delivery_count: int | None = 0, drain: bool = False, handle: int = 5, **fields) -> dict:
    """The broker (receiver) grants credit to the client's sender link."""
    return c.perf(SERVER, SERVER_CH, "flow", handle=handle, link_credit=credit, delivery_count=delivery_count, drain=drain,
                  next_incoming_id=fields.pop("next_incoming_id", 0), incoming_window=fields.pop("incoming_window", 10),
                  next_outgoing_id=0, outgoing_window=100, **fields)


def test_serial_numbers_wrap():
    assert serial_diff(0, (1 << 32) - 1) == 1
    assert serial_diff(5, 3) == 2 and serial_diff(3, 5) == -2


def test_a_multi_frame_transfer_is_one_delivery_listing_all_its_frames():
    c = Conversation("1.0")
    _link(c)
    _grant(c, 10)
    t1 = c.transfer(CLIENT, CLIENT_CH, 0, 0, more=True, delivery_tag_bin=b"t0")
    t2 = c.transfer(CLIENT, CLIENT_CH, 0, None, more=True)  # continuations may omit the id
    t3 = c.transfer(CLIENT, CLIENT_CH, 0, 0, more=False, body=b"whole", props={"header": {"durable": True, "priority": 7},
                    "properties": {"message_id": "m-1", "correlation_id": "c-1", "content_type": "text/plain"}})
    disp = c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=0, settled=True, state="accepted")
    d, f, r, _ = run(c)
    (row,) = d
    assert row["frame_ids"] == [t1["frame_id"], t2["frame_id"], t3["frame_id"]]
    assert row["outcome"] == "accepted" and row["settled_by_frame_id"] == disp["frame_id"]
    assert (row["method"], row["direction"], row["channel"], row["link_handle"], row["link_name"], row["transfer_id"]) == (
        "transfer", "to_broker", CLIENT_CH, 0, "L", 0)
    assert row["delivery_tag_bin"] == b"t0" and row["queue"] == "/queue/q" and row["settle_mode"] == "unsettled/first"
    assert (row["message_id"], row["correlation_id"], row["content_type"], row["delivery_mode"], row["priority"]) == (
        "m-1", "c-1", "text/plain", 2, 7)
    assert row["body_size"] == 5 and row["body_sha256"] == t3["body_sha256"] and row["redelivered"] is False
    link_rows = [x for x in f if x["entity"] == "link"]
    assert [x["event"] for x in link_rows] == ["credit", "transfer"]  # credit is per delivery, not per frame
    assert link_rows[-1]["link_credit"] == 9 and link_rows[-1]["link_handle"] == 5  # the receiver's handle
    session_rows = [x for x in f if x["entity"] == "session" and x["event"] == "transfer"]
    assert [x["remote_incoming_window"] for x in session_rows] == [9, 8, 7]  # windows count frames
    assert {x["channel"] for x in f} == {CLIENT_CH}


def test_dispositions_settle_ranges_and_presettled_transfers_settle_on_send():
    c = Conversation("1.0")
    _link(c, snd="mixed")
    _grant(c, 10)
    for i in range(4):
        c.transfer(CLIENT, CLIENT_CH, 0, i)
    pre = c.transfer(CLIENT, CLIENT_CH, 0, 4, settled=True)
    c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=0, last=2, settled=True, state="accepted")
    c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=3, last=4, settled=True, state="released")
    d, f, *_ = run(c)
    out = {x["transfer_id"]: x for x in d}
    assert [out[i]["outcome"] for i in range(5)] == ["accepted"] * 3 + ["released", "presettled"]
    assert out[4]["settled_by_frame_id"] == pre["frame_id"] and out[4]["settle_latency_us"] == 0
    assert not [x for x in f if x["reason"]]  # a range covering an already settled id is not an anomaly


@pytest.mark.parametrize("state", ["accepted", "rejected", "released", "modified", "received", "transactional", "declared"])
def test_every_outcome(state):
    c = Conversation("1.0")
    _link(c)
    _grant(c, 10)
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=0, settled=True, state=state)
    (row,), *_ = run(c)
    assert row["outcome"] == state


def test_receiver_settle_mode_second_states_first_then_the_sender_settles():
    c = Conversation("1.0")
    _link(c, rcv="second")
    _grant(c, 10)
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=0, settled=False, state="accepted")
    settle = c.perf(CLIENT, CLIENT_CH, "disposition", role="sender", first=0, settled=True)
    (row,), *_ = run(c)
    assert (row["outcome"], row["settled_by_frame_id"], row["settle_mode"]) == ("accepted", settle["frame_id"], "unsettled/second")


def test_deliveries_from_the_broker_settled_by_the_client_on_a_receiving_link():
    c = Conversation("1.0")
    _link(c, role="receiver", snd="unsettled", handle=1, peer_handle=9)
    grant = c.perf(CLIENT, CLIENT_CH, "flow", handle=1, link_credit=2, delivery_count=0, next_incoming_id=0,
                   incoming_window=100, next_outgoing_id=0, outgoing_window=100)
    t0 = c.transfer(SERVER, SERVER_CH, 9, 0)
    t1 = c.transfer(SERVER, SERVER_CH, 9, 1, props={"header": {"first_acquirer": False}})
    more = c.perf(CLIENT, CLIENT_CH, "flow", handle=1, link_credit=3, delivery_count=2, next_incoming_id=2,
                  incoming_window=100, next_outgoing_id=0, outgoing_window=100)
    c.perf(CLIENT, CLIENT_CH, "disposition", role="receiver", first=0, last=1, settled=True, state="accepted")
    d, f, *_ = run(c)
    assert [(x["direction"], x["outcome"], x["link_handle"], x["queue"]) for x in d] == [
        ("from_broker", "accepted", 9, "/queue/q")] * 2
    assert [x["redelivered"] for x in d] == [None, True]  # no header section: unknown
    links = [x for x in f if x["entity"] == "link"]
    assert [(x["frame_id"], x["event"], x["link_credit"], x["delivery_count"], x["at_limit"]) for x in links] == [
        (grant["frame_id"], "credit", 2, 0, False),
        (t0["frame_id"], "transfer", 1, 1, False),
        (t1["frame_id"], "transfer", 0, 2, True),  # credit starvation starts ...
        (more["frame_id"], "credit", 3, 2, False),  # ... and ends with the next grant
    ]
    assert {x["link_handle"] for x in links} == {1}  # the receiver's numbering


def test_credit_granted_with_an_old_delivery_count_and_a_drain():
    c = Conversation("1.0")
    _link(c, initial=10)
    _grant(c, 3, delivery_count=None)  # the receiver has not heard from the sender: initial count
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    c.transfer(CLIENT, CLIENT_CH, 0, 1)
    _grant(c, 3, delivery_count=10, drain=True)  # stale: sent before it saw the two transfers
    echo = c.perf(CLIENT, CLIENT_CH, "flow", handle=0, link_credit=0, delivery_count=13, drain=True,
                  next_incoming_id=0, incoming_window=100, next_outgoing_id=2, outgoing_window=100)
    _, f, *_ = run(c)
    links = [(x["event"], x["link_credit"], x["delivery_count"], x["drain"]) for x in f if x["entity"] == "link"]
    assert links == [("credit", 3, 10, False), ("transfer", 2, 11, False), ("transfer", 1, 12, False),
                     ("credit", 1, 12, True), ("flow", 0, 13, True)]
    assert f[-1]["frame_id"] == echo["frame_id"] and f[-1]["at_limit"] is True


def test_session_windows_follow_section_2_5_6():
    c = Conversation("1.0")
    _link(c)
    _grant(c, 100, next_incoming_id=0, incoming_window=2)
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    c.transfer(CLIENT, CLIENT_CH, 0, 1)
    reopen = _grant(c, 100, next_incoming_id=2, incoming_window=2)
    _, f, *_ = run(c)
    toward_broker = [(x["event"], x["incoming_window"], x["remote_incoming_window"], x["at_limit"]) for x in f
                     if x["entity"] == "session" and x["event"] in ("transfer", "window") and x["frame_id"] != f[0]["frame_id"]]
    # begin from the broker, a flow from the broker, two transfers to it, its next flow
    assert toward_broker[-4:] == [("window", 2, 2, False), ("transfer", 2, 1, False), ("transfer", 2, 0, True), ("window", 2, 2, False)]
    assert f[-2]["frame_id"] == reopen["frame_id"]


@pytest.mark.parametrize("window", [(1 << 31) - 1, (1 << 31), (1 << 32) - 1])
def test_windows_and_credit_of_2_31_and_more_do_not_wrap(window):
    """Bad input tried: windows and credit of 2^31 - 1, 2^31 and 2^32 - 1 (the uint maximum, which some peers send
    as "unlimited"), with the sender's ids about to wrap. §2.5.6 and §2.6.7 in plain integers: the announced value
    less the transfers the peer had not yet seen."""
    c = Conversation("1.0")
    _link(c, initial=(1 << 32) - 1)
    _grant(c, window, delivery_count=(1 << 32) - 1, next_incoming_id=0, incoming_window=window)
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    c.transfer(CLIENT, CLIENT_CH, 0, 1)
    _grant(c, window, delivery_count=(1 << 32) - 1, next_incoming_id=1, incoming_window=window)  # saw only the first
    _, f, *_ = run(c)
    sessions = [(x["event"], x["remote_incoming_window"]) for x in f if x["entity"] == "session" and x["event"] in ("transfer", "window")]
    assert sessions[-4:] == [("window", window), ("transfer", window - 1), ("transfer", window - 2), ("window", window - 1)]
    links = [(x["event"], x["link_credit"], x["at_limit"]) for x in f if x["entity"] == "link"]
    assert links[-4:] == [("credit", window, False), ("transfer", window - 1, False), ("transfer", window - 2, False),
                          ("credit", window - 2, False)]
    assert min(x["remote_incoming_window"] for x in f if x["remote_incoming_window"] is not None) >= 0


def test_unsettled_at_detach_end_close_and_capture_end():
    c = Conversation("1.0")
    _link(c)
    _grant(c, 10)
    c.transfer(CLIENT, CLIENT_CH, 0, 0)
    detach = c.perf(CLIENT, CLIENT_CH, "detach", handle=0, args={"handle": 0, "closed": True})
    c.perf(SERVER, SERVER_CH, "detach", handle=5, args={"handle": 5, "closed": True}, error_condition="amqp:internal-error")
    c.perf(CLIENT, CLIENT_CH, "attach", handle=0, role="sender", link_name="L2", snd_settle_mode="unsettled")
    c.perf(SERVER, SERVER_CH, "attach", handle=5, role="receiver", link_name="L2", rcv_settle_mode="first")
    c.transfer(CLIENT, CLIENT_CH, 0, 1)
    d, f, r, _ = run(c)
    assert d[0]["outcome"] == "unsettled_at_close" and d[0]["settled_by_frame_id"] == detach["frame_id"]
    assert d[1]["outcome"] == "open_at_capture_end" and d[1]["settled_ts_us"] is None and d[1]["link_name"] == "L2"
    det = [x for x in r if x["request"] == "detach"]
    assert [(x["status"], x["error_condition"]) for x in det] == [("error", "amqp:internal-error")]
    assert [x["status"] for x in r if x["request"] == "attach"] == ["ok", "ok"]


def test_aborted_and_unknown_dispositions():
    c = Conversation("1.0")
    _link(c)
    _grant(c, 10)
    c.transfer(CLIENT, CLIENT_CH, 0, 0, more=True)
    c.transfer(CLIENT, CLIENT_CH, 0, 0, more=True, aborted=True)
    bogus = c.perf(SERVER, SERVER_CH, "disposition", role="receiver", first=40, last=41, settled=True, state="accepted")
    c.perf(CLIENT, CLIENT_CH, "end")
    c.perf(SERVER, SERVER_CH, "end")
    d, f, r, _ = run(c)
    assert d[0]["outcome"] == "aborted" and len(d[0]["frame_ids"]) == 2
    flagged = [x for x in f if x["reason"]]
    assert [(x["frame_id"], x["entity"], x["reason"]) for x in flagged] == [(bogus["frame_id"], "session", "disposition_of_unknown_id")]
    assert [(x["request"], x["response"], x["status"]) for x in r if x["request"] == "end"] == [("end", "end", "ok")]


def test_frames_without_begin_or_attach_adopt_a_session_and_link():
    c = Conversation("1.0")
    c.transfer(SERVER, 0, 2, 17)
    c.perf(CLIENT, 0, "disposition", role="receiver", first=17, settled=True, state="accepted")
    orphan = c.transfer(SERVER, 0, 2, None)  # a continuation whose first frame the capture missed
    (a, b), f, r, _ = run(c)
    assert a["outcome"] == "accepted" and a["flags"] == ["attach_not_seen"] and a["settle_mode"] is None
    assert b["flags"] == ["attach_not_seen", "orphan_continuation"] and b["frame_ids"] == [orphan["frame_id"]]
    assert b["outcome"] == "open_at_capture_end"


def test_open_begin_close_pairs():
    c = Conversation("1.0")
    o = c.perf(CLIENT, 0, "open")
    o2 = c.perf(SERVER, 0, "open")
    _link(c)
    c.perf(CLIENT, 0, "close")
    close = c.perf(SERVER, 0, "close", error_condition="amqp:connection:forced")
    _, _, r, _ = run(c)
    pairs = [(x["request"], x["response"], x["status"], x["error_condition"]) for x in r]
    assert pairs == [("open", "open", "ok", None), ("begin", "begin", "ok", None), ("attach", "attach", "ok", None),
                     ("close", "close", "error", "amqp:connection:forced")]
    assert r[0]["response_frame_id"] == o2["frame_id"] and r[0]["request_frame_id"] == o["frame_id"]
    assert r[-1]["response_frame_id"] == close["frame_id"] and r[1]["channel"] == CLIENT_CH


def test_two_live_sessions_of_one_channel_number_close_with_one_row_per_key():
    """The client begins a session on its channel 0 (the broker answers on 5); the broker begins one on its channel 0
    (the client answers on 1): two live sessions whose channel is 0, each with a link the client sends on and the
    broker's handle 0 receives (key ``0-s0``). At the close each has a delivery unsettled: one ``close`` row for the
    key, not two rows with one event_id."""
    c = Conversation("1.0")
    c.perf(CLIENT, 0, "begin", next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    c.perf(SERVER, 5, "begin", args={"remote_channel": 0}, next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    c.perf(SERVER, 0, "begin", next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    c.perf(CLIENT, 1, "begin", args={"remote_channel": 0}, next_outgoing_id=0, incoming_window=100, outgoing_window=100)
    for client_ch, server_ch in ((0, 5), (1, 0)):
        c.perf(CLIENT, client_ch, "attach", handle=0, role="sender", link_name=f"L{client_ch}", delivery_count=0)
        c.perf(SERVER, server_ch, "attach", handle=0, role="receiver", link_name=f"L{client_ch}")
        c.perf(SERVER, server_ch, "flow", handle=0, link_credit=5, delivery_count=0, incoming_window=100,
               next_incoming_id=0, next_outgoing_id=0, outgoing_window=100)
        c.transfer(CLIENT, client_ch, 0, 0)
    close = c.perf(CLIENT, 0, "close")
    d, f, *_ = run(c)
    assert sorted(x["outcome"] for x in d) == ["unsettled_at_close"] * 2
    assert len({x["event_id"] for x in f}) == len(f)
    assert [x["event_id"] for x in f if x["event"] == "close"] == [f"{close['frame_id']}-link-0-s0"]
