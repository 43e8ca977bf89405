"""Captures of real load (tools/gen_load.py), read back with dpkt and pika's own frame decoder.

Checked from the bytes: a delivery is a message that was published with the same routing key and body, first
deliveries leave each queue in publish order (FIFO), bodies repeat (a few per routing key), most messages carry no
message-id, one queue is hot, publishers get confirms, consumers ack several at once, and the short-lived
connections open, publish and close.
"""

from __future__ import annotations

import bisect
import collections

import dpkt
import pika.frame
import pika.spec as spec
import pytest

from tools.gen_load import BODIES_PER_KEY, HOT_KEY, generate_load


def _streams(path):
    """Per (connection, direction): the TCP payload in order (the generator neither loses nor reorders) and, per
    packet, (stream offset, time)."""
    data, marks = collections.defaultdict(bytearray), collections.defaultdict(list)
    with open(path, "rb") as fh:
        for ts, buf in dpkt.pcap.Reader(fh):
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            to_broker = tcp.dport == 5672
            key = ((tcp.sport, tcp.dport) if to_broker else (tcp.dport, tcp.sport), "c" if to_broker else "s")
            if tcp.data:
                marks[key].append((len(data[key]), ts))
                data[key] += tcp.data
    return {k: (data[k], marks[k]) for k in data}


def _messages(stream: bytes, marks: list):
    """(time, method, properties, body) of each message of a stream, and every method, after the protocol header."""
    starts = [o for o, _ in marks]
    pos = 8 if stream.startswith(b"AMQP") else 0
    msgs, cur, methods = [], None, []
    while pos < len(stream):
        at = marks[bisect.bisect_right(starts, pos) - 1][1]
        n, frame = pika.frame.decode_frame(bytes(stream[pos:pos + 300_000]))
        pos += n
        if isinstance(frame, pika.frame.Method):
            methods.append(frame.method)
            if isinstance(frame.method, (spec.Basic.Publish, spec.Basic.Deliver)):
                cur = [at, frame.method, None, b""]
                msgs.append(cur)
        elif isinstance(frame, pika.frame.Header):
            cur[2] = frame.properties
        elif isinstance(frame, pika.frame.Body):
            cur[3] += frame.fragment
    return msgs, methods


@pytest.fixture(scope="module")
def load_capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "load.pcap"
    truth = generate_load(path, 4, profile="load", seed=5, short=300)
    return path, truth


def test_deliveries_are_published_messages_in_fifo_order(load_capture):
    path, truth = load_capture
    published, delivered = collections.defaultdict(list), collections.defaultdict(list)
    all_methods = []
    for (_, d), (data, marks) in _streams(path).items():
        msgs, methods = _messages(data, marks)
        all_methods += methods
        for at, m, props, body in msgs:
            (published if d == "c" else delivered)[m.routing_key].append((at, body, m, props))
    for v in (*published.values(), *delivered.values()):
        v.sort(key=lambda x: x[0])
        v[:] = [x[1:] for x in v]
    n_pub = sum(len(v) for v in published.values())
    n_del = sum(len(v) for v in delivered.values())
    assert (n_pub, n_del) == (truth["messages_published"], truth["messages_delivered"]) and n_del > 0.8 * n_pub
    for rk, dels in delivered.items():
        firsts = [body for body, m, _ in dels if not m.redelivered]
        pubs = [body for body, _, _ in published[rk]]
        assert firsts == pubs[:len(firsts)]  # one queue per routing key, first in first out
        assert {body for body, _, _ in dels} <= set(pubs)
    assert all(len({b for b, _, _ in v}) <= BODIES_PER_KEY for v in published.values())
    hot = len(published[HOT_KEY])
    assert hot > 0.4 * n_pub and hot == max(len(v) for v in published.values())
    no_id = sum(props.message_id is None for v in published.values() for _, _, props in v)
    assert no_id > 0.8 * n_pub
    kinds = collections.Counter(type(m).__name__ for m in all_methods)
    assert kinds["Select"] > 0 and kinds["Qos"] > 0  # confirm.select and basic.qos
    acks = [m for m in all_methods if isinstance(m, spec.Basic.Ack)]
    assert any(a.multiple for a in acks)
    assert any(isinstance(m, (spec.Basic.Nack, spec.Basic.Reject)) and m.requeue for m in all_methods)
    assert any(m.redelivered for v in delivered.values() for _, m, _ in v)


def test_short_lived_connections(load_capture):
    _, truth = load_capture
    conns = truth["connections"]
    assert len(conns) > 200 and sum(c["ended"] == "fin" for c in conns) == len(conns)
    short = sorted(c["last_ts_us"] - c["first_ts_us"] for c in conns)[len(conns) // 2]
    longest = max(c["last_ts_us"] - c["first_ts_us"] for c in conns)
    assert short * 20 < longest
