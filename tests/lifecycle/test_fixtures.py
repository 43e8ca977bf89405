"""The real-broker fixtures: lifecycle counts against what the clients and the broker reported at the time.

Each ``tests/data/broker/<name>.pcap`` is decoded with the project's own
pieces (captures.py) and run through ``LifecycleRunner``; ``<name>.oracle.json``
holds the client's counts and ``rabbitmqctl`` snapshots (epoch seconds ``t``)
taken while the scenario ran: the state our rows give at that instant must
be the broker's.
"""

from __future__ import annotations

import collections
import functools
import re

import pytest

from amqplens.lifecycle import LifecycleRunner

from .captures import BROKER, DATA, client_ports, frames_of, oracle

SCENARIOS = sorted(p.stem for p in BROKER.glob("*.pcap"))


@functools.lru_cache(maxsize=None)
def _run(path: str) -> tuple:
    frames = frames_of(path)
    runner = LifecycleRunner()
    runner.feed(frames)
    runner.finish()
    return frames, runner.drain_deliveries(), runner.drain_flow_events(), runner.drain_request_responses(), runner.stats


def lifecycle(name: str) -> tuple:
    path = DATA / "demo" / "demo.pcap" if name == "demo" else BROKER / f"{name}.pcap"
    return _run(str(path))


def outcomes(deliveries, method=None) -> collections.Counter:
    return collections.Counter(d["outcome"] for d in deliveries if method is None or d["method"] == method)


# ---------------------------------------------------------------------------- every capture


@pytest.mark.parametrize("name", [*SCENARIOS, "demo"])
def test_every_message_frame_belongs_to_exactly_one_delivery(name):
    frames, deliveries, flows, pairs, stats = lifecycle(name)
    ids = {f["frame_id"] for f in frames}
    owner = {}
    for d in deliveries:
        for fid in d["frame_ids"]:
            assert fid in ids, f"{d['delivery_id']} names a frame that does not exist: {fid}"
            assert fid not in owner, f"{fid} is in {owner[fid]} and {d['delivery_id']}"
            owner[fid] = d["delivery_id"]
    for f in frames:
        if f.get("method_name") in ("publish", "deliver", "get-ok") or f.get("performative") == "transfer":
            assert f["frame_id"] in owner, f"{f['frame_id']} ({f.get('method_name') or 'transfer'}) belongs to no delivery"
        elif f["frame_type"] in ("header", "body") and f["direction"] == "to_server":
            assert f["frame_id"] in owner  # every content frame a client sends is part of a publish
    assert len({d["delivery_id"] for d in deliveries}) == len(deliveries)
    assert len({f["event_id"] for f in flows}) == len(flows)
    assert len({r["request_frame_id"] for r in pairs}) == len(pairs)
    assert stats["late_frames"] == 0 and stats["unsupported_frames"] == 0
    assert not [d for d in deliveries if d["flags"]]  # a clean capture has no anomaly
    assert not [f for f in flows if f["reason"] and f["entity"] != "connection"] or name in ("channel_error", "demo")


def _with_channel_snapshots(name: str) -> bool:
    """A scenario with a rabbitmqctl snapshot of channels or connections (a 1.0 one may snapshot its queues only)."""
    return any("channels" in state or "connections" in state for state in oracle(name)["broker"].values())


