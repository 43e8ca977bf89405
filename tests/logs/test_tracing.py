"""RabbitMQ message traces (rabbitmq_tracing text and JSON, firehose JSON lines) into delivery records.

Oracle: what the pika client of tools/log_fixtures.py published and consumed
(broker_logs.oracle.json counts; the bodies and message ids it sent are
written in that script: ``message {i}`` as m{i} to the queue, ``order {i}``
as o{i} to the topic exchange with routing key orders.eu.{i}).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from amqplens.logs.erlang_terms import parse_term, proplist
from tests.conftest import DATA
from tests.logs.helpers import of_kind, records

LOGS = DATA / "logs"
TRACES = ["tracing_text.log", "tracing_json.log", "firehose.jsonl"]
QUEUE, TOPIC = "broker_logs.q", "broker_logs.topic"


def _oracle():
    return json.loads((LOGS / "broker_logs.oracle.json").read_text())


def _sent() -> dict:
    """message_id -> (exchange, routing key, body) as the client script publishes them."""
    from tools.log_fixtures import PUBLISHED, TOPIC_PUBLISHED

    out = {f"m{i}": ("", QUEUE, f"message {i}".encode()) for i in range(PUBLISHED)}
    out |= {f"o{i}": (TOPIC, f"orders.eu.{i}", f"order {i}".encode()) for i in range(TOPIC_PUBLISHED)}
    return out


@pytest.mark.parametrize("name", TRACES)
def test_every_publish_and_delivery_the_client_counted_is_traced(name):
    oracle, sent = _oracle(), _sent()
    recs = records(LOGS / name, split_size=2048)
    assert of_kind(recs, "error") == []
    rows = of_kind(recs, "delivery")
    published = [r for r in rows if r["method"] == "publish"]
    delivered = [r for r in rows if r["method"] == "deliver"]
    assert len(published) == oracle["client"]["published"] == len(sent)
    assert len(delivered) == oracle["client"]["delivered"]
    for r in published:
        exchange, key, body = sent[r["message_id"]]
        assert (r["exchange"], r["routing_key"], r["direction"]) == (exchange, key, "to_broker")
        assert (r["body_size"], r["body_sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    assert sorted(r["message_id"] for r in delivered) == sorted(sent)
    assert {r["queue"] for r in delivered} == {QUEUE} and {r["direction"] for r in delivered} == {"from_broker"}
    first = next(r for r in published if r["message_id"] == "m0")
    assert (first["content_type"], first["delivery_mode"], json.loads(first["properties_json"])["headers"]) == ("text/plain", 2, {"seq": 0})
    assert next(r for r in published if r["message_id"] == "o1")["correlation_id"] == "c1"
    trace = json.loads(first["trace_json"])
    assert (trace["user"], trace["vhost"], trace["routed_queues"]) == ("guest", "/", [QUEUE])
    # one connection published and consumed; the tracer names it as RabbitMQ does
    assert {(r["client_ip"], r["server_port"]) for r in rows} == {("127.0.0.1", 5672)} and len({r["client_port"] for r in rows}) == 1


def test_text_and_json_traces_of_one_run_agree_and_firehose_has_no_clock():
    def key(r):
        return r["method"], r["message_id"], r["channel"], r["body_sha256"], r["routing_key"]

    text, js, fire = (of_kind(records(LOGS / n), "delivery") for n in TRACES)
    assert sorted(map(key, text)) == sorted(map(key, js)) == sorted(map(key, fire))
    assert all(r["ts_us"] is not None for r in text + js) and all(r["ts_us"] is None for r in fire)
    # the two tracer files stamp the same message within a few milliseconds
    stamps = {(r["method"], r["message_id"]): r["ts_us"] for r in js}
    assert max(abs(stamps[(r["method"], r["message_id"])] - r["ts_us"]) for r in text) < 50_000


def test_erlang_field_table_of_the_text_trace():
    term = parse_term('[{<<"message_id">>,longstr,<<"m0">>},{<<"h">>,table,[{<<"seq">>,signedint,0}]},'
                      '{<<"b">>,array,[{longstr,<<"x">>}]},{<<"raw">>,binary,<<1,2,"ab">>}]')
    assert proplist(term) == {"message_id": "m0", "h": {"seq": 0}, "b": ["x"], "raw": "\x01\x02ab"}


def test_bad_trace_entries_become_error_rows_and_the_rest_is_kept(tmp_path):
    lines = (LOGS / "tracing_json.log").read_bytes().splitlines(keepends=True)
    broken = dict(json.loads(lines[1]), payload="not base64!")
    bad = [lines[0][:40] + b"\n",  # a line cut short
           json.dumps(broken).encode() + b"\n",  # a payload that is not base64
           b'{"type": "published"}\n']  # no timestamp
    path = tmp_path / "trace.json"
    path.write_bytes(lines[0] + b"".join(bad) + b"".join(lines[1:]))
    recs = records(path)
    assert [(e["line_number"], e["reason"]) for e in of_kind(recs, "error")] == [(2, "bad_trace_entry"), (3, "bad_trace_entry"), (4, "bad_trace_entry")]
    assert len(of_kind(recs, "delivery")) == len(lines)

    text = (LOGS / "tracing_text.log").read_bytes()
    cut = text[: text.index(b"Payload:", 2000)]  # the last block stops before its payload
    path.write_bytes(cut)
    recs = records(path)
    (err,) = of_kind(recs, "error")
    assert err["reason"] == "bad_trace_entry" and "no Payload" in err["detail"]
    assert len(of_kind(recs, "delivery")) == cut.count(b"=" * 80) - 1
