"""The fault fixtures of issue 34 (tools/fault_fixtures.py): real-broker captures of things gone wrong
on purpose, for the findings rules. Here only that each decodes whole and that its frames are tshark's
and the client's; the findings themselves are tested where they are computed.

Oracles: tshark's dissection of the same file (frame types and methods per connection direction,
`-o tcp.reassemble_out_of_order:TRUE`) and the counts the fixture's client kept itself
(``NAME.oracle.json``). One decode per capture for the module, no CLI.

Bad input here is the faults themselves: a connection cut by the broker for missed heartbeats,
connections refused before tune, a capture ending with two connections open mid-conversation, a
connection closed for channel.flow active=false (540), 1.0 sessions ended by the broker after modified
dispositions, a 1.0 sender to a peer that withholds link credit (on 127.0.0.2:5672, not the broker).
"""

from __future__ import annotations

import collections

import pytest

from amqplens.decode import decode_capture
from tests.v0_9_1 import tshark_oracle
from tests.v1_0 import tshark_oracle as tshark_oracle_10

from .captures import BROKER, oracle

FAULTS = ("slow_consumer", "requeue_loop", "unsettled_at_end", "heartbeat_timeout", "refused_login",
          "consumer_cancelled", "churn", "publish_nacked", "clean_traffic", "channel_flow", "amqp10_modified",
          "amqp10_credit_starved")
AMQP_1_0 = ("amqp10_modified", "amqp10_credit_starved")  # python-qpid-proton clients
TYPE_CODE = {"method": 1, "header": 2, "body": 3, "heartbeat": 8}
PRESENT = [name for name in FAULTS if (BROKER / f"{name}.pcap").exists()]

# (direction, class id, method id) on the wire -> the client's own count of it, per fixture
CLIENT_COUNTS = {
    "slow_consumer": {("to_client", 60, 60): "delivered", ("to_server", 60, 80): "ack_frames",
                      ("to_server", 60, 40): "published"},
    "requeue_loop": {("to_client", 60, 60): "delivered", ("to_server", 60, 120): "nacked_requeue",
                     ("to_server", 60, 80): "acked"},
    "publish_nacked": {("to_client", 60, 120): "broker_nacked_frames", ("to_client", 60, 80): "confirmed_frames",
                       ("to_server", 60, 40): "published"},
    "churn": {("to_server", 60, 40): "published"},
    "clean_traffic": {("to_client", 60, 60): "delivered", ("to_server", 60, 40): "published"},
    "consumer_cancelled": {("to_client", 60, 30): "cancelled_by_broker"},
    "channel_flow": {("to_server", 20, 20): "flow_requests", ("to_server", 60, 40): "published"},
}
# 1.0: (direction, performative) -> the client's counts that add up to it (every message fits one transfer)
CLIENT_COUNTS_10 = {
    "amqp10_modified": {("to_server", "transfer"): ["published"], ("to_client", "transfer"): ["delivered"],
                        ("to_server", "disposition"): ["accepted", "rejected", "modified"]},
    "amqp10_credit_starved": {("to_server", "transfer"): ["published"]},
}


@pytest.fixture(scope="module")
def decoded():
    return {name: decode_capture(BROKER / f"{name}.pcap", capture_id=name) for name in PRESENT}


def method_counts(frames) -> collections.Counter:
    return collections.Counter((f["direction"], f["class_id"], f["method_id"]) for f in frames if f["frame_type"] == "method")


def test_every_fault_fixture_is_there():
    assert PRESENT == list(FAULTS)


@pytest.mark.parametrize("name", PRESENT)
def test_decodes_whole(name, decoded):
    cap = decoded[name]
    assert cap.capture_errors == [] and cap.gaps == []
    for conn in cap:
        assert conn.errors == [] and conn.gaps == {"to_server": 0, "to_client": 0}, conn.record.connection_id
        assert conn.dialect == ("1.0" if name in AMQP_1_0 else "0-9-1")
    assert sum(1 for f in cap.frames() if f["decode_error"]) == 0


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_oracle.available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", [n for n in PRESENT if n not in AMQP_1_0])
def test_frame_and_method_counts_are_tsharks(name, decoded):
    theirs: collections.Counter = collections.Counter()
    for (_stream, direction), frames in tshark_oracle.frames(str(BROKER / f"{name}.pcap")).items():
        theirs.update((direction, ftype, cls, method) for _ch, ftype, cls, method, _tag in frames)
    ours = collections.Counter((f["direction"], TYPE_CODE[f["frame_type"]], f["class_id"] if f["frame_type"] == "method" else None,
                                f["method_id"]) for f in decoded[name].frames() if f["frame_type"] != "protocol_header")
    assert ours == theirs and sum(ours.values()) > 10
    assert len(decoded[name]) == len(tshark_oracle.stream_ids(str(BROKER / f"{name}.pcap")))


@pytest.mark.parametrize("name", [n for n in PRESENT if n in CLIENT_COUNTS])
def test_methods_on_the_wire_are_the_clients_counts(name, decoded):
    counts, client = method_counts(decoded[name].frames()), oracle(name)["client"]
    for key, what in CLIENT_COUNTS[name].items():
        assert counts[key] == client[what] > 0, (key, what)


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_oracle_10.available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", [n for n in PRESENT if n in AMQP_1_0])
def test_performative_counts_are_tsharks(name, decoded):
    """1.0: per direction, the frames of each performative (SASL frames by their code) as tshark counts them."""
    theirs_by_conn, _ = tshark_oracle_10.frames(str(BROKER / f"{name}.pcap"))
    theirs = collections.Counter((direction, f[1]) for (_port, direction), frames in theirs_by_conn.items()
                                 for f in frames if f[0] != "header")
    ours = collections.Counter((f["direction"], f["descriptor"]) for f in decoded[name].frames() if f["frame_type"] != "protocol_header")
    assert ours == theirs and sum(ours.values()) > 10
    assert len(decoded[name]) == len(theirs_by_conn) // 2


@pytest.mark.parametrize("name", [n for n in PRESENT if n in CLIENT_COUNTS_10])
def test_transfers_and_dispositions_are_the_clients_counts(name, decoded):
    counts = collections.Counter((f["direction"], f["performative"]) for f in decoded[name].frames())
    client = oracle(name)["client"]
    for key, what in CLIENT_COUNTS_10[name].items():
        assert counts[key] == sum(client[w] for w in what) > 0, (key, what)
