"""The findings rules the first fault fixtures left without a positive test (issue 34): credit_starved, modified
dispositions in rejected_by_consumer, channel_flow_off.

Expected findings come from what each scenario did (tools/fault_fixtures.py, its ``*.oracle.json``: the client's
own counts and timings, the broker's log) and, for the premises, from tshark's reading of the same capture; never
from our output. Where RabbitMQ 3.10 cannot be made to cause the condition, the test says which source stands in:

- credit_starved (amqp10_credit_starved.pcap): RabbitMQ 3.10's 1.0 plugin grants incoming links a constant 65536 credit and, in the fixture, did
  not even hold back transfers during a memory alarm; the starved sender is the same scenario's second link, to a
  Qpid Proton peer (the script's own listener on 127.0.0.2:5672) that withholds credit for 1.5 s twice.
- channel_flow_off: RabbitMQ refuses channel.flow active=false (540 NOT_IMPLEMENTED, tests/data/broker/channel_flow.pcap)
  and never sends it; the rule is tested on a conversation built byte for byte from the 0-9-1 spec
  (tests/findings/spec_capture.py), read back by tshark first.

Bad input tried: a broker that answers a modified disposition by ending the session with an error, a broker that
closes the connection for a method it does not implement, a sender link left without credit most of its life.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.findings import spec_capture
from tests.findings.conftest import BROKER
from tests.findings.test_findings import found, oracle
from tests.oracles.tshark_json import available as tshark_available
from tests.v1_0 import tshark_oracle as tshark10

pytestmark = pytest.mark.spark
FLOW = 19  # the 1.0 flow performative's code


def above_info(rows) -> list[str]:
    return sorted(r["kind"] for r in rows if r["severity"] != "info")


def client_names(findings_lake, scenario: str) -> dict[str, str]:
    """connection_id -> the name the scenario gave the client (0-9-1 connection_name, 1.0 container-id)."""
    _, store, ids, _ = findings_lake
    cols = ["connection_id", "client_properties_json", "client_container_id"]
    return {r["connection_id"]: r["client_container_id"] or json.loads(r["client_properties_json"] or "{}").get("connection_name")
            for r in store.read_arrow("connections", cols, [ids[scenario]]).to_pylist()}


def share_in(summary: str) -> float:
    return int(re.search(r"(\d+)% of", summary).group(1)) / 100


# ------------------------------------------------------------------ credit_starved
@pytest.mark.tshark
@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_the_broker_flows_of_the_credit_fixture_as_tshark_reads_them():
    """The premise, from tshark: RabbitMQ's flows on its link say 65536 and nothing less; the proton peer's grant 2
    each time (the script's CREDIT_GRANTS)."""
    frames, _ = tshark10.frames(str(BROKER / "amqp10_credit_starved.pcap"))
    credits = {port: [f[5] for f in entries if f[0] != "header" and f[1] == FLOW and f[2] is not None]
               for (port, direction), entries in frames.items() if direction == "to_client"}
    assert sorted(credits.values()) == [[2, 2, 2], [65536]]


def test_a_sender_left_without_credit_is_starved(findings_lake):
    facts = oracle("amqp10_credit_starved")["facts"]
    names = client_names(findings_lake, "amqp10_credit_starved")
    (f,) = found(findings_lake, "amqp10_credit_starved", "credit_starved")
    assert names[f["connection_id"]] == "fixture-amqp10_credit_starved-sender" and f["severity"] == "warning"
    # the client measured 3.05 s without credit of the link's 3.07 s from attach to detach
    assert share_in(f["summary"]) == pytest.approx(facts["peer_starved_s"] / facts["peer_link_life_s"], abs=0.1)
    assert f["count"] / 1000 == pytest.approx(facts["peer_starved_s"], abs=0.3)  # count: milliseconds without credit
    assert f["start_ts"].timestamp() <= facts["peer"]["attach_ts"] + 0.1
    assert f["end_ts"].timestamp() >= facts["peer"]["detach_ts"] - 0.1


def test_rabbitmqs_link_during_the_memory_alarm_is_not_starved(findings_lake):
    facts = oracle("amqp10_credit_starved")["facts"]["rabbitmq"]
    assert facts["credit_during_alarm"] > 0 and facts["alarm_cleared_ts"] > facts["alarm_set_ts"]
    log = (BROKER / "amqp10_credit_starved.rabbitmq.log").read_text()
    assert "memory resource limit alarm set" in log and "memory resource limit alarm cleared" in log
    rows = found(findings_lake, "amqp10_credit_starved")
    names = client_names(findings_lake, "amqp10_credit_starved")
    assert not [r for r in rows if names.get(r["connection_id"]) == "fixture-amqp10_credit_starved-rabbitmq" and r["severity"] != "info"]
    assert above_info(rows) == ["credit_starved"]  # README: every transfer accepted, both connections closed cleanly


# ------------------------------------------------------------------ modified dispositions
def test_modified_and_rejected_dispositions(findings_lake):
    client = oracle("amqp10_modified")["client"]
    rows = found(findings_lake, "amqp10_modified", "rejected_by_consumer")
    by_outcome = {re.search(r"outcome=(\w+)", r["evidence"]).group(1): r["count"] for r in rows}
    assert by_outcome == {"modified": client["modified"], "rejected": client["rejected"]}  # 2 modified, 1 rejected
    assert {r["severity"] for r in rows} == {"info"}
    assert "settled modified" in next(r["summary"] for r in rows if "outcome=modified" in r["evidence"])


def test_the_broker_ends_a_session_at_each_modified(findings_lake):
    errors = oracle("amqp10_modified")["facts"]["remote_errors"]
    (f,) = found(findings_lake, "amqp10_modified", "link_error")
    assert f["count"] == len(errors) == 2 and {e["on"] for e in errors} == {"end"}
    assert f"The broker closed {len(errors)} session (end)s with {errors[0]['condition']}." == f["summary"]
    assert above_info(found(findings_lake, "amqp10_modified")) == ["link_error"]


# ------------------------------------------------------------------ channel.flow
def test_rabbitmq_refuses_channel_flow_off(findings_lake):
    code, text = oracle("channel_flow")["facts"]["connection_close"]
    assert (code, text) == (540, "NOT_IMPLEMENTED - active=false")  # pika's ConnectionClosedByBroker
    (f,) = found(findings_lake, "channel_flow", "connection_error")
    assert f["severity"] == "critical" and f"{code} NOT_IMPLEMENTED" in f["summary"] and "broker" in f["summary"]
    assert not found(findings_lake, "channel_flow", "channel_flow_off")  # flow never went off: the broker refused
    assert above_info(found(findings_lake, "channel_flow")) == ["connection_error"]


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_tshark_reads_the_spec_built_capture(tmp_path):
    """The builder's bytes are the spec's methods: tshark decodes the server's channel.flow off at 1.0 s and on at
    3.5 s, each answered by flow-ok, and nothing malformed."""
    path = tmp_path / "flow.pcap"
    path.write_bytes(spec_capture.channel_flow_pcap())
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "amqp.method.class == 20", "-T", "fields",
                          "-e", "frame.time_relative", "-e", "tcp.srcport", "-e", "amqp.method.method",
                          "-e", "amqp.method.arguments.active"], capture_output=True, text=True, check=True).stdout
    flows = [(round(float(t), 3), int(port), int(m), a) for t, port, m, a in (ln.split("\t") for ln in out.splitlines())
             if m in ("20", "21")]
    assert flows == [(1.0, 5672, 20, "0"), (1.001, 40100, 21, "0"), (3.5, 5672, 20, "1"), (3.501, 40100, 21, "1")]
    malformed = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "_ws.malformed || _ws.expert.severity >= warning"],
                               capture_output=True, text=True, check=True).stdout
    assert malformed == ""


def test_channel_flow_off_on_the_spec_built_capture(findings_lake):
    """The server turns flow off at FLOW_OFF_S and on at FLOW_ON_S (spec_capture.conversation): 2.5 s off, on
    channel 1 of the connection named spec-channel-flow, opened at 0.009 s and closed at 4.0 s."""
    (f,) = found(findings_lake, "channel_flow_spec", "channel_flow_off")
    assert client_names(findings_lake, "channel_flow_spec")[f["connection_id"]] == spec_capture.CONNECTION_NAME
    assert f["severity"] == "warning" and f["channel"] == 1 and f["entity_kind"] == "channel"
    off_s = spec_capture.FLOW_ON_S - spec_capture.FLOW_OFF_S
    assert f["count"] / 1000 == pytest.approx(off_s, abs=0.01)  # count: milliseconds with flow off
    assert f["start_ts"].timestamp() == pytest.approx(spec_capture.START_S + spec_capture.FLOW_OFF_S, abs=0.002)
    assert "2.5 s with channel.flow off" in f["summary"] or "2.50 s with channel.flow off" in f["summary"]
    assert above_info(found(findings_lake, "channel_flow_spec")) == ["channel_flow_off"]