@pytest.mark.parametrize("name", [s for s in SCENARIOS if _with_channel_snapshots(s)])
def test_broker_snapshots_agree_with_the_rows_at_their_time(name):
    """rabbitmqctl list_channels at time t: unacked (+ acks held in a transaction), unconfirmed, prefetch, blocked;
    each channel row is matched to its connection by the client port in its name ("127.0.0.1:47872 -> ... (1)"),
    as the fault fixtures have several connections, each with a channel 1."""
    _frames, deliveries, flows, _pairs, _ = lifecycle(name)
    connection_of = {port: cid for cid, port in client_ports(BROKER / f"{name}.pcap").items()}
    for snap, state in oracle(name)["broker"].items():
        t = int(state["t"] * 1_000_000)

        def open_at(d):
            return d["sent_ts_us"] <= t and (d["settled_ts_us"] is None or d["settled_ts_us"] > t)

        for ch in state.get("channels", []):
            cid = connection_of[int(re.search(r":(\d+) -> ", ch["name"]).group(1))]
            mine = [d for d in deliveries if d["connection_id"] == cid and d["channel"] == ch["number"]]
            unacked = sum(1 for d in mine if d["method"] != "publish" and d["settle_mode"] != "auto_ack" and open_at(d))
            unconfirmed = sum(1 for d in mine if d["settle_mode"] == "confirm" and open_at(d))
            assert unacked == ch["messages_unacknowledged"] + ch["acks_uncommitted"], snap
            assert unconfirmed == ch["messages_unconfirmed"], snap
            rows = [f for f in flows if f["entity"] == "channel" and f["connection_id"] == cid and f["channel"] == ch["number"]
                    and f["ts_us"] <= t]
            assert (rows[-1]["prefetch_count"] if rows else 0) == ch["prefetch_count"], snap
            if rows and rows[-1]["event"] in ("deliver", "settle"):
                assert rows[-1]["in_flight"] == unacked
        for conn in state.get("connections", []):
            cid = connection_of[conn["peer_port"]]
            rows = [f for f in flows if f["entity"] == "connection" and f["connection_id"] == cid and f["ts_us"] <= t]
            assert bool(rows and rows[-1]["blocked"]) == (conn["state"] == "blocked"), snap


# ---------------------------------------------------------------------------- per scenario


def test_publish_confirms():
    client = oracle("publish_confirms")["client"]
    _, d, f, _, _ = lifecycle("publish_confirms")
    pubs = [x for x in d if x["method"] == "publish"]
    assert len(pubs) == client["published"]
    out = outcomes(pubs)
    assert out["returned"] == client["returned"]
    # the broker confirmed every message, the returned one too (its ack follows the return)
    assert out["confirmed"] + out["returned"] == client["confirmed"]
    assert sorted(x["delivery_tag"] for x in pubs) == list(range(1, client["published"] + 1))
    (ret,) = [x for x in pubs if x["outcome"] == "returned"]
    assert ret["routing_key"] == "no-such-binding"
    queue = oracle("publish_confirms")["broker"]["after_confirms"]["queues"][0]
    assert queue["messages"] == out["confirmed"]


def test_consume_prefetch_ack():
    o = oracle("consume_prefetch_ack")
    client, facts = o["client"], o["facts"]
    _, d, f, _, _ = lifecycle("consume_prefetch_ack")
    delivered = [x for x in d if x["method"] == "deliver"]
    assert len(delivered) == client["delivered"] and outcomes(delivered) == {"acked": client["acked"]}
    assert outcomes(d, "publish") == {"confirmed": client["confirmed"]}
    assert len({x["settled_by_frame_id"] for x in delivered}) == client["ack_frames"]
    first_ack = min(x["settled_ts_us"] for x in delivered)
    assert sum(1 for x in delivered if x["sent_ts_us"] < first_ack) == facts["delivered_before_first_ack"]
    # the prefetch limit is reached exactly when the broker stops delivering
    full = [x for x in f if x["entity"] == "consumer" and x["at_limit"]]
    snapshot = o["broker"]["prefetch_full"]["channels"][0]
    assert full and {x["in_flight"] for x in full} == {snapshot["prefetch_count"]}
    assert max(x["in_flight"] for x in f if x["entity"] == "channel") == snapshot["prefetch_count"]


def test_nack_reject():
    client = oracle("nack_reject")["client"]
    _, d, *_ = lifecycle("nack_reject")
    delivered = [x for x in d if x["method"] == "deliver"]
    out = outcomes(delivered)
    assert len(delivered) == client["delivered"]
    assert out["acked"] == client["acked"]
    assert out["nacked_requeue"] + out["nacked_drop"] == client["nacked"]
    assert out["rejected_requeue"] + out["rejected_drop"] == client["rejected"]
    assert out["nacked_requeue"] + out["rejected_requeue"] == client["requeued"]
    assert out["nacked_drop"] + out["rejected_drop"] == client["dead_lettered"]
    assert sum(1 for x in delivered if x["redelivered"]) == client["redelivered"]
    frames = {k: len({x["settled_by_frame_id"] for x in delivered if x["outcome"].startswith(k)}) for k in ("acked", "nacked", "rejected")}
    assert frames == {"acked": client["ack_frames"], "nacked": client["nack_frames"], "rejected": client["reject_frames"]}
    assert len([x for x in d if x["method"] == "publish"]) == client["published"]


def test_basic_get():
    o = oracle("basic_get")
    client = o["client"]
    _, d, _, pairs, _ = lifecycle("basic_get")
    gets = [x for x in d if x["method"] == "get-ok"]
    assert len(gets) == client["get_ok"] and outcomes(gets) == {"acked": client["acked"], "auto_ack": client["get_ok"] - client["acked"]}
    assert {x["queue"] for x in gets} == {"basic_get"}
    answers = collections.Counter(x["response"] for x in pairs if x["request"] == "basic.get")
    assert answers == {"basic.get-ok": client["get_ok"], "basic.get-empty": client["get_empty"]}


def test_tx():
    client = oracle("tx")["client"]
    _, d, *_ = lifecycle("tx")
    assert outcomes(d, "publish") == {"committed": client["committed"], "rolled_back": client["rolled_back"]}
    (get,) = [x for x in d if x["method"] == "get-ok"]
    assert (get["outcome"], get["settle_mode"]) == ("acked", "tx")


def test_mandatory_return():
    o = oracle("mandatory_return")
    _, d, *_ = lifecycle("mandatory_return")
    assert len(d) == o["client"]["published"]
    returned = [x for x in d if x["outcome"] == "returned"]
    assert [(x["exchange"], x["routing_key"]) for x in returned] == [(r[2], r[3]) for r in o["facts"]["returns"]]
    assert outcomes(d)["sent"] == o["broker"]["after_publish"]["queues"][0]["messages"]


def test_channel_error():
    o = oracle("channel_error")
    _, d, f, pairs, _ = lifecycle("channel_error")
    errors = [(x["reply_code"], x["response"]) for x in pairs if x["status"] == "error"]
    codes = [c for c, _text in o["facts"]["channel_close"]]
    # the two declares fail by a channel.close; the publish and the ack are not requests
    assert errors == [(codes[0], "channel.close"), (codes[1], "channel.close")]
    assert [x["reason"] for x in f if x["reason"]] == ["ack_of_unknown_tag"]
    broker_closes = [x for x in pairs if x["request"] == "channel.close" and x["request_frame_id"].split("-")[1] == "c"]
    assert len(broker_closes) == o["client"]["channel_errors"] and {x["status"] for x in broker_closes} == {"ok"}
    assert len(d) == o["client"]["published"]


def test_large_body_frames_are_all_listed():
    o = oracle("large_body")
    _, d, *_ = lifecycle("large_body")
    pubs = [x for x in d if x["method"] == "publish"]
    gets = [x for x in d if x["method"] == "get-ok"]
    assert [x["body_size"] for x in pubs] == [x["body_size"] for x in gets] == o["facts"]["body_sizes"]
    frame_max = o["facts"]["frame_max"] - 8
    expected = [2 + -(-n // frame_max) for n in o["facts"]["body_sizes"]]  # method, header, ceil(n / payload) bodies
    assert [len(x["frame_ids"]) for x in pubs] == [len(x["frame_ids"]) for x in gets] == expected
    assert [x["body_sha256"] for x in pubs] == [x["body_sha256"] for x in gets]
    assert [x["message_id"] for x in pubs] == [str(n) for n in o["facts"]["body_sizes"]]


def test_connection_blocked():
    o = oracle("connection_blocked")
    _, d, f, *_ = lifecycle("connection_blocked")
    assert len(d) == o["client"]["published"]
    conn = [(x["event"], x["blocked"], x["reason"]) for x in f if x["entity"] == "connection"]
    assert conn == [("blocked", True, "low on memory"), ("unblocked", False, None)]


def test_connection_forced():
    o = oracle("connection_forced")
    *_, pairs, _ = lifecycle("connection_forced")
    (close,) = [x for x in pairs if x["request"] == "connection.close"]
    assert close["status"] == "unanswered"  # pika answered with a FIN
    assert {x["status"] for x in pairs if x is not close} == {"ok"}
    assert o["facts"]["connection_close"][0] == 320


def test_topology_and_heartbeat_requests_are_all_answered():
    for name in ("topology", "heartbeat"):
        _, d, _, pairs, _ = lifecycle(name)
        assert {x["status"] for x in pairs} == {"ok"}
        assert len([x for x in d if x["method"] == "publish"]) == oracle(name)["client"]["published"]
    frames, _, _, pairs, _ = lifecycle("topology")
    requests = collections.Counter(x["request"] for x in pairs)
    sent = collections.Counter(f"{f['class_name']}.{f['method_name']}" for f in frames if f["frame_type"] == "method")
    for name in ("exchange.declare", "exchange.bind", "exchange.unbind", "queue.declare", "queue.bind", "queue.unbind",
                 "queue.purge", "queue.delete", "exchange.delete"):
        assert requests[name] == sent[name] > 0, name


# ---------------------------------------------------------------------------- 1.0


def test_amqp10_outcomes():
    client = oracle("amqp10_proton")["client"]
    _, d, _, pairs, _ = lifecycle("amqp10_proton")
    sent = [x for x in d if x["direction"] == "to_broker"]
    received = [x for x in d if x["direction"] == "from_broker"]
    assert len(sent) == client["published"] and outcomes(sent) == {"accepted": client["accepted_by_broker"]}
    assert len(received) == client["delivered"]
    assert outcomes(received) == {"accepted": client["accepted"], "released": client["released"], "rejected": client["rejected"]}
    assert sum(1 for x in received if x["redelivered"]) == client["redelivered"]
    assert {x["settle_mode"] for x in sent} == {"mixed/first"} and {x["settle_mode"] for x in received} == {"unsettled/first"}
    assert {x["queue"] for x in d} == {"/queue/amqp10_proton"}
    assert [x["message_id"] for x in sent] == [f"m{i}" for i in range(5)]
    assert {(x["request"], x["status"]) for x in pairs} == {("open", "ok"), ("begin", "ok"), ("attach", "ok"), ("detach", "ok"), ("close", "ok")}


def test_amqp10_credit_starvation_interval():
    """The receiver grants credit 5; the broker sends 5 messages and sits at zero credit until the next grant."""
    frames, _, flows, _, _ = lifecycle("amqp10_proton")
    cid = frames[0]["connection_id"]
    link = [x for x in flows if x["entity"] == "link" and x["link_handle"] == 1]
    starts = [x for i, x in enumerate(link) if x["at_limit"] and (i == 0 or not link[i - 1]["at_limit"])]
    ends = [link[link.index(s) + 1] for s in starts]
    # the 5th transfer of the receiving link (stream offset 1304 to the client) empties the credit ...
    assert [s["frame_id"] for s in starts] == [f"{cid}-c-1304"] and starts[0]["event"] == "transfer"
    # ... and the client's flow at offset 779 (delivery-count 5, link-credit 4) refills it
    assert [e["frame_id"] for e in ends] == [f"{cid}-s-779"] and (ends[0]["event"], ends[0]["link_credit"]) == ("credit", 4)
    assert ends[0]["ts_us"] - starts[0]["ts_us"] > 0


# ---------------------------------------------------------------------------- the demo capture


def test_demo_totals_agree_with_each_scenario_client():
    scenarios = oracle_demo()["scenarios"]
    _, d, f, pairs, stats = lifecycle("demo")
    total = lambda key: sum(s["client"].get(key, 0) for s in scenarios.values())  # noqa: E731
    out091 = outcomes([x for x in d if x["dialect"] != "1.0"])
    pubs = [x for x in d if x["method"] == "publish"]
    assert len(pubs) == total("published") - scenarios["amqp10_proton"]["client"]["published"]
    assert out091["confirmed"] + sum(1 for x in pubs if x["outcome"] == "returned" and x["settle_mode"] == "confirm") == total("confirmed")
    assert out091["returned"] == total("returned")
    assert out091["acked"] == total("acked")
    assert out091["committed"] == scenarios["tx"]["client"]["committed"]
    assert len([x for x in d if x["method"] == "deliver"]) == total("delivered") - scenarios["amqp10_proton"]["client"]["delivered"]
    assert len([x for x in d if x["method"] == "get-ok"]) == total("get_ok")
    assert len([x for x in f if x["entity"] == "connection" and x["event"] == "blocked"]) >= 1
    assert stats["connections"] == len(scenarios)


def oracle_demo() -> dict:
    import json

    return json.loads((DATA / "demo" / "demo.oracle.json").read_text())
